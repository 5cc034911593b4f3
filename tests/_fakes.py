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
