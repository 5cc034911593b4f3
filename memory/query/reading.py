"""The reader's judgement over a question's best candidates: which one answers, with which words, or none.

Search and the reranker put the answering message among the first few candidates; they cannot tell which
of those answers, or whether any does. The fine-tuned encoder (memory/encoder/) reads each of the best
`READ` candidates beside the question and the turn it follows, and gives P(it answers) and the answer's
words. The reply orders those candidates by that probability (the reranker's score breaks near-ties),
leads with the best one's words, and declines when no candidate reaches the model's threshold.

The context a candidate is read with is the one training used (evaluation/reader_data.py imports
`context_of` and `pair_texts` from here), so the model reads at run time what it learned from.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..encoder.inputs import age_tags, candidate_text
from ..encoder.model import Encoder, Reading
from ..models import StoredMessage
from ..question import Question, content_stems
from .candidates import Candidate

READ = 10  # the reranker's best candidates the reader reads (docs/replies.md: gold in the top 10, its cost)
ABOUT_READ = 40  # the most messages of a discussion read for an each-member or who-hasn't reply
ABOUT_COSINE = 0.2  # ... those that share a topic word with the question or are at least this close


@dataclass
class Judged:
    """The reader's readings of one question's best candidates, and the order they give."""

    readings: dict[int, Reading]  # candidate index -> reading
    order: list[int]  # candidate indices, best first (read ones first, then the reranker's rest)
    best: float  # the highest P(answers) among them (0 when none was read)


def context_of(c: Candidate) -> StoredMessage | None:
    """The turn a candidate follows: the message it replies to, else the turn before it."""
    return c.parent if c.parent is not None else (c.prev[0] if c.prev else None)


def pair_texts(c: Candidate) -> tuple[str, str]:
    """(context, candidate) as the encoder reads them."""
    ctx = context_of(c)
    return (candidate_text(ctx.author_name, ctx.text) if ctx is not None else "",
            candidate_text(c.message.author_name, c.message.text))


def judge(encoder: Encoder, question: str, cands: Sequence[Candidate], order: Sequence[int],
          scores: np.ndarray, read: int = READ) -> Judged:
    """Read the reranker's best ``read`` candidates and reorder them by the reader (the rest keep their order)."""
    top = list(order[:read])
    ages = age_tags([cands[i].message.ts for i in top])
    readings = dict(zip(top, encoder.read(question, [pair_texts(cands[i]) for i in top], ages)))
    if not readings:
        return Judged({}, list(order), 0.0)

    def key(i: int) -> float:  # the reader's logit, plus the reranker's score at the weight chosen in training
        p = min(max(readings[i].p, 1e-6), 1 - 1e-6)
        return float(np.log(p / (1 - p)) + encoder.rerank_weight * float(scores[i]))

    ranked = sorted(top, key=lambda i: (-key(i), top.index(i)))
    return Judged(readings, ranked + list(order[read:]), max(r.p for r in readings.values()))


def about(encoder: Encoder, q: Question, msgs: Sequence[StoredMessage], weights: dict[str, float],
          sims: dict[int, float], floor: float | None = None) -> dict[int, float]:
    """Message id -> P(it speaks to the question) for the messages of a discussion the reader reads that reach
    ``floor`` (the model's own `Encoder.about_p` by default). Read are those that share a topic word with the
    question or are loosely close in meaning, at most `ABOUT_READ` (the closest first): an each-member reply
    reads a discussion, not a log."""
    from ..query.candidates import coverage

    def closeness(m: StoredMessage) -> float:
        return max(coverage(q.stems, weights, set(content_stems(m.text))), sims.get(m.id, 0.0))

    pool = sorted((m for m in msgs if closeness(m) > 0 or sims.get(m.id, 0.0) >= ABOUT_COSINE),
                  key=lambda m: -closeness(m))[:ABOUT_READ]
    previous: dict[int, StoredMessage] = {}
    last: dict[tuple[int, int], StoredMessage] = {}
    for m in msgs:  # the turn before each message within its session, as its context
        where = (m.scope_id, m.session)
        if where in last:
            previous[m.id] = last[where]
        last[where] = m
    by_msg = {(m.scope_id, m.msg_id): m for m in msgs}
    pairs = []
    for m in pool:
        ctx = by_msg.get((m.scope_id, m.reply_to or "")) or previous.get(m.id)
        pairs.append((candidate_text(ctx.author_name, ctx.text) if ctx is not None else "",
                      candidate_text(m.author_name, m.text)))
    readings = encoder.read(q.reader_text or q.text, pairs, age_tags([m.ts for m in pool]))
    least = encoder.about_p if floor is None else floor
    return {m.id: r.p for m, r in zip(pool, readings) if r.p >= least}
