"""Build an ONNX graph of all-MiniLM-L6-v2 from its safetensors weights, once.

Why: onnxruntime runs BERT with fused kernels (one op for the whole attention
block, layer norm fused with the residual add, GELU fused with its bias) and,
with 8-bit weights, with VNNI integer matrix products. That is several times the
throughput of the numpy port on a small CPU, which is what ingesting a busy
server's history needs. No torch and no exporter are involved: the graph is
written here node by node from the published weights, then cached under
``~/.cache/chorus/models`` keyed by the source files, like the GGUF conversion.

``int8`` uses onnxruntime's dynamic quantisation with per-channel weight scales
(activations are quantised per batch at run time). Its vectors differ slightly
from the float model (cosine ~0.99 on chat text, and a text's vector moves by a
similar amount with its batch mates), so a store records them under a distinct
model name and never mixes the two. Retrieval is unchanged where we measured it:
dense recall@10 on LoCoMo is 42.0 (int8) vs 42.1 (float). Weight-only 8-bit blocks
(MatMulNBits) avoid the batch effect but ran slower than float32 on this CPU.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import EmbeddingError

from .convert import _check_config, _model_dir, build_cached, cache_slot

DTYPES = ("fp32", "int8")
# Bump when the graph layout changes, so a cached file from an older builder is not reused.
EXPORT_VERSION = 1
_INSTALL_HINT = "install them with `pip install onnx onnxruntime` (setup does this)"


def _require(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as exc:
        raise EmbeddingError(f"The `minilm-onnx` embedding backend needs the `{name}` package; "
                             f"{_INSTALL_HINT}.") from exc


def build_minilm_onnx(model_dir: str | os.PathLike[str] | None, out: Path) -> Path:
    """Write the float32 encoder graph to ``out``: token ids and mask in, last hidden states out.

    Mean pooling and normalisation stay outside the graph (cheap in numpy, and
    identical for every dtype).
    """
    onnx = _require("onnx")
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    directory = _model_dir(model_dir)
    config = _check_config(directory, "ONNX")
    try:
        weights = {k.removeprefix("bert."): v.astype(np.float32, copy=False)
                   for k, v in load_file(str(directory / "model.safetensors")).items()}
    except Exception as exc:
        raise EmbeddingError(f"Could not read the MiniLM weights in {directory}: {exc}") from exc
    parts = GraphParts()
    x = encoder_nodes(parts, weights, config, segments=False)
    hidden = int(config["hidden_size"])
    parts.nodes.append(helper.make_node("Identity", [x], ["hidden"], name="hidden"))
    graph = helper.make_graph(
        parts.nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "sequence"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", hidden])],
        parts.initializers)
    model = helper.make_model(graph, producer_name="chorus", opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, str(out))
    return out


class GraphParts:
    """Nodes and weights of a graph being written; `const` and `node` add to them."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name))
        return name

    def const_int(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype=np.int64), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        where = ("" if op in _STANDARD_OPS else "com.microsoft") if domain is None else domain
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, domain=where, **attrs))
        return output


_STANDARD_OPS = {"MatMul", "Add", "Gather", "Squeeze", "Identity", "Cast", "Softmax"}


def encoder_nodes(g: GraphParts, w: dict[str, np.ndarray], config: dict, *, segments: bool) -> str:
    """The BERT encoder of MiniLM as onnxruntime's fused ops, reading graph inputs ``input_ids`` and
    ``attention_mask`` (and ``token_type_ids`` with ``segments``); returns the name of the last hidden states.

    Without ``segments`` every token is of type 0, so that row is folded into the positions.
    """
    from onnx import helper

    eps = float(config.get("layer_norm_eps", 1e-12))
    const = g.const
    if segments:
        positions = w["embeddings.position_embeddings.weight"]
        seg_in, seg_table = "token_type_ids", const("segment_embeddings", w["embeddings.token_type_embeddings.weight"])
    else:
        positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
        seg_in, seg_table = "", ""
    g.nodes.append(helper.make_node(
        "EmbedLayerNormalization",
        ["input_ids", seg_in, const("word_embeddings", w["embeddings.word_embeddings.weight"]),
         const("position_embeddings", positions), seg_table,
         const("embeddings.ln.weight", w["embeddings.LayerNorm.weight"]),
         const("embeddings.ln.bias", w["embeddings.LayerNorm.bias"]), "attention_mask"],
        ["layer0.in", "mask_index"], name="embeddings", domain="com.microsoft", epsilon=eps))
    return layer_nodes(g, w, config, "layer0.in", range(int(config["num_hidden_layers"])))


