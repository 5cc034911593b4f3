"""Held-out figures of a reader model, read through the shipped runtime (int8 ONNX), and its constants.

Scored as the reply reads: only the reranker's best `READ` candidates of each question, in the reranker's
order. Per question the best P(answers) is the decline's score. Figures:

- decline AUC: answerable questions whose answer is among the read candidates, against unanswerable ones
  (near misses, off-topic questions, and counterfactuals: an answerable question with its answers removed);
- false declines: answerable questions whose best P is under the threshold (all answerable questions);
- unanswerable declined: near misses and off-topic questions under the threshold;
- cite-hit@1: the first candidate in the reader's order answers (reranker's order beside it);
- span F1 / exact match: the words the model picks in the gold message against the labelled answer.

The threshold is the highest that keeps false declines at or under the ceiling on every tuning source's
validation conversations; the reranker weight in the order is the one with the best mean cite-hit@1 there.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memory.encoder.model import Encoder
from memory.query.reading import READ

from .reader_data import QuestionRows, row_ages
from .reader_metrics import auc, exact, threshold_for, token_f1

CEILING = 0.05  # the most false declines the threshold may cost on a tuning source
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)  # reranker weights tried in the order


@dataclass
class Scored:
    q: QuestionRows
    probs: list[float]  # one per read row, in the reranker's order
    spans: list[str]
    gold_probs: list[float] = field(default_factory=list)  # the gold rows' P wherever they rank
    gold_spans: list[tuple[str, list[str]]] = field(default_factory=list)  # (picked, labelled) on gold rows

    @property
    def read(self) -> list:
        return [r for r in self.q.rows if r.rank < READ][:READ]

    @property
    def best(self) -> float:
        return max(self.probs, default=0.0)


def score(encoder: Encoder, questions: Sequence[QuestionRows], read: int = READ) -> list[Scored]:
    """Every question's read candidates through the encoder, plus its gold rows (for span figures)."""
    out = []
    for q in questions:
        shown = [r for r in q.rows if r.rank < read][:read]
        gold = [r for r in q.rows if r.label == 1 and r.spans and r not in shown]
        ages = row_ages(q, read)
        tag = {id(r): a for r, a in zip(q.rows, ages)}
        readings = encoder.read(q.question, [(r.context, r.candidate) for r in shown + gold],
                                [tag[id(r)] for r in shown + gold])
        s = Scored(q, [x.p for x in readings[:len(shown)]], [x.span for x in readings[:len(shown)]])
        for r, x in zip(shown + gold, readings):
            if r.label == 1:
                s.gold_probs.append(x.p)
                if r.spans:
                    s.gold_spans.append((x.span, r.spans))
        out.append(s)
    return out


def reply_scores(probs: Sequence[float], reranks: Sequence[float], weight: float) -> list[float]:
    """What the reply orders read candidates by: the reader's logit plus the reranker's score at ``weight``."""
    return [float(np.log(max(p, 1e-6) / max(1 - p, 1e-6)) + weight * r) for p, r in zip(probs, reranks)]


def reply_order(s: Scored, weight: float) -> list[int]:
    """The read rows in the reply's order (ties keep the reranker's order, as memory/query/reading.judge does)."""
    logits = reply_scores(s.probs, [r.rerank for r in s.read], weight)
    return sorted(range(len(logits)), key=lambda i: -logits[i])


def hit_at_1(s: Scored, weight: float) -> bool | None:
    """Whether the reader's first candidate answers (None: the question has no answer among the read)."""
    rows = s.read
    if not any(r.label == 1 for r in rows):
        return None
    return rows[reply_order(s, weight)[0]].label == 1


def figures(scored: Sequence[Scored], threshold: float, weight: float) -> dict[str, float]:
    answerable = [s for s in scored if s.q.kind == "answerable"]
    found = [s for s in answerable if any(r.label == 1 for r in s.read)]
    unanswerable = [s for s in scored if s.q.kind in ("near_miss", "off_topic")]
    counterfactual = [s for s in scored if s.q.kind == "counterfactual"]
    hits = [h for s in found if (h := hit_at_1(s, weight)) is not None]
    base = [s.read[0].label == 1 for s in found if s.read]
    spans = [(p, g) for s in answerable for p, g in s.gold_spans]
    out = {
        "questions": len(scored), "answerable": len(answerable), "answer_read": len(found),
        "unanswerable": len(unanswerable), "counterfactual": len(counterfactual),
        "decline_auc": auc([s.best for s in found], [s.best for s in unanswerable + counterfactual]),
        "decline_auc_labelled": auc([s.best for s in found], [s.best for s in unanswerable]),
        "false_declines": float(np.mean([s.best < threshold for s in answerable])) if answerable else 0.0,
        "unanswerable_declined": float(np.mean([s.best < threshold for s in unanswerable])) if unanswerable else 0.0,
        "counterfactual_declined": float(np.mean([s.best < threshold for s in counterfactual]))
        if counterfactual else 0.0,
        "cite_hit1": float(np.mean(hits)) if hits else 0.0,
        "rerank_hit1": float(np.mean(base)) if base else 0.0,
        "span_f1": float(np.mean([max(token_f1(p, g) for g in gs) for p, gs in spans])) if spans else 0.0,
        "span_em": float(np.mean([max(exact(p, g) for g in gs) for p, gs in spans])) if spans else 0.0,
        "span_n": len(spans), "threshold": threshold, "weight": weight,
    }
    return out


def choose(by_source: dict[str, list[Scored]], ceiling: float = CEILING) -> tuple[float, float]:
    """The threshold (at most ``ceiling`` false declines on every source) and the order's reranker weight."""
    thresholds = [threshold_for([s.best for s in ss if s.q.kind == "answerable"], ceiling)
                  for ss in by_source.values() if any(s.q.kind == "answerable" for s in ss)]
    threshold = min(thresholds) if thresholds else 0.5

    def mean_hit(w: float) -> float:
        per = [np.mean(h) for ss in by_source.values()
               if (h := [x for s in ss if s.q.kind == "answerable" and (x := hit_at_1(s, w)) is not None])]
        return float(np.mean(per)) if per else 0.0

    weight = max(WEIGHTS, key=lambda w: (round(mean_hit(w), 4), -w))
    return threshold, weight


def write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
