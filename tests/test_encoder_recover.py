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


def test_the_shipped_runs_folder_is_put_back_when_it_is_gone(tmp_path):
    """out/ is not kept: a run started from the shipped run finds its start read back from the shipped files,
    with the report the shipped metadata recorded (what `reader_compare` reads); a later call keeps it, and a
    start that is not the shipped run is never invented."""
    import json

    from evaluation.encoder_recover import start_weights

    shipped = MODELS / f"{VERSION}.onnx"
    meta = json.loads(shipped.with_suffix(".json").read_text())
    weights = start_weights(meta["run"], meta["run"], tmp_path, shipped)
    folder = tmp_path / meta["run"]
    assert weights == folder / "best.safetensors" and weights.exists()
    assert (folder / "encoder.onnx").read_bytes() == shipped.read_bytes()
    assert json.loads((folder / "report.json").read_text()) == meta["figures"][meta["run"]]
    stamp = weights.stat().st_mtime_ns
    start_weights(meta["run"], meta["run"], tmp_path, shipped)
    assert weights.stat().st_mtime_ns == stamp
    other = start_weights("some-other-run", meta["run"], tmp_path, shipped)
    assert not other.exists() and not other.parent.exists()


def test_a_run_continued_from_the_shipped_one_starts_from_its_weights(tmp_path, monkeypatch):
    """The training recipe (needs the train extra) reads the weights put back above."""
    pytest.importorskip("torch")
    from evaluation import reader_train

    monkeypatch.setitem(reader_train.STARTS_FROM, "probe", reader_train.SHIPPED)
    monkeypatch.setitem(reader_train.CONTINUED, "probe", {"lr": 1e-5})
    opts = reader_train.recipe("probe", tmp_path)
    assert opts.init == str(tmp_path / reader_train.SHIPPED / "best.safetensors")
    assert (tmp_path / reader_train.SHIPPED / "best.safetensors").exists()
    assert opts.epochs == 1.0 and opts.lr == 1e-5