def layer_nodes(g: GraphParts, w: dict[str, np.ndarray], config: dict, x: str, layers: Iterable[int], *,
                name: str = "layer", weights: str = "encoder.layer.") -> str:
    """Encoder ``layers`` (by index) after the hidden states named ``x``; returns the last one's output name.
    ``weights`` prefixes the weight names read for each layer, ``name`` the node names written (a second
    branch over the same trunk needs names of its own)."""
    eps = float(config.get("layer_norm_eps", 1e-12))
    heads = int(config["num_attention_heads"])
    const, node = g.const, g.node
    for i in layers:
        p, n = f"{weights}{i}.", f"{name}{i}"
        qkv_w = np.concatenate([w[p + f"attention.self.{k}.weight"] for k in ("query", "key", "value")], axis=0).T
        qkv_b = np.concatenate([w[p + f"attention.self.{k}.bias"] for k in ("query", "key", "value")])
        ctx = node("Attention", [x, const(f"{n}.qkv.weight", qkv_w), const(f"{n}.qkv.bias", qkv_b), "mask_index"],
                   f"{n}.context", num_heads=heads)
        proj = node("MatMul", [ctx, const(f"{n}.attn_out.weight", w[p + "attention.output.dense.weight"].T)],
                    f"{n}.attn_out")
        x1 = node("SkipLayerNormalization",
                  [proj, x, const(f"{n}.ln1.weight", w[p + "attention.output.LayerNorm.weight"]),
                   const(f"{n}.ln1.bias", w[p + "attention.output.LayerNorm.bias"]),
                   const(f"{n}.attn_out.bias", w[p + "attention.output.dense.bias"])], f"{n}.mid", epsilon=eps)
        up = node("MatMul", [x1, const(f"{n}.ffn_up.weight", w[p + "intermediate.dense.weight"].T)], f"{n}.ffn_up")
        act = node("BiasGelu", [up, const(f"{n}.ffn_up.bias", w[p + "intermediate.dense.bias"])], f"{n}.gelu")
        down = node("MatMul", [act, const(f"{n}.ffn_down.weight", w[p + "output.dense.weight"].T)], f"{n}.ffn_down")
        x = node("SkipLayerNormalization",
                 [down, x1, const(f"{n}.ln2.weight", w[p + "output.LayerNorm.weight"]),
                  const(f"{n}.ln2.bias", w[p + "output.LayerNorm.bias"]),
                  const(f"{n}.ffn_down.bias", w[p + "output.dense.bias"])], f"{n}.out", epsilon=eps)
    return x


def quantize_int8(source: Path, out: Path, exclude: list[str] | None = None) -> Path:
    """8-bit weights with one scale per output channel; activations quantised at run time (``exclude``:
    node names left in float, such as small output heads)."""
    _require("onnxruntime")
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser logs advice about shape pre-processing meant for vision models; it does not
    # apply to this graph (every shape is known), so keep it out of the setup output.
    advice = _DropMessage("pre-processing before quantization")
    logging.getLogger().addFilter(advice)
    try:
        quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"], nodes_to_exclude=exclude or [],
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})
    finally:
        logging.getLogger().removeFilter(advice)
    return out


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def cached_minilm_onnx(dtype: str = "int8", model_dir: str | os.PathLike[str] | None = None,
                       cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the MiniLM ONNX graph of ``dtype``, building it on first use (atomically, see `build_cached`)."""
    if dtype not in DTYPES:
        raise EmbeddingError(f"Unknown ONNX dtype {dtype!r} (`embeddings.dtype`); choose one of: {', '.join(DTYPES)}.")
    directory, key, target_dir = cache_slot(model_dir, cache_dir)
    target = target_dir / f"all-MiniLM-L6-v2.{key[:16]}.onnx-v{EXPORT_VERSION}.{dtype}.onnx"

    def build(work: Path) -> Path:
        try:
            built = build_minilm_onnx(directory, work / "fp32.onnx")
            return quantize_int8(built, work / "int8.onnx") if dtype == "int8" else built
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"Building the ONNX embedding model in {target_dir} failed: {exc}") from exc

    return build_cached(target, build, "ONNX embedding model")
