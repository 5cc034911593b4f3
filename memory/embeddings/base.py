"""The embedding protocol the store and search rely on."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

# Characters of a message handed to the embedder; longer texts are stored whole
# but embedded from this prefix (the model truncates to its token window anyway).
EMBED_PREFIX_CHARS = 2000


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dim), rows normalised to unit length."""
        ...


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def prefix(text: str) -> str:
    return text[:EMBED_PREFIX_CHARS]
