"""Any GGUF embedding model through llama.cpp.

Why: operators who already run llama.cpp (and maybe a GPU) can pick a stronger or
multilingual embedding model without Chorus growing another runtime, and the
built-in MiniLM runs about twice as fast through llama.cpp's BERT graph as in
numpy (see ``convert.py``). The llama-cpp-python import is lazy so the default
ONNX backend and the numpy MiniLM never need it.

Speed: all texts of one ``embed()`` call are tokenised first, then packed into
as few ``llama_decode`` calls as possible -- many sequences per call, each with
its own sequence id, up to ``batch_tokens`` tokens -- and the pooled vector of
each sequence is read back. One text per call (what ``Llama.embed`` does with
its default one-sequence context) pays the per-call graph setup for every
message and leaves the matmuls too small to use the cores.

Parallelism (CPU): ``workers`` llama.cpp contexts share one loaded model, each
decoding with a single thread, and the packed batches of a call are spread over
them -- the same design as the numpy MiniLM. A single context with several
threads synchronises its threads after every graph node, and this llama.cpp
build does that with OpenMP barriers that spin: as soon as another process
wants the CPU (the LLM writer, a backfill) a spinning thread holds a core while
the thread it waits for is descheduled, and throughput collapses 3-5x.
Independent single-threaded contexts never wait for each other.

Truncation keeps the model's trailing special tokens (BERT's [SEP]), as
Hugging Face tokenizers do: a long text is cut in the middle of its content,
not by chopping the separator off.
"""
from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import EmbeddingError

from .base import normalize, prefix

# Tokens per llama.cpp call. Attention in a packed batch runs over the whole
# batch (other sequences masked out), so its cost grows with the square of
# this; for MiniLM on CPU, 128-256 tokens per call measured best -- enough rows
# for efficient matmuls, little wasted attention.
DEFAULT_BATCH_TOKENS = 256

_POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}


class _Worker:
    """One llama.cpp context and its token batch; used by one thread at a time."""

    __slots__ = ("ctx", "batch", "owned")

    def __init__(self, ctx: Any, batch: Any, owned: bool) -> None:
        self.ctx, self.batch, self.owned = ctx, batch, owned


