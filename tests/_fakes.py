"""Fast stand-ins behind the project's own protocols, for tests about control flow rather than quality.

``HashEmbedder`` implements ``memory.embeddings.base.Embedder``: a bag of hashed words, so texts
sharing words are near each other (dense search still ranks sensibly) at a tiny fraction of the real
model's cost. ``delay_s`` per text imitates a real model's time inside the write transaction.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import numpy as np

from memory.embeddings.base import normalize
from memory.ftsquery import terms


class HashEmbedder:
    name = "test-hash-embedder"

    def __init__(self, dim: int = 64, delay_s: float = 0.0) -> None:
        self.dim = dim
        self.delay_s = delay_s
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings")
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in terms(text, keep_stopwords=True) or ["(empty)"]:
                h = int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                   "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        if self.delay_s:
            time.sleep(self.delay_s * len(texts))
        return normalize(out)


class ScriptedActs:
    """An ``ActModel`` + ``LinkModel`` that reads its labels from the test: ``{text: (kind, owner, link)}``.

    ``link`` is ``(kind, text of the earlier message)`` or None; texts not in the script are chatter. For tests
    about what the pass and the group state do with labels, not about how good the labels are.
    """

    version = "scripted-1"

    def __init__(self, script: dict[str, tuple]) -> None:
        self.script = script
        self.calls = 0

    def acts(self, turns, history, people):
        from memory.analysis.types import ACT_KINDS, Act

        self.calls += 1
        out = []
        for t in turns:
            kind, owner, _ = self.script.get(t.message.text, ("chatter", None, None))
            probs = tuple(0.9 if k == kind else 0.1 / (len(ACT_KINDS) - 1) for k in ACT_KINDS)
            out.append(Act(kind, 0.9, probs, owner, "" if kind == "chatter" else t.message.text.split()[0]))
        return out

    def links(self, turns, acts, history):
        from memory.analysis.types import Link

        seen = {t.message.text: t.message.id for t in (*history.acts, *history.recent)}
        out = []
        for t in turns:
            link = self.script.get(t.message.text, (None, None, None))[2]
            out.append(Link(link[0], seen[link[1]], 0.8) if link else None)
            seen[t.message.text] = t.message.id
        return out
