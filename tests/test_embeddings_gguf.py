"""all-MiniLM-L6-v2 converted to GGUF and run by llama.cpp (backend `minilm-gguf`).

The converted file must be the same model as the numpy port: same vectors as
sentence-transformers (tests/data/minilm_reference.json), and a vocabulary that
llama.cpp's own WordPiece tokenizer reads the way Hugging Face's does.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from memory.embeddings.base import EMBED_PREFIX_CHARS
from memory.errors import EmbeddingError

try:
    import llama_cpp  # noqa: F401

    HAVE_LLAMA = True
except (ImportError, OSError):
    HAVE_LLAMA = False
try:
    import gguf  # noqa: F401

    HAVE_GGUF = True
except ImportError:
    HAVE_GGUF = False

pytestmark = [
    pytest.mark.skipif(not HAVE_LLAMA, reason="llama_cpp is not importable; run scripts/setup.sh to build it"),
    pytest.mark.skipif(not HAVE_GGUF, reason="the `gguf` package is not installed (pip install gguf)"),
]

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
DTYPE = "f32"  # the recommended dtype for CPU; f16 is as exact

# Sentences whose llama.cpp WordPiece tokens must equal Hugging Face's, on top of
# the reference sentences (accents, emoji, Chinese, control characters, >256 tokens).
TOKENIZER_SENTENCES = [
    "Hello, world!",
    "I can't believe it's 3:45pm... really?!",
    "e-mail: foo@bar.com #hashtag $100 50% a&b (parens) [brackets] {braces} <tags>",
    "naïve café résumé Ångström ØRESUND straße Dvořák São Paulo",
    "“curly quotes” ‘single’ — em dash – en dash … ellipsis",
    "🤷‍♂️ 👨‍👩‍👧 ❤️ ✨✨ ok👍",
    "tab\tand\nnewline   multiple   spaces",
    "UNAFFABLE unaffable antidisestablishmentarianism",
    "日本語のテキストと中文混合 text",
    "Ελληνικά кириллица العربية עברית ไทย",
    "https://example.com/path?query=1&x=y#frag",
    "\u200bzero\u200bwidth\ufeffbom",
]
# Known llama.cpp WordPiece differences (why `minilm-gguf` tokenises with the
# Hugging Face tokenizer): Hangul and Devanagari vowel signs after NFD, words
# over 100 characters (HF: [UNK]), and literal special-token text like "[CLS]".


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="module")
def gguf_path(cache_dir: Path) -> Path:
    from memory.embeddings.convert import cached_minilm_gguf

    return cached_minilm_gguf(DTYPE, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def gguf_embedder(cache_dir: Path, gguf_path: Path):
    from memory.embeddings.factory import load_minilm_gguf

    emb = load_minilm_gguf(dtype=DTYPE, cache_dir=cache_dir, n_threads=2)
    assert emb.model_path == gguf_path
    yield emb
    emb.close()


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)


def test_reproduces_sentence_transformers(gguf_embedder, reference: dict) -> None:
    items = reference["sentences"]
    got = gguf_embedder.embed([s["text"] for s in items])
    want = np.array([s["vector"] for s in items], dtype=np.float32)
    cosines = _cosines(got, want)
    report = {s["key"]: round(float(c), 6) for s, c in zip(items, cosines)}
    # Measured minimum 0.999998 (f32 and f16; q8_0: 0.998432). 0.999 is the bar
    # for sharing the numpy port's store name.
    assert cosines.min() >= 0.999, report
    assert got.shape == (len(items), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_gguf_alone_reproduces_the_reference(gguf_path: Path, reference: dict) -> None:
    """With llama.cpp's own tokenizer and the GGUF's metadata only (the `gguf` backend's view)."""
    from memory.embeddings.gguf import GGUFEmbedder

    emb = GGUFEmbedder(gguf_path, n_ctx=256, n_threads=1)  # pooling and specials from the file
    try:
        items = reference["sentences"]
        cosines = _cosines(emb.embed([s["text"] for s in items]), np.array([s["vector"] for s in items]))
        assert cosines.min() >= 0.999, {s["key"]: round(float(c), 6) for s, c in zip(items, cosines)}
    finally:
        emb.close()


def test_llama_cpp_tokenizes_like_hugging_face(gguf_path: Path, reference: dict) -> None:
    from llama_cpp import Llama
    from tokenizers import Tokenizer

    from memory.embeddings.minilm import default_model_dir

    hf = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    llm = Llama(str(gguf_path), vocab_only=True, verbose=False)
    try:
        texts = [s["text"] for s in reference["sentences"]] + TOKENIZER_SENTENCES
        mismatches = {}
        for text in texts:
            want = hf.encode(text).ids
            got = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
            if got != want:
                mismatches[text[:40]] = (want[:20], got[:20])
        assert not mismatches
        long = next(s for s in reference["sentences"] if s["key"] == "long_over_256_tokens")
        assert len(llm.tokenize(long["text"].encode("utf-8"))) == long["tokens_untruncated"]
    finally:
        llm.close()


def test_same_vectors_as_the_numpy_port(gguf_embedder, embedder) -> None:
    texts = [
        "hi",
        "Can someone send me the link to the design doc from yesterday's sync?",
        "",
        "ok 👍",
        "The release train leaves on Friday; anything not merged by Thursday night waits two weeks. " * 6,
        "한국어 텍스트 and हिन्दी",  # scripts where llama.cpp's own WordPiece would differ
        "[CLS] literal specials [SEP]",
        "x" * 150,
    ]
    assert gguf_embedder.name == embedder.name == "all-MiniLM-L6-v2"
    assert _cosines(gguf_embedder.embed(texts), embedder.embed(texts)).min() >= 0.9999


def test_batching_and_workers_do_not_change_vectors(gguf_embedder, cache_dir: Path) -> None:
    from memory.embeddings.factory import load_minilm_gguf

    texts = [f"message number {i}: " + "word " * (i % 37) for i in range(150)] + ["", "x" * 5000]
    together = gguf_embedder.embed(texts)
    one_by_one = np.vstack([gguf_embedder.embed([t]) for t in texts[:20]])
    # Flash attention sums in a batch-dependent order: ~1e-4 per component.
    assert np.abs(together[:20] - one_by_one).max() < 1e-3
    assert _cosines(together[:20], one_by_one).min() >= 0.99999
    single = load_minilm_gguf(dtype=DTYPE, cache_dir=cache_dir, n_threads=1)
    try:
        assert len(single._workers) == 1 and len(gguf_embedder._workers) == 2
        alone = single.embed(texts)
        assert np.abs(alone - together).max() < 1e-3 and _cosines(alone, together).min() >= 0.99999
    finally:
        single.close()
    assert gguf_embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        gguf_embedder.embed("not a list")


def test_only_the_prefix_is_embedded(gguf_embedder) -> None:
    text = "word " * 20_000
    assert np.allclose(gguf_embedder.embed([text]), gguf_embedder.embed([text[:EMBED_PREFIX_CHARS]]), atol=1e-6)


def test_conversion_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.embeddings import convert

    first = convert.cached_minilm_gguf("f16", cache_dir=tmp_path)
    stat = first.stat()
    assert first.parent == tmp_path and "f16" in first.name and first.suffix == ".gguf"
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temp file left behind

    def must_not_run(*args, **kwargs):
        raise AssertionError("converted again although the cached file exists")

    monkeypatch.setattr(convert, "convert_minilm_to_gguf", must_not_run)
    second = convert.cached_minilm_gguf("f16", cache_dir=tmp_path)
    assert second == first
    assert (second.stat().st_mtime_ns, second.stat().st_ino) == (stat.st_mtime_ns, stat.st_ino)


def test_factory_backend_and_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gguf_path: Path) -> None:
    from memory.embeddings.factory import BACKENDS, load_embedder, minilm_gguf_name

    assert "minilm-gguf" in BACKENDS and "minilm" in BACKENDS
    assert minilm_gguf_name("f32") == minilm_gguf_name("f16") == "all-MiniLM-L6-v2"
    assert minilm_gguf_name("q8_0") == "all-MiniLM-L6-v2-q8_0"  # cosine ~0.9987: not interchangeable
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    emb = load_embedder("minilm-gguf", n_threads=1)
    try:
        assert emb.model_path.parent == tmp_path / "chorus" / "models"
        assert emb.name == "all-MiniLM-L6-v2" and emb.dim == 384
        assert emb.model_path.read_bytes()[:4] == b"GGUF"
    finally:
        emb.close()
    with pytest.raises(EmbeddingError, match="dtype"):
        load_embedder("minilm-gguf", dtype="q4_0")


def test_impossible_conversion_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.embeddings.convert import cached_minilm_gguf, convert_minilm_to_gguf
    from memory.embeddings.minilm import default_model_dir

    missing = tmp_path / "no-model-here"
    with pytest.raises(EmbeddingError, match="no-model-here"):
        convert_minilm_to_gguf(missing, tmp_path / "out.gguf")
    with pytest.raises(EmbeddingError, match="model.safetensors"):
        cached_minilm_gguf("f32", model_dir=missing, cache_dir=tmp_path / "cache")

    not_bert = tmp_path / "not-bert"
    not_bert.mkdir()
    src = default_model_dir()
    (not_bert / "model.safetensors").symlink_to(src / "model.safetensors")
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    (not_bert / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}), encoding="utf-8")
    with pytest.raises(EmbeddingError, match="model_type"):
        convert_minilm_to_gguf(not_bert, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()

    with pytest.raises(EmbeddingError, match="dtype"):
        convert_minilm_to_gguf(None, tmp_path / "out.gguf", dtype="bf16")

    monkeypatch.setitem(sys.modules, "gguf", None)  # as if the package were not installed
    with pytest.raises(EmbeddingError, match="pip install gguf"):
        convert_minilm_to_gguf(None, tmp_path / "out.gguf")