class GGUFEmbedder:
    """Embeds with a GGUF model loaded by llama-cpp-python in embedding mode."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        n_gpu_layers: int = 0,
        n_ctx: int = 512,
        n_threads: int | None = None,
        *,
        name: str | None = None,
        max_tokens: int | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        pooling: str | None = None,
        flash_attn: bool = False,
        workers: int | None = None,
        tokenizer: Callable[[list[str]], list[list[int]]] | None = None,
    ) -> None:
        """Load ``model_path``; fail with an EmbeddingError the operator can act on.

        ``n_ctx`` is the longest text in tokens the model sees; ``max_tokens``
        (default ``n_ctx``) truncates texts further, e.g. to the 256 tokens
        sentence-transformers uses for MiniLM. ``batch_tokens`` is the target
        number of tokens per llama.cpp call. ``pooling``
        (``mean``/``cls``/``last``/``none``) overrides the model's own pooling
        type; without pooling, token vectors are mean-pooled here.
        ``flash_attn`` uses llama.cpp's fused attention kernel, which on CPU is
        faster for packed batches (one masked attention over all their tokens).
        ``n_threads`` is the CPU threads to use in all (default: CPU count, at
        most 4); on CPU they become ``workers`` single-threaded contexts unless
        ``workers`` says otherwise (then each gets n_threads / workers threads).
        With GPU offload there is one context.
        ``tokenizer`` maps texts to token ids (specials included) instead of
        llama.cpp's own tokenizer -- e.g. the Hugging Face tokenizer the model
        was trained with, where llama.cpp's re-implementation differs.
        ``name`` identifies the vectors in the store (default: the file stem).
        """
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise EmbeddingError(
                f"GGUF embedding model not found at {path}; set `embeddings.model_path` in the config "
                "to an existing .gguf file (or use the built-in backend `minilm`)."
            )
        if pooling is not None and pooling not in _POOLING:
            raise EmbeddingError(f"Unknown pooling {pooling!r}; choose one of: {', '.join(_POOLING)}.")
        try:
            import llama_cpp
            from llama_cpp import Llama
        except (ImportError, OSError) as exc:  # OSError: the shared library failed to load
            raise EmbeddingError(
                "The GGUF embedding backend needs llama-cpp-python, which is not importable "
                f"({exc}); install it (scripts/setup.sh builds a CPU wheel) or use the `minilm` backend."
            ) from exc
        n_ctx = max(8, int(n_ctx))
        capacity = max(n_ctx, int(batch_tokens))
        total_threads = max(1, int(n_threads) if n_threads else min(os.cpu_count() or 1, 4))
        if int(n_gpu_layers) != 0:
            n_workers = 1
        else:
            n_workers = max(1, min(int(workers) if workers else total_threads, total_threads))
        per_worker = max(1, total_threads // n_workers)
        try:
            self._llm: Any = Llama(
                model_path=str(path),
                embedding=True,
                n_gpu_layers=int(n_gpu_layers),
                # One context holds a whole packed batch; a non-causal model needs
                # every sequence inside one micro-batch, so n_ubatch == n_batch.
                n_ctx=capacity,
                n_batch=capacity,
                n_ubatch=capacity,
                n_threads=per_worker,
                n_threads_batch=per_worker,  # what llama.cpp uses for multi-token decodes
                pooling_type=_POOLING[pooling] if pooling is not None else -1,
                flash_attn=bool(flash_attn),
                verbose=False,
            )
        except Exception as exc:  # llama.cpp reports load failures as ValueError/RuntimeError
            raise EmbeddingError(
                f"llama.cpp could not load the embedding model {path} (`embeddings.model_path`): {exc}"
            ) from exc
        self._lib = llama_cpp
        self.model_path = path
        self.name = name or path.stem
        self.dim = int(self._llm.n_embd())
        self.batch_tokens = max(1, int(batch_tokens))
        self.capacity = capacity
        self.max_tokens = max(2, min(int(max_tokens or n_ctx), n_ctx))
        self.threads = total_threads
        ctx0 = self._llm.ctx
        self._max_seqs = max(1, int(llama_cpp.llama_n_seq_max(ctx0)))
        self._pooled = int(llama_cpp.llama_pooling_type(ctx0)) != _POOLING["none"]
        # Special tokens the tokenizer appends after the content ([SEP] for BERT):
        # what an empty text turns into, minus a leading BOS.
        empty = list(self._llm.tokenize(b"", add_bos=True, special=False))
        bos = int(self._llm.token_bos())
        self._n_suffix = len(empty) - (1 if empty and empty[0] == bos else 0)
        self._tokenizer = tokenizer
        self._n_vocab = int(self._llm.n_vocab())

        self._workers: list[_Worker] = [_Worker(ctx0, llama_cpp.llama_batch_init(capacity, 0, 1), owned=False)]
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # one embed() at a time: workers are per call
        try:
            for _ in range(n_workers - 1):
                params = llama_cpp.llama_context_params.from_buffer_copy(self._llm.context_params)
                ctx = llama_cpp.llama_init_from_model(self._llm.model, params)
                if not ctx:
                    raise EmbeddingError(f"llama.cpp could not create another context for {path}.")
                self._workers.append(_Worker(ctx, llama_cpp.llama_batch_init(capacity, 0, 1), owned=True))
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        """Free the llama.cpp contexts and model; the embedder is unusable afterwards."""
        workers, self._workers = getattr(self, "_workers", []), []
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True)
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        for w in workers:
            lib.llama_batch_free(w.batch)
            if w.owned:
                lib.llama_free(w.ctx)
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def tokenize(self, text: str) -> list[int]:
        """Token ids for ``text`` as the model sees it: specials added, truncated to ``max_tokens``."""
        return self._tokenize_all([text])[0]

    def _tokenize_all(self, texts: list[str]) -> list[list[int]]:
        if self._tokenizer is not None:
            seqs = [list(map(int, ids)) for ids in self._tokenizer(texts)]
            if len(seqs) != len(texts):
                raise EmbeddingError(f"The tokenizer returned {len(seqs)} token lists for {len(texts)} texts.")
            n_vocab = self._n_vocab
            if any(t < 0 or t >= n_vocab for ids in seqs for t in ids):
                raise EmbeddingError(f"The tokenizer produced token ids outside {self.model_path}'s vocabulary "
                                     f"of {n_vocab}.")
        else:
            seqs = [list(self._llm.tokenize(t.encode("utf-8", "replace"), add_bos=True, special=False)) for t in texts]
        for i, tokens in enumerate(seqs):
            if not tokens:
                # llama.cpp cannot decode zero tokens; a lone space gives empty input a
                # stable vector just as [CLS][SEP] does for BERT models.
                seqs[i] = tokens = list(self._llm.tokenize(b" ", add_bos=True, special=False))
            if len(tokens) > self.max_tokens:
                keep = self.max_tokens - self._n_suffix
                seqs[i] = tokens[:keep] + tokens[len(tokens) - self._n_suffix :]
        return seqs

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (each cut to ``prefix()``) into float32 (n, dim) unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        with self._lock:
            if not self._workers:
                raise EmbeddingError(f"The embedding model {self.model_path} has been closed.")
            try:
                seqs = self._tokenize_all([prefix(str(t)) for t in texts])
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(f"Tokenising {n} text(s) for {self.name} failed: {exc}") from exc
            # Greedy packing in the given order (sequences are not padded, so
            # sorting buys nothing); small calls are split so every worker has work.
            total = sum(len(s) for s in seqs)
            target = max(1, min(self.batch_tokens, -(-total // len(self._workers))))
            jobs: list[tuple[int, int]] = []
            start = 0
            while start < n:
                end, used = start + 1, len(seqs[start])
                while (
                    end < n
                    and end - start < self._max_seqs
                    and used + len(seqs[end]) <= target
                ):
                    used += len(seqs[end])
                    end += 1
                jobs.append((start, end))
                start = end
            if len(jobs) == 1 or len(self._workers) == 1:
                for s, e in jobs:
                    self._decode(self._workers[0], seqs[s:e], out[s:e])
            else:
                free: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
                for w in self._workers:
                    free.put(w)

                def run(job: tuple[int, int]) -> None:
                    worker = free.get()
                    try:
                        self._decode(worker, seqs[job[0] : job[1]], out[job[0] : job[1]])
                    finally:
                        free.put(worker)

                list(self._executor().map(run, jobs))  # list() re-raises worker errors
        return normalize(out)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(self._workers), thread_name_prefix="gguf-embed")
        return self._pool

    def _decode(self, worker: _Worker, seqs: list[list[int]], out: np.ndarray) -> None:
        lib, batch, ctx = self._lib, worker.batch, worker.ctx
        total = sum(len(s) for s in seqs)
        if total > self.capacity:  # only reachable if max_tokens > capacity, which __init__ prevents
            raise EmbeddingError(f"{total} tokens do not fit the llama.cpp batch of {self.capacity}.")
        tokens = np.ctypeslib.as_array(batch.token, shape=(total,))
        pos = np.ctypeslib.as_array(batch.pos, shape=(total,))
        n_seq = np.ctypeslib.as_array(batch.n_seq_id, shape=(total,))
        logits = np.ctypeslib.as_array(batch.logits, shape=(total,))
        n_seq[:] = 1
        logits[:] = 1  # embedding mode wants every token marked as an output
        i = 0
        for seq_id, seq in enumerate(seqs):
            k = len(seq)
            tokens[i : i + k] = seq
            pos[i : i + k] = np.arange(k, dtype=np.int32)
            for j in range(i, i + k):
                batch.seq_id[j][0] = seq_id
            i += k
        batch.n_tokens = total

        memory = lib.llama_get_memory(ctx)
        if memory:  # decoder models keep a KV cache; BERT-style encoders have none
            lib.llama_memory_clear(memory, True)
        rc = lib.llama_decode(ctx, batch)
        if rc != 0:
            raise EmbeddingError(
                f"llama.cpp failed to embed {len(seqs)} text(s) of {total} tokens (llama_decode returned {rc})."
            )
        if self._pooled:
            for seq_id in range(len(seqs)):
                ptr = lib.llama_get_embeddings_seq(ctx, seq_id)
                if not ptr:
                    raise EmbeddingError(f"llama.cpp returned no pooled embedding for sequence {seq_id}.")
                out[seq_id] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.dim,))
        else:
            # Model without a pooling layer: one vector per token, so mean-pool them.
            ptr = lib.llama_get_embeddings(ctx)
            if not ptr:
                raise EmbeddingError("llama.cpp returned no token embeddings.")
            per_token = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(total, self.dim))
            i = 0
            for seq_id, seq in enumerate(seqs):
                out[seq_id] = per_token[i : i + len(seq)].mean(axis=0)
                i += len(seq)
