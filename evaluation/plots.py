"""PNG plots beside the JSON reports of ``chorus eval`` and ``chorus bench load``.

Each function takes the report's JSON dict (what the command writes), so a report
module can change how it computes its numbers without touching the plots.
matplotlib is an optional extra (``pip install 'chorus[eval]'``): it is imported on
first use, with the file-only Agg backend, and its absence is a ``PlotUnavailable``
the commands report in one line instead of failing the evaluation.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memory.errors import ChorusError

_RECALL = re.compile(r"^recall@(\d+)$")
# Reply metrics of answer reports shown first, in this order; any other 0..1 metric a report has follows.
ANSWER_METRICS = {"right": "right", "answer_recall": "answer recall", "cite_hit@1": "cite-hit@1",
                  "cite_hit@3": "cite-hit@3", "search_recall@3": "search recall@3",
                  "declined_unanswerable": "declined (unanswerable)", "false_decline": "false declines",
                  "generated_shown": "model sentence shown", "set_f1": "token-F1 (set)", "locomo_f1": "LoCoMo F1",
                  "abstain_correct": "abstention acc.", "judge": "judge acc."}
_NOT_RATES = ("n", "unchecked", "prompt_tokens")


class PlotUnavailable(ChorusError):
    """matplotlib is not installed, so no PNG is written (the JSON and Markdown still are)."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable("no plot written: matplotlib is not installed (pip install 'chorus[eval]')") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def _grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]], *, ylabel: str) -> None:
    """One cluster of bars per group, one bar per series, with a legend."""
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=name)
    ax.set_xticks(range(len(groups)), groups, rotation=30 if len(groups) > 6 else 0, ha="right"
                  if len(groups) > 6 else "center")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    top = max((v for values in series.values() for v in values), default=0.0)
    ax.set_ylim(0, max(5.0, top * 1.18))
    ax.legend(fontsize="small", ncol=min(4, n))


def retrieval_plot(path: str | Path, report: dict[str, Any]) -> Path:
    """Recall@k per system (the ``overall`` row) and per-category bars at the largest k."""
    results: dict[str, dict[str, dict[str, float]]] = report["results"]
    systems = list(results)
    if not systems:
        raise ChorusError("the retrieval report has no systems to plot")
    first = results[systems[0]]
    categories = [c for c in first if c != "overall"]
    overall = "overall" if "overall" in first else next(iter(first))
    ks = sorted(int(m.group(1)) for key in first[overall] if (m := _RECALL.match(key)))
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 2]})
    for system in systems:
        left.plot(ks, [results[system][overall].get(f"recall@{k}", 0.0) for k in ks], marker="o", label=system)
    left.set_xlabel("k")
    left.set_ylabel("evidence recall@k (%)")
    left.set_title(f"{overall}: recall@k per system")
    left.set_xticks(ks)
    left.grid(alpha=0.3)
    left.legend(fontsize="small")
    k_max = ks[-1] if ks else 0
    _grouped_bars(right, categories or [overall],
                  {s: [results[s].get(c, {}).get(f"recall@{k_max}", 0.0) for c in (categories or [overall])]
                   for s in systems}, ylabel=f"recall@{k_max} (%)")
    right.set_title(f"recall@{k_max} per category")
    fig.suptitle(f"Evidence recall on {report.get('dataset', '?')} ({report.get('questions', '?')} questions)")
    return _save(fig, Path(path))


def _policies(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """``{policy: {category: metrics}}`` from an answer report, with or without a policy level."""
    sample: Any = next(iter(results.values()), {})
    if sample and all(isinstance(v, dict) for v in sample.values()):
        return results
    return {"answer": results}


def answer_metrics(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, label) of the 0..1 rates in an answer report's overall rows: known ones first, then the rest."""
    present: dict[str, Any] = {}
    for rows in _policies(report["results"]).values():
        present.update(rows.get("overall") or next(iter(rows.values()), {}))
    rates = [k for k, v in present.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
             and 0 <= v <= 1 and k not in _NOT_RATES and "latency" not in k]
    return ([(k, label) for k, label in ANSWER_METRICS.items() if k in rates]
            + [(k, k.replace("_", " ")) for k in rates if k not in ANSWER_METRICS])


def answer_plot(path: str | Path, report: dict[str, Any]) -> Path:
    """Reply metrics (the report's 0..1 rates) per policy, overall and, for the first, per category."""
    policies = _policies(report["results"])
    if not policies:
        raise ChorusError("the answer report has no results to plot")
    any_rows = next(iter(policies.values()))
    overall = "overall" if "overall" in any_rows else next(iter(any_rows))
    metrics = answer_metrics(report)
    if not metrics:
        raise ChorusError("the answer report has no 0..1 metrics to plot")
    categories = list(dict.fromkeys(c for rows in policies.values() for c in rows if c != "overall"))
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1.3, 2]})
    per_policy = {p: [100 * rows.get(overall, {}).get(key, 0.0) for key, _ in metrics] for p, rows in policies.items()}
    _grouped_bars(left, [label for _, label in metrics], per_policy, ylabel="percent")
    left.set_title(f"{overall}: reply metrics per policy")
    # Per category: the first rate that is not zero everywhere (an all-zero panel says nothing).
    headline = next((m for m in metrics if any(rows.get(overall, {}).get(m[0]) for rows in policies.values())),
                    metrics[0])
    _grouped_bars(right, categories or [overall],
                  {p: [100 * rows.get(c, {}).get(headline[0], 0.0) for c in (categories or [overall])]
                   for p, rows in policies.items()}, ylabel=f"{headline[1]} (%)")
    right.set_title(f"{headline[1]} per category")
    fig.suptitle(f"Answers on {report.get('dataset', '?')} ({report.get('questions', '?')} questions)")
    return _save(fig, Path(path))


def timeline_plot(path: str | Path, title: str,
                  panels: Sequence[tuple[str, str, dict[str, tuple[Sequence[float], Sequence[float], bool]]]]) -> Path:
    """Stacked panels sharing the time axis: ``(title, unit, {label: (xs, ys, as_points)})`` each."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.1 * len(panels)), sharex=True, squeeze=False)
    for ax, (name, unit, series) in zip(axes[:, 0], panels):
        for label, (xs, ys, points) in series.items():
            if points:
                ax.plot(xs, ys, "o", markersize=3, label=label)
            else:
                ax.plot(xs, ys, linewidth=1.2, label=label)
        ax.set_title(name, fontsize="medium", loc="left")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize="small", loc="upper right")
    axes[-1, 0].set_xlabel("seconds")
    fig.suptitle(title)
    return _save(fig, Path(path))


def write_report_plot(kind: str, path: str | Path, report: dict[str, Any]) -> str:
    """Write the PNG for an eval report; a one-line note of what happened (for the command's output)."""
    plotters = {"retrieval": retrieval_plot, "answer": answer_plot}
    try:
        return f"plot: {plotters[kind](path, report)}"
    except PlotUnavailable as exc:
        return str(exc)
