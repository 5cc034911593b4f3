"""Two or more reader runs scored on the same validation questions, overall and per question form.

A run's own report is scored on the validation questions of its day; when the labelled data grows, an older
run must be scored again on the new questions before two runs can be compared. This does that: each run's
int8 graph reads the same questions, its threshold and order weight are chosen on them as `evaluate_run` does,
and false declines are counted per question form, since a form can be declined as a form ("what time" once
was mostly unanswerable in the data).

    python -m evaluation.reader_compare all forms-replay  [--out out/reader/runs] [--write FILE]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from .question_forms import question_form
from .reader_eval import Scored

CROWDED = ("what time", "how much", "how many")  # forms whose labelled near misses outnumbered answerables


def form_declines(scored: Sequence[Scored], threshold: float) -> dict[str, dict[str, int]]:
    """Per question form: answerable questions and those declined; labelled unanswerable ones and those declined."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"answerable": 0, "false_declines": 0,
                                                         "unanswerable": 0, "declined": 0})
    for s in scored:
        row = out[question_form(s.q.question)]
        declined = s.best < threshold
        if s.q.kind == "answerable":
            row["answerable"] += 1
            row["false_declines"] += declined
        elif s.q.kind in ("near_miss", "off_topic"):
            row["unanswerable"] += 1
            row["declined"] += declined
    return dict(out)


def crowded(forms: dict[str, dict[str, int]]) -> dict[str, int]:
    """The crowded forms' totals."""
    keys = ("answerable", "false_declines", "unanswerable", "declined")
    return {k: sum(forms.get(f, {}).get(k, 0) for f in CROWDED) for k in keys}


def compare(names: Sequence[str], out: Path, log=print) -> dict:
    """Score every named run on the last run's validation questions, as that run reads them (every run of one
    round shares them)."""
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import Encoder

    from .reader_eval import choose, figures, score
    from .reader_train import RUNS, rows_for

    val_ids = set(json.loads((out / names[-1] / "split.json").read_text())["validation"])
    _, rows = rows_for(RUNS[names[-1]], OnnxMiniLMEmbedder(), names[-1])
    by_source: dict[str, list] = defaultdict(list)
    for q in rows:
        if q.conversation in val_ids:
            by_source[q.source].append(q)
    report: dict = {"validation": sorted(val_ids), "runs": {}}
    for name in names:
        encoder = Encoder(out / name / "encoder.onnx", {"version": name})
        scored = {src: score(encoder, qs) for src, qs in by_source.items()}
        threshold, weight = choose(scored)
        forms = form_declines([s for ss in scored.values() for s in ss], threshold)
        report["runs"][name] = {"threshold": threshold, "rerank_weight": weight,
                                "validation": {src: figures(ss, threshold, weight) for src, ss in scored.items()},
                                "crowded_forms": crowded(forms), "forms": forms}
        log(f"{name}: {json.dumps({k: v for k, v in report['runs'][name].items() if k != 'forms'})}")
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run names under --out, each with an encoder.onnx")
    parser.add_argument("--out", type=Path, default=Path("out/reader/runs"))
    parser.add_argument("--write", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    report = compare(args.runs, args.out)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
