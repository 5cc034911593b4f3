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

    def links(self, turns, acts, history, people=None):
        from memory.analysis.types import Link

        seen = {t.message.text: t.message.id for t in (*history.acts, *history.recent)}
        out = []
        for t in turns:
            link = self.script.get(t.message.text, (None, None, None))[2]
            out.append(Link(link[0], seen[link[1]], 0.8) if link else None)
            seen[t.message.text] = t.message.id
        return out


class KeywordActs(ScriptedActs):
    """An ``ActModel`` + ``LinkModel`` that labels by the message's first words, for tests of what readers do with
    acts (the shipped models are tested in tests/test_acts.py): "We decided" / "Decision" -> decision, "New rule"
    -> rule, "I'll" -> the author's task, "<Name> can you" -> a question to that member, "Change of plans" /
    "... is now" / "... moved" -> a change of the latest earlier state act sharing a word with it, "?" -> a
    question to the group; anything else is chatter. A script entry, when given, wins."""

    def __init__(self, script: dict[str, tuple] | None = None) -> None:
        super().__init__(script or {})

    def label(self, text: str, author: str, people) -> tuple[str, str | None]:
        low = text.casefold()
        if low.startswith(("we decided", "decision")):
            return "decision", "GROUP"
        if low.startswith("new rule"):
            return "rule", "GROUP"
        if low.startswith("i'll"):
            return "task", author
        if low.startswith("change of plan") or " is now " in low or " moved " in low:
            return "change", "GROUP"
        named = [pid for pid in people.named(text) if pid != author]
        if " can you " in f" {low} " and named:
            return "question", named[0]
        if text.rstrip().endswith("?"):
            return "question", named[0] if named else "GROUP"
        return "chatter", None

    def acts(self, turns, history, people):
        from memory.analysis.types import ACT_KINDS, Act

        out = []
        for t in turns:
            if t.message.text in self.script:
                kind, owner, _ = self.script[t.message.text]
            else:
                kind, owner = self.label(t.message.text, t.message.author_id, people)
            probs = tuple(0.9 if k == kind else 0.1 / (len(ACT_KINDS) - 1) for k in ACT_KINDS)
            out.append(Act(kind, 0.9, probs, owner, "" if kind == "chatter" else "topic"))
        return out

    def links(self, turns, acts, history, people=None):
        from memory.analysis.types import STATE_ACTS, Link
        from memory.query.support import content_stems

        earlier = [(t.message, t.analysis.act.kind) for t in history.acts if t.analysis is not None]
        out = []
        for t, a in zip(turns, acts):
            link = None
            if t.message.text in self.script and self.script[t.message.text][2]:
                kind, target_text = self.script[t.message.text][2]
                target = next(m for m, _ in reversed(earlier) if m.text == target_text)
                link = Link(kind, target.id, 0.9)
            elif a.kind == "change":
                words = set(content_stems(t.message.text))
                for m, _ in reversed(earlier):
                    if words & set(content_stems(m.text)):
                        link = Link("changes", m.id, 0.9)
                        break
            out.append(link)
            if a.kind in STATE_ACTS:
                earlier.append((t.message, a.kind))
        return out


def store_acts(store, kinds: dict[str, str], owner: str = "GROUP") -> None:
    """Store analyses for messages by platform id (``{"3": "plan"}``) without filing any group state: how the
    writer's gate sees a window the analysis pass has read, for tests of the gate alone."""
    from memory.analysis.types import ACT_KINDS, Act, Analysis
    from memory.nlp import Parsed

    by_id = {m.msg_id: m for s in store.scopes() for m in store.recent(s.id, 10_000)}
    analyses = []
    for mid, kind in kinds.items():
        m = by_id[mid]
        probs = tuple(0.9 if k == kind else 0.1 / (len(ACT_KINDS) - 1) for k in ACT_KINDS)
        analyses.append((m, Analysis(m.id, Parsed((), False, False), Act(kind, 0.9, probs, owner, "topic"))))
    with store.write() as conn:
        store.save_analyses(conn, [a for _, a in analyses], {m.id: m.text for m, _ in analyses}, "test")
