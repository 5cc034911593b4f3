"""The shipped reader's weights read back from its int8 file: a run can continue from the model that ships."""
from __future__ import annotations

import numpy as np
import pytest

from evaluation.encoder_recover import recover, recovered_weights
from memory.encoder.build import export
from memory.encoder.model import MODELS, VERSION, Encoder

QUESTION = "where are we having dinner?"
PAIRS = [("", "Okay team, we need to pick a place for the end-of-season dinner."),
         ("Thai place or pizza?", "Decided: pizza by the river, Friday the 14th at 7pm."),
         ("", "about 300 euros left in the team fund"),
         ("who has the trophies?", "Leo has the key to the club house, he'll pick them up")]


def test_recovered_weights_rebuild_a_graph_that_reads_as_the_shipped_one(tmp_path):
    shipped = MODELS / f"{VERSION}.onnx"
    weights = recover(shipped, tmp_path / "best.safetensors")
    rebuilt = export(weights, tmp_path / "encoder.onnx")
    a = Encoder(shipped, {"version": "shipped"}).read(QUESTION, PAIRS)
    b = Encoder(rebuilt, {"version": "rebuilt"}).read(QUESTION, PAIRS)
    # the weights go back to int8 on the same per-column grid, so the readings agree to rounding
    assert np.allclose([r.p for r in a], [r.p for r in b], atol=2e-3)
    assert [r.span for r in a] == [r.span for r in b]


def test_every_layer_and_both_heads_are_read_back_in_trainings_names():
    w = recovered_weights(MODELS / f"{VERSION}.onnx")
    layers = {k.split(".")[3] for k in w if k.startswith("bert.encoder.layer.")}
    assert layers == {str(i) for i in range(6)}
    assert w["bert.encoder.layer.0.attention.self.query.weight"].shape == (384, 384)
    assert w["bert.encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
    assert w["answer.weight"].shape == (1, 384) and w["span.weight"].shape == (2, 384)
    assert not any("word_embeddings" in k for k in w)


def test_a_graph_without_the_answers_head_is_refused(tmp_path):
    from memory.embeddings.onnx_export import cached_minilm_onnx

    with pytest.raises(ValueError, match="not a reader graph"):
        recovered_weights(cached_minilm_onnx())


def test_a_run_that_continues_the_shipped_model_gets_its_folder_back(tmp_path, monkeypatch):
    """out/ is not kept: a run started from the shipped run finds its start read back from the shipped files,
    with the report the shipped metadata recorded (what `reader_compare` reads), and a later call keeps it."""
    import json

    from evaluation import reader_train
    from evaluation.reader_train import SHIPPED, recipe

    monkeypatch.setitem(reader_train.STARTS_FROM, "probe", SHIPPED)
    monkeypatch.setitem(reader_train.CONTINUED, "probe", {"lr": 1e-5})
    opts = recipe("probe", tmp_path)
    folder = tmp_path / SHIPPED
    assert opts.init == str(folder / "best.safetensors") and (folder / "best.safetensors").exists()
    assert opts.epochs == 1.0 and opts.lr == 1e-5
    meta = json.loads((MODELS / f"{VERSION}.json").read_text())
    assert meta["run"] == SHIPPED
    assert (folder / "encoder.onnx").read_bytes() == (MODELS / f"{VERSION}.onnx").read_bytes()
    assert json.loads((folder / "report.json").read_text()) == meta["figures"][meta["run"]]
    stamp = (folder / "best.safetensors").stat().st_mtime_ns
    recipe("probe", tmp_path)
    assert (folder / "best.safetensors").stat().st_mtime_ns == stamp
