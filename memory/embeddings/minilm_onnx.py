"""all-MiniLM-L6-v2 run by onnxruntime: the default backend (int8 weights), the fastest on CPU.

The graph comes from :mod:`memory.embeddings.onnx_export` (built from the same
safetensors as the numpy port, cached once). Tokenising, length-sorted batching,
mean pooling and normalisation are the numpy port's, so only the encoder differs.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory.errors import EmbeddingError

from .base import normalize
from .minilm import (
    MiniLMEmbedder,
    default_model_dir,
    length_sorted_batches,
    mean_pool,
    minilm_tokenizer,
    padded_batch,
    token_ids,
)
from .onnx_export import DTYPES, cached_minilm_onnx


def onnx_model_name(dtype: str) -> str:
    """Store identity of the vectors: float32 ones match the numpy port (cosine > 0.99999), int8 ones do not."""
    return MiniLMEmbedder.name if dtype == "fp32" else f"{MiniLMEmbedder.name}-{dtype}"


def cpu_session_options(threads: int | None = None):  # noqa: ANN201 - onnxruntime is untyped
    """onnxruntime options for a CPU graph that shares the machine: at most 4 threads, no spinning (a waiting
    thread must not hold a core the writer or a backfill needs), full graph optimisation, quiet logs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads) if threads else min(os.cpu_count() or 1, 4)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return options


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 through onnxruntime's fused BERT kernels; 384-dim unit vectors."""

    dim = 384

    def __init__(self, model_dir: str | Path | None = None, dtype: str = "int8", threads: int | None = None,
                 batch_size: int = 64, max_batch_tokens: int = 8192, cache_dir: str | Path | None = None) -> None:
        """Build (first use) and load the graph of ``dtype`` (``int8`` or ``fp32``).

        ``threads``: onnxruntime's intra-op threads (default: CPU count, at most 4).
        Its threads do not spin while idle, so a model call in llama.cpp keeps the CPU.
        """
        if dtype not in DTYPES:
            raise EmbeddingError(f"Unknown ONNX dtype {dtype!r} (`embeddings.dtype`); choose one of: "
                                 f"{', '.join(DTYPES)}.")
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise EmbeddingError("The `minilm-onnx` embedding backend needs onnxruntime; install it with "
                                 "`pip install onnxruntime onnx` (setup does this) or set `embeddings.backend = "
                                 "\"minilm\"`.") from exc
        directory = Path(model_dir).expanduser() if model_dir else default_model_dir()
        self.name = onnx_model_name(dtype)
        self.dtype = dtype
        self.batch_size = max(1, int(batch_size))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        path = cached_minilm_onnx(dtype, model_dir=directory, cache_dir=cache_dir)
        try:
            self._tokenizer, self.max_seq_length = minilm_tokenizer(directory)
            self._session = ort.InferenceSession(str(path), cpu_session_options(threads),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbeddingError(f"Could not load the ONNX embedding model {path}: {exc}; delete the file to "
                                 "rebuild it from the MiniLM weights.") from exc
        self.model_path = path

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (each cut to ``prefix()``) into float32 (n, 384) unit rows."""
        ids, lengths = token_ids(self._tokenizer, texts, self.name)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        if not ids:
            return out
        for idx in length_sorted_batches(lengths, self.batch_size, self.max_batch_tokens):
            batch_ids, mask = padded_batch(ids, lengths, idx, np.int32, np.int32)
            try:
                hidden = self._session.run(None, {"input_ids": batch_ids, "attention_mask": mask})[0]
            except Exception as exc:
                raise EmbeddingError(f"{self.name} failed on a batch of {len(idx)} text(s): {exc}") from exc
            out[idx] = mean_pool(hidden, mask)
        return normalize(out)
