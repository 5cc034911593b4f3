"""A reader model on the persons round's questions (evaluation/data/LABELLING.md, Part A3).

    python -m evaluation.persons_check [GRAPH] [--threshold T] [--weight W] [--chats CHAT ...]

GRAPH is an int8 reader graph (default: the shipped encoder). Every wrong-person near miss and right-person
twin of the round is read through it; the figures are the share of wrong-person near misses declined at the
threshold, the twins falsely declined, the decline AUC between the two (the twins whose answer is read against
the near misses), and the twins' cite-hit@1. Until a run trains on the round these questions are unseen by every
model, so they are the round's "before"; afterwards only the validation chats' questions are.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .reader_data import QuestionRows

PREMISES = ("wrong_person", "right_person")


def premises(round_name: str = "persons") -> dict[str, str]:
    """Question id -> its premise, for the round's lines that carry one."""
    from .reader_labels import QUESTIONS_DIR
    from .reader_rounds import in_round, last_before

    before = last_before(round_name)
    out = {}
    for path in sorted(QUESTIONS_DIR.glob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                if in_round(item["id"], before) and item.get("premise") in PREMISES:
                    out[item["id"]] = item["premise"]
    return out


def figures(scored: Sequence, kinds: dict[str, str], threshold: float, weight: float) -> dict[str, float]:
    """Declines and reading of the round's questions (``scored``: evaluation.reader_eval.Scored)."""
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


def main(argv: Sequence[str] | None = None) -> None:
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import MODELS, VERSION, Encoder

    from .reader_data import cached_rows
    from .reader_eval import score
    from .reader_labels import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph", nargs="?", type=Path, default=MODELS / f"{VERSION}.onnx")
    parser.add_argument("--threshold", type=float, help="default: the shipped encoder's")
    parser.add_argument("--weight", type=float, help="default: the shipped encoder's")
    parser.add_argument("--chats", nargs="+", help="only these chats (e.g. a run's validation chats)")
    args = parser.parse_args(argv)
    meta = json.loads((MODELS / f"{VERSION}.json").read_text())
    threshold = args.threshold if args.threshold is not None else float(meta["threshold"])
    weight = args.weight if args.weight is not None else float(meta["rerank_weight"])
    kinds = premises()
    rows: list[QuestionRows] = [q for q in cached_rows(load(["chats"]), OnnxMiniLMEmbedder()) if q.qid in kinds
                             and q.kind in ("answerable", "near_miss")
                             and (not args.chats or q.conversation in args.chats)]
    scored = score(Encoder(args.graph, {"version": args.graph.stem}), rows)
    print(json.dumps(figures(scored, kinds, threshold, weight), indent=1))


if __name__ == "__main__":
    main()
