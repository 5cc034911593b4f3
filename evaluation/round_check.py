"""A reader model on one labelling round's questions (evaluation/data/LABELLING.md, Parts A3-A5).

    python -m evaluation.round_check persons|states|askers [GRAPH] [--threshold T] [--weight W] [--chats CHAT ...]

GRAPH is an int8 reader graph (default: the shipped encoder). The round's questions are read through it by
premise. Persons round: the share of wrong-person near misses declined at the threshold, the right-person
twins falsely declined, the decline AUC between the two, and the twins' cite-hit@1. States round: for questions
about the state now, how often the reply leads with the message that holds it and how often with a decoy (a
vote, a proposal, the plan it replaced); the same for the state before a change; and the share of never-settled
near misses declined. Askers round: the same leads for questions whose tempting message is the asker's own
problem or a value later corrected. Until a run trains on a round its questions are unseen by every model, so
they are the round's "before"; afterwards only the validation chats' questions are.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .reader_data import QuestionRows

PREMISES = {"persons": ("wrong_person", "right_person"), "states": ("now", "before", "unsettled"),
            "askers": ("asker",)}


def _premised(questions_dir: Path):
    """Every question line of ``questions_dir`` that carries a premise (a labelling round's line)."""
    for path in sorted(questions_dir.glob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                if item.get("premise"):
                    yield item


def _lines(round_name: str):
    from .reader_labels import QUESTIONS_DIR
    from .reader_rounds import in_round, last_before

    before = last_before(round_name)
    return (item for item in _premised(QUESTIONS_DIR)
            if in_round(item["id"], before) and item["premise"] in PREMISES[round_name])


def marked(questions_dir: Path) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Every line of ``questions_dir`` that carries a premise: question id -> premise, and -> its decoys. For chats
    no run has read yet (evaluation/data/incoming), where a premise marks a round's line wherever it sits."""
    items = list(_premised(questions_dir))
    return {i["id"]: i["premise"] for i in items}, {i["id"]: set(i.get("decoys") or []) for i in items}


def premises(round_name: str = "persons") -> dict[str, str]:
    """Question id -> its premise, for the round's lines that carry one."""
    return {item["id"]: item["premise"] for item in _lines(round_name)}


def decoys(round_name: str = "states") -> dict[str, set[str]]:
    """Question id -> the turns labelled as read-alikes that do not answer it."""
    return {item["id"]: set(item.get("decoys") or []) for item in _lines(round_name)}


def persons(scored: Sequence, kinds: dict[str, str], threshold: float, weight: float) -> dict[str, float]:
    """Declines and reading of the persons round's questions (``scored``: evaluation.reader_eval.Scored)."""
    from .reader_eval import hit_at_1
    from .reader_metrics import auc

    wrong = [s for s in scored if kinds.get(s.q.qid) == "wrong_person"]
    right = [s for s in scored if kinds.get(s.q.qid) == "right_person"]
    found = [s for s in right if any(r.label == 1 for r in s.read)]
    hits = [h for s in found if (h := hit_at_1(s, weight)) is not None]
    return {"wrong_person": len(wrong), "right_person": len(right),
            "wrong_person_declined": sum(s.best < threshold for s in wrong) / max(len(wrong), 1),
            "right_person_false_declines": sum(s.best < threshold for s in right) / max(len(right), 1),
            "decline_auc": auc([s.best for s in found], [s.best for s in wrong]),
            "right_person_cite_hit1": sum(hits) / max(len(hits), 1), "threshold": threshold, "weight": weight}


def states(scored: Sequence, kinds: dict[str, str], decoy_turns: dict[str, set[str]], threshold: float,
           weight: float) -> dict[str, float]:
    """Which message the reply leads with on the states round's questions, and the unsettled ones declined."""
    out: dict[str, float] = {"threshold": threshold, "weight": weight}
    for premise in ("now", "before"):
        out.update(leads(scored, kinds, decoy_turns, premise, threshold, weight))
    unsettled = [s for s in scored if kinds.get(s.q.qid) == "unsettled"]
    out["unsettled"] = len(unsettled)
    out["unsettled_declined"] = sum(s.best < threshold for s in unsettled) / max(len(unsettled), 1)
    return out


def leads(scored: Sequence, kinds: dict[str, str], decoy_turns: dict[str, set[str]], premise: str,
          threshold: float, weight: float) -> dict[str, float]:
    """For the questions of one premise: how many, how often the reply leads with the answer and how often with
    a decoy (of those whose answer is read), and how often they are falsely declined."""
    from .reader_eval import reply_order

    qs = [s for s in scored if kinds.get(s.q.qid) == premise]
    found = [s for s in qs if any(r.label == 1 for r in s.read)]
    first = [s.read[reply_order(s, weight)[0]] for s in found]
    return {premise: len(qs), f"{premise}_cite_hit1": sum(r.label == 1 for r in first) / max(len(found), 1),
            f"{premise}_decoy_first": sum(r.msg_id in decoy_turns.get(s.q.qid, set())
                                          for s, r in zip(found, first)) / max(len(found), 1),
            f"{premise}_false_declines": sum(s.best < threshold for s in qs) / max(len(qs), 1)}


def askers(scored: Sequence, kinds: dict[str, str], decoy_turns: dict[str, set[str]], threshold: float,
           weight: float) -> dict[str, float]:
    """The askers round (Part A5): how often the reply leads with the answer rather than the asker's own words
    or the value they corrected."""
    return {"threshold": threshold, "weight": weight,
            **leads(scored, kinds, decoy_turns, "asker", threshold, weight)}


def main(argv: Sequence[str] | None = None) -> None:
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import MODELS, VERSION, Encoder, graph_meta

    from .reader_data import cached_rows
    from .reader_eval import score
    from .reader_labels import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("round", choices=sorted(PREMISES))
    parser.add_argument("graph", nargs="?", type=Path, default=MODELS / f"{VERSION}.onnx")
    parser.add_argument("--threshold", type=float, help="default: the shipped encoder's")
    parser.add_argument("--weight", type=float, help="default: the shipped encoder's")
    parser.add_argument("--chats", nargs="+", help="only these chats (e.g. a run's validation chats)")
    args = parser.parse_args(argv)
    meta = json.loads((MODELS / f"{VERSION}.json").read_text())
    threshold = args.threshold if args.threshold is not None else float(meta["threshold"])
    weight = args.weight if args.weight is not None else float(meta["rerank_weight"])
    kinds = premises(args.round)
    rows: list[QuestionRows] = [q for q in cached_rows(load(["chats"]), OnnxMiniLMEmbedder()) if q.qid in kinds
                                and q.kind in ("answerable", "near_miss")
                                and (not args.chats or q.conversation in args.chats)]
    scored = score(Encoder(args.graph, graph_meta(args.graph)), rows)
    if args.round == "persons":
        result = persons(scored, kinds, threshold, weight)
    elif args.round == "askers":
        result = askers(scored, kinds, decoys(args.round), threshold, weight)
    else:
        result = states(scored, kinds, decoys(args.round), threshold, weight)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
