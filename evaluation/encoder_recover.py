"""A shipped reader's trained weights, read back from its int8 graph, for a run to continue from.

Why: a run continues from its parent's ``best.safetensors`` (evaluation/reader_train.py), and those fp32 files
live under ``out/``, which is not kept with the repository. When they are gone, the shipped graph
(``memory/models/encoder-vN.onnx``) is the one record of the model left. Its matrices are int8 with one scale and
zero point per output column (memory/embeddings/onnx_export.quantize_int8), and everything else (embeddings,
layer norms, biases, the two heads) is kept in float, so reading it back gives the trained weights to within half
a quantisation step per entry (tests/test_encoder_recover.py exports them again and reads the same P and spans).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

QKV = ("query", "key", "value")  # the fused attention weight's parts, in order (onnx_export.layer_nodes)


def _initializers(graph: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _matrix(init: dict[str, np.ndarray], name: str) -> np.ndarray:
    """A [in, out] matrix as the graph multiplies by it: dequantised when int8, as stored when float."""
    if name in init:
        return init[name].astype(np.float32)
    q, scale, zero = (init[f"{name}_{k}"] for k in ("quantized", "scale", "zero_point"))
    return ((q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)).astype(np.float32)


def recovered_weights(graph: Path) -> dict[str, np.ndarray]:
    """The reader's weights in training's names (``bert.``-prefixed, as evaluation/encoder_train.save_weights
    writes them), without the word table, which training never changes."""
    init = _initializers(graph)
    if "head.answer.weight" not in init:
        raise ValueError(f"{graph} is not a reader graph (no answers head)")
    w: dict[str, np.ndarray] = {
        "bert.embeddings.position_embeddings.weight": init["position_embeddings"],
        "bert.embeddings.token_type_embeddings.weight": init["segment_embeddings"],
        "bert.embeddings.LayerNorm.weight": init["embeddings.ln.weight"],
        "bert.embeddings.LayerNorm.bias": init["embeddings.ln.bias"],
        "answer.weight": init["head.answer.weight"].T, "answer.bias": init["head.answer.bias"],
        "span.weight": init["head.span.weight"].T, "span.bias": init["head.span.bias"],
    }
    layers = sorted({int(k.split(".")[0].removeprefix("layer")) for k in init if k.startswith("layer")})
    for i in layers:
        n, p = f"layer{i}", f"bert.encoder.layer.{i}."
        qkv, qkv_b = _matrix(init, f"{n}.qkv.weight").T, init[f"{n}.qkv.bias"]
        for part, rows, bias in zip(QKV, np.split(qkv, len(QKV), axis=0), np.split(qkv_b, len(QKV)), strict=True):
            w[p + f"attention.self.{part}.weight"], w[p + f"attention.self.{part}.bias"] = rows, bias
        w[p + "attention.output.dense.weight"] = _matrix(init, f"{n}.attn_out.weight").T
        w[p + "attention.output.dense.bias"] = init[f"{n}.attn_out.bias"]
        w[p + "attention.output.LayerNorm.weight"] = init[f"{n}.ln1.weight"]
        w[p + "attention.output.LayerNorm.bias"] = init[f"{n}.ln1.bias"]
        w[p + "intermediate.dense.weight"] = _matrix(init, f"{n}.ffn_up.weight").T
        w[p + "intermediate.dense.bias"] = init[f"{n}.ffn_up.bias"]
        w[p + "output.dense.weight"] = _matrix(init, f"{n}.ffn_down.weight").T
        w[p + "output.dense.bias"] = init[f"{n}.ffn_down.bias"]
        w[p + "output.LayerNorm.weight"] = init[f"{n}.ln2.weight"]
        w[p + "output.LayerNorm.bias"] = init[f"{n}.ln2.bias"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in w.items()}


def recover(graph: Path, out: Path) -> Path:
    """Write ``graph``'s weights as ``out`` (a run's ``best.safetensors``)."""
    from safetensors.numpy import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    save_file(recovered_weights(graph), str(tmp))
    tmp.replace(out)
    return out


def restore_run(shipped: Path, folder: Path) -> Path:
    """Put back the run folder a shipped model came from (``shipped``: its ``.onnx``, with its ``.json`` beside
    it): weights read back from the graph, the graph itself, and the run's split, options and report as the
    metadata recorded them when it shipped. Returns the weights. A folder that still has its weights is left
    alone."""
    import json
    import shutil

    weights = folder / "best.safetensors"
    if weights.exists():
        return weights
    meta = json.loads(shipped.with_suffix(".json").read_text())
    run = meta["run"]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shipped, folder / "encoder.onnx")
    (folder / "split.json").write_text(json.dumps(meta["trained_on"], indent=1))
    (folder / "options.json").write_text(json.dumps(meta["options"], indent=1))
    (folder / "report.json").write_text(json.dumps(meta["figures"][run], indent=1))
    (folder / "restored.json").write_text(json.dumps({"from": str(shipped), "version": meta["version"]}, indent=1))
    return recover(shipped, weights)


def start_weights(start: str, shipped_run: str, out: Path, shipped: Path) -> Path:
    """The weights a continued run starts from: ``out/<start>/best.safetensors``, put back from the shipped graph
    (``shipped``) when ``start`` is the run that shipped and its folder is gone."""
    path = out / start / "best.safetensors"
    if start == shipped_run and not path.exists():
        restore_run(shipped, path.parent)
    return path
