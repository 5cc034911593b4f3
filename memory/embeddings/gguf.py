"""Any GGUF embedding model through llama.cpp.

Why: operators who already run llama.cpp (and maybe a GPU) can pick a stronger or
multilingual embedding model without Chorus growing another runtime. The
llama-cpp-python import is lazy so the default numpy MiniLM path never needs it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memory.errors import EmbeddingError

from .base import normalize, prefix


class GGUFEmbedder:
    """Embeds with a GGUF model loaded by llama-cpp-python in embedding mode."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        n_gpu_layers: int = 0,
        n_ctx: int = 512,
        n_threads: int | None = None,
    ) -> None:
        """Load ``model_path``; fail with an EmbeddingError the operator can act on."""
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise EmbeddingError(
                f"GGUF embedding model not found at {path}; set `embeddings.model_path` in the config "
                "to an existing .gguf file (or use the built-in backend `minilm`)."
            )
        try:
            from llama_cpp import Llama
        except (ImportError, OSError) as exc:  # OSError: the shared library failed to load
            raise EmbeddingError(
                "The GGUF embedding backend needs llama-cpp-python, which is not importable "
                f"({exc}); install it (scripts/setup.sh builds a CPU wheel) or use the `minilm` backend."
            ) from exc
        try:
            self._llm: Any = Llama(
                model_path=str(path),
                embedding=True,
                n_gpu_layers=int(n_gpu_layers),
                n_ctx=int(n_ctx),
                n_threads=n_threads,
                verbose=False,
            )
        except Exception as exc:  # llama.cpp reports load failures as ValueError/RuntimeError
            raise EmbeddingError(
                f"llama.cpp could not load the embedding model {path} (`embeddings.model_path`): {exc}"
            ) from exc
        self.model_path = path
        self.name = path.stem
        self.dim = int(self._llm.n_embd())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (each cut to ``prefix()``) into float32 (n, dim) unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            # llama.cpp cannot decode zero tokens; a lone space gives empty input a
            # stable vector just as [CLS][SEP] does for BERT models.
            out[row] = self._embed_one(prefix(str(text)) or " ")
        return normalize(out)

    def _embed_one(self, text: str) -> np.ndarray:
        # One text per call: batching through llama-cpp-python mixes sequences in
        # one context, and per-text calls keep pooled vs per-token output unambiguous.
        try:
            raw = self._llm.embed(text, normalize=False, truncate=True)
        except Exception as exc:
            raise EmbeddingError(f"llama.cpp failed to embed a text of {len(text)} characters: {exc}") from exc
        vec = np.asarray(raw, dtype=np.float32)
        if vec.ndim == 2:
            # Model without a pooling layer: one vector per token, so mean-pool them.
            vec = vec.mean(axis=0)
        if vec.shape != (self.dim,):
            raise EmbeddingError(f"llama.cpp returned an embedding of shape {vec.shape}, expected ({self.dim},)")
        return vec
