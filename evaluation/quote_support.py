"""Do the quotes beside an answer's lead support it? Extra quotes by the floor they must reach.

`python -m evaluation.quote_support [RUN]` reads the validation questions of a reader run (`all` by default:
the conversations the shipped encoder never trained on) through the shipped encoder, orders each question's
read candidates as the reply does (the reader's logit plus the reranker's score at the model's weight), and,
for the questions the reply answers, counts the quotes it would show beside the lead at each floor: those
labelled as answering (the turn or an `also` turn) and those labelled as not. Labels list restatements
(`also`) unevenly, so "supporting" is a lower bound; the comparison across floors is what it is for.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
from memory.encoder.model import shipped_encoder

from .reader_eval import Scored, reply_order, score

FLOORS = (0.1, 0.25, 0.5, 0.75, 0.9)
BESIDE = 2  # the reply shows at most three quotes: the lead and two more


def extras(s: Scored, weight: float, floor: float) -> list[int]:
    """The read rows the reply would quote beside the lead at ``floor``, in its order."""
    return [i for i in reply_order(s, weight)[1:] if s.probs[i] >= floor][:BESIDE]


def table(scored: Sequence[Scored], weight: float, floors: Sequence[float]) -> list[dict]:
    out = []
    for f in floors:
        good = bad = 0
        for s in scored:
            kept = extras(s, weight, f)
            good += sum(s.read[i].label == 1 for i in kept)
            bad += sum(s.read[i].label == 0 for i in kept)
        out.append({"floor": round(f, 4), "questions": len(scored), "quotes": good + bad, "supporting": good,
                    "share": good / max(1, good + bad)})
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from .reader_train import RUNS, rows_for  # the train extra's modules: only the command needs them

    run = args[0] if args else "all"
    enc = shipped_encoder()
    _, rows = rows_for(RUNS[run], OnnxMiniLMEmbedder(), run)
    val = set(json.loads((Path("out/reader/runs") / run / "split.json").read_text())["validation"])
    scored = score(enc, [q for q in rows if q.conversation in val and q.kind == "answerable"])
    floors = (enc.threshold, *FLOORS)
    for src in sorted({s.q.source for s in scored}):
        answered = [s for s in scored if s.q.source == src and s.best >= enc.threshold]
        for r in table(answered, enc.rerank_weight, floors):
            print(f"{src}: floor {r['floor']:.3f}, {r['questions']} answered, quotes beside the lead {r['quotes']}, "
                  f"labelled as answering {r['supporting']} ({100 * r['share']:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
