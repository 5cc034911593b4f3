"""Two or more reader runs scored on the same validation questions, overall and per question form.

A run's own report is scored on the validation questions of its day; when the labelled data grows, an older
run must be scored again on the new questions before two runs can be compared. This does that: each run's
int8 graph reads the same questions, its threshold and order weight are chosen on them as `evaluate_run` does,
and false declines are counted per question form, since a form can be declined as a form ("what time" once
was mostly unanswerable in the data).

    python -m evaluation.reader_compare all forms-replay  [--out out/reader/runs] [--write FILE] [--rule]
        [--unseen evaluation/data/incoming]

Each run's figures include the labelling rounds' validation-chat questions read by premise
(evaluation/round_check.py). ``--rule`` checks the last run against the first by the shipping rule written
before `all-states` was scored (docs/reader.md), condition by condition; LoCoMo comes from each run's own report.
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


def compare(names: Sequence[str], out: Path, log=print, unseen: Path | None = None) -> dict:
    """Score every named run on the last run's validation questions, as that run reads them (every run of one
    round shares them). ``unseen``: a folder of chats no run has read (``<unseen>/*.json`` with their questions in
    ``<unseen>/questions``), whose round questions join the validation chats' in the rounds' figures, read at
    each run's own threshold; ``rounds_validation`` keeps the validation chats' alone."""
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import Encoder, graph_meta

    from .reader_data import cached_rows
    from .reader_eval import choose, figures, score
    from .reader_labels import load
    from .reader_train import RUNS, rows_for
    from .round_check import askers, decoys, marked, persons, premises, states

    val_ids = set(json.loads((out / names[-1] / "split.json").read_text())["validation"])
    embedder = OnnxMiniLMEmbedder()
    _, rows = rows_for(RUNS[names[-1]], embedder, names[-1])
    extra: list = []
    # question id -> premise and -> decoys, every round's at once (each round's figures read only its premises)
    kinds = {**premises("persons"), **premises("states"), **premises("askers")}
    traps = {**decoys("states"), **decoys("askers")}
    if unseen is not None:
        extra = cached_rows(load(["chats"], chats_dir=unseen, questions_dir=unseen / "questions"), embedder)
        more_kinds, more_traps = marked(unseen / "questions")
        kinds, traps = {**kinds, **more_kinds}, {**traps, **more_traps}
    by_source: dict[str, list] = defaultdict(list)
    for q in rows:
        if q.conversation in val_ids:
            by_source[q.source].append(q)
    report: dict = {"validation": sorted(val_ids), "unseen": str(unseen) if unseen else None, "runs": {}}

    def rounds(scored: list, threshold: float, weight: float) -> dict:
        return {"persons": persons(scored, kinds, threshold, weight),
                "states": states(scored, kinds, traps, threshold, weight),
                "askers": askers(scored, kinds, traps, threshold, weight)}

    for name in names:
        encoder = Encoder(out / name / "encoder.onnx", graph_meta(out / name / "encoder.onnx"))
        scored = {src: score(encoder, qs) for src, qs in by_source.items()}
        threshold, weight = choose(scored)
        forms = form_declines([s for ss in scored.values() for s in ss], threshold)
        chats = scored.get("chats", [])
        report["runs"][name] = {"threshold": threshold, "rerank_weight": weight,
                                "validation": {src: figures(ss, threshold, weight) for src, ss in scored.items()},
                                "crowded_forms": crowded(forms), "forms": forms,
                                "rounds": rounds(chats + (score(encoder, extra) if extra else []), threshold, weight),
                                "rounds_validation": rounds(chats, threshold, weight)}
        log(f"{name}: {json.dumps({k: v for k, v in report['runs'][name].items() if k != 'forms'})}")
    return report


def rule(base: dict, cand: dict, base_locomo: float, cand_locomo: float) -> list[tuple[str, float, float, bool]]:
    """The shipping rule written before `all-states` was scored, for a candidate against the shipped model, both
    from one `compare` report: (condition, shipped value, candidate value, met). The test suite with the candidate
    in place is the rule's last part and is run by hand (docs/reader.md)."""
    def val(run: dict, src: str, key: str) -> float:
        return float(run["validation"].get(src, {}).get(key, float("nan")))

    def rnd(run: dict, name: str, key: str) -> float:
        return float(run["rounds"][name][key])

    def twins(run: dict) -> float:
        return rnd(run, "persons", "right_person_false_declines") * rnd(run, "persons", "right_person")

    at_least = lambda b, c: c >= b  # noqa: E731
    conditions = [  # (what, how to read it from a run, met given (shipped, candidate))
        ("chats cite-hit@1 at least", lambda r: val(r, "chats", "cite_hit1"), at_least),
        ("chats labelled AUC at least", lambda r: val(r, "chats", "decline_auc_labelled"), at_least),
        ("LoCoMo cite-hit@1 at most 0.5 points lower", lambda r: r["locomo"], lambda b, c: c >= b - 0.005),
        ("FriendsQA labelled AUC at most 0.01 lower", lambda r: val(r, "friendsqa", "decline_auc_labelled"),
         lambda b, c: c >= b - 0.01),
        ("state now: led by a decoy less often", lambda r: rnd(r, "states", "now_decoy_first"),
         lambda b, c: c < b),
        ("state before: cited first no less often", lambda r: rnd(r, "states", "before_cite_hit1"), at_least),
        ("wrong-person near misses declined more", lambda r: rnd(r, "persons", "wrong_person_declined"),
         lambda b, c: c > b),
        ("right-person twins falsely declined: at most one more", twins, lambda b, c: c <= b + 1),
    ]
    base, cand = {**base, "locomo": base_locomo}, {**cand, "locomo": cand_locomo}
    return [(what, b, c, met(b, c)) for what, read, met in conditions for b, c in [(read(base), read(cand))]]


def rule_next(base: dict, cand: dict, base_locomo: float, cand_locomo: float
              ) -> list[tuple[str, float, float, bool]]:
    """The rule written after `v2-72` for the next candidate, before any such run existed (docs/reader.md): the
    same eight readings as `rule`, the large sets unchanged, and the round conditions as non-inferiority within
    what a few dozen questions can tell apart, instead of "strictly better" on them (the decoy and twins
    conditions failed `all-states` and `v2-72` by a tie and by one or two questions)."""
    kept = {c: (b, v, m) for c, b, v, m in rule(base, cand, base_locomo, cand_locomo)}
    margins = [  # (condition of `rule`, what it becomes, met given (shipped, candidate))
        ("state now: led by a decoy less often", "state now: led by a decoy at most 3 points more often",
         lambda b, c: c <= b + 0.03),
        ("state before: cited first no less often", "state before: cited first at most 4 points less often",
         lambda b, c: c >= b - 0.04),
        ("wrong-person near misses declined more", "wrong-person near misses declined at least as often",
         lambda b, c: c >= b),
        ("right-person twins falsely declined: at most one more", "right-person twins falsely declined: at most "
         "three more", lambda b, c: c <= b + 3),
    ]
    out = [(c, b, v, m) for c, (b, v, m) in kept.items() if c not in {old for old, _, _ in margins}]
    return out + [(new, kept[old][0], kept[old][1], met(kept[old][0], kept[old][1])) for old, new, met in margins]


RULES = {"all-states": rule, "next": rule_next}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run names under --out, each with an encoder.onnx")
    parser.add_argument("--out", type=Path, default=Path("out/reader/runs"))
    parser.add_argument("--write", type=Path, help="write the report here as JSON")
    parser.add_argument("--rule", nargs="?", const="all-states", choices=sorted(RULES),
                        help="check the last run against the first by a shipping rule (default: the one written "
                             "before `all-states`; `next`: the one written after `v2-72`)")
    parser.add_argument("--unseen", type=Path, help="chats no run has read, whose round questions join the rounds' "
                        "figures (evaluation/data/incoming)")
    args = parser.parse_args(argv)
    report = compare(args.runs, args.out, unseen=args.unseen)
    if args.rule:
        first, last = args.runs[0], args.runs[-1]
        locomo = [json.loads((args.out / r / "report.json").read_text())["held_out"]["locomo"]["cite_hit1"]
                  for r in (first, last)]
        report["rule"] = RULES[args.rule](report["runs"][first], report["runs"][last], *locomo)
        for cond, b, c, met in report["rule"]:
            print(f"{'met' if met else 'NOT met'}: {cond} ({first} {b:.4f}, {last} {c:.4f})")
        print("rule met (now run the tests with the candidate in place)" if all(m for *_, m in report["rule"])
              else "rule not met: do not ship")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
