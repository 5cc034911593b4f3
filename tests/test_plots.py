"""PNG plots beside eval and bench reports (evaluation/plots.py), from the reports' JSON dicts."""
from __future__ import annotations

import builtins

import pytest

from evaluation import plots

PNG = b"\x89PNG\r\n\x1a\n"


def _retrieval_report() -> dict:
    systems = {"bm25": 0.5, "dense": 0.7, "hybrid": 0.9}
    return {"dataset": "locomo", "questions": 12, "results": {
        s: {c: {"recall@1": 40 * f, "recall@5": 70 * f, "recall@10": 90 * f, "n": 4} for c in ("1", "2", "overall")}
        for s, f in systems.items()}}


def _answer_report() -> dict:
    """The shape `eval answer` writes: policy -> category -> rates, with counts and latencies beside them."""
    row = {"right": 0.4, "answer_recall": 0.55, "cite_hit@1": 0.3, "false_decline": 0.1, "n": 1,
           "p95_latency_ms": 820.0, "unchecked": 0.0, "novel_rate": 0.2}
    return {"dataset": "socialmem", "questions": 9,
            "results": {p: {c: dict(row) for c in ("Q1", "Q2", "overall")} for p in ("evidence", "generate")}}


@pytest.mark.parametrize("kind, report", [("retrieval", _retrieval_report()), ("answer", _answer_report())])
def test_report_plots_are_png_files(tmp_path, kind, report):
    pytest.importorskip("matplotlib")
    note = plots.write_report_plot(kind, tmp_path / f"{kind}.png", report)
    png = tmp_path / f"{kind}.png"
    assert note == f"plot: {png}" and png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000


def test_answer_plot_shows_rates_not_counts_or_latencies():
    keys = [k for k, _ in plots.answer_metrics(_answer_report())]
    assert keys == ["right", "answer_recall", "cite_hit@1", "false_decline", "novel_rate"]
    old_shape = {"results": {"overall": {"set_f1": 0.3, "locomo_f1": 0.2, "abstain_correct": 1.0, "n": 5,
                                         "latency_ms": 12.0, "prompt_tokens": 900.0}}}
    assert [k for k, _ in plots.answer_metrics(old_shape)] == ["set_f1", "locomo_f1", "abstain_correct"]


def test_without_matplotlib_the_command_says_so(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    note = plots.write_report_plot("retrieval", tmp_path / "r.png", _retrieval_report())
    assert "matplotlib is not installed" in note and "chorus[eval]" in note and not (tmp_path / "r.png").exists()
