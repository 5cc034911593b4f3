"""Fusing the lexical (BM25) and meaning (vector) halves of hybrid search, per query.

One function serves both the live searcher (one query, arrays over its candidates) and the
offline tuner (a batch of queries, arrays over every message of a conversation), so the
constants chosen offline score exactly what the searcher then does.

Score fusion: each half is normalised to [0, 1] inside its own recall pool (BM25 by its top
score; cosine between the pool's last and first similarity) and mixed with a weight that
follows the evidence each half has for *this* query: a half whose list is peaked (its head
stands clear of its 10th result) gets more say than one whose list is flat. Reciprocal-rank
fusion is kept as the other method, under the same per-query weight.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

import numpy as np

A = TypeVar("A", bound=Hashable)  # an author: an id string, or an integer code in the LODO batches
PEAK_RANK = 10  # peakedness compares a list's head with its result at this rank


@dataclass(frozen=True)
class FusionParams:
    """Every constant of hybrid search, chosen by leave-one-dataset-out (docs/retrieval.md)."""

    method: str = "score"  # "score" (normalised scores) or "rrf" (reciprocal ranks)
    pool: int = 40  # candidates each half contributes
    lexical: float = 0.5  # base weight of the BM25 half
    adapt: float = 0.0  # how far the weight follows the two halves' peakedness (0 = fixed)
    rrf_k: float = 10.0  # rank offset (rrf only)
    author: float = 0.0  # boost for messages by a person the question names
    author_column: float = 0.3  # BM25 weight of the author-name column
    context: float = 0.0  # share of the previous turn's similarity added to a short message's
    short_chars: int = 40  # a message this short or shorter borrows its previous turn's meaning
    dates: float = 0.0  # boost for messages inside a period the question pins
    each: bool = False  # "each member" questions: every named/rostered author's best message in the top k
    rewrite: bool = False  # embed the question without its question words
    # Neighbours: a message is lifted by how well its parent (reply-to, else previous turn) and its
    # first reply match, by words and by meaning (answers follow questions in chat).
    parent_words: float = 0.0
    parent_meaning: float = 0.0
    reply_words: float = 0.0
    reply_meaning: float = 0.0
    length: float = 0.0  # weight of log(1 + characters) / 5: substantive messages over "lol"

    def with_(self, **changes: Any) -> FusionParams:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def with_context(cos: np.ndarray, prev: np.ndarray, chars: np.ndarray, weight: float,
                 short_chars: int) -> np.ndarray:
    """Similarity of each message, a short one ("yes", "same here") lifted by its previous turn's.

    ``prev`` holds the index of each message's parent (its reply-to, else the previous turn of
    its session) or -1; works on the last axis, so a batch of queries is one call.
    """
    if weight <= 0:
        return cos
    prev = np.broadcast_to(prev, cos.shape)
    has = (prev >= 0) & (np.broadcast_to(chars, cos.shape) <= short_chars)
    parent = np.take_along_axis(cos, np.where(prev >= 0, prev, 0), axis=-1)
    return cos + np.where(has & np.isfinite(parent), weight * parent, 0.0).astype(cos.dtype)


def _peak(norm: np.ndarray, member: np.ndarray) -> np.ndarray:
    """1 - (the PEAK_RANK-th best normalised score): near 1 when the head stands alone."""
    vals = np.where(member, norm, -np.inf)
    n = vals.shape[-1]
    r = min(PEAK_RANK, n)
    if r == 0:
        return np.zeros(vals.shape[:-1])
    kth = -np.partition(-vals, r - 1, axis=-1)[..., r - 1]
    return 1.0 - np.where(np.isfinite(kth), kth, 0.0)


def _ranks(scores: np.ndarray, member: np.ndarray) -> np.ndarray:
    """1-based rank of each member by descending score (non-members get a huge rank)."""
    vals = np.where(member, scores, -np.inf)
    order = np.argsort(-vals, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, vals.shape[-1] + 1), axis=-1)
    return np.where(member, ranks, 10**9)


def lexical_weight(lex_norm: np.ndarray, lex_in: np.ndarray, sem_norm: np.ndarray, sem_in: np.ndarray,
                   p: FusionParams) -> np.ndarray:
    """This query's weight of the BM25 half: the base, moved by how much more peaked BM25 is."""
    w = np.full(lex_norm.shape[:-1], p.lexical, dtype=np.float64)
    if p.adapt:
        w = w + p.adapt * (_peak(lex_norm, lex_in) - _peak(sem_norm, sem_in))
    w = np.clip(w, 0.0, 1.0)
    w = np.where(lex_in.any(axis=-1), w, 0.0)  # no word matched: meaning alone
    return np.where(sem_in.any(axis=-1), w, 1.0)  # no vectors (embedder down): words alone


def replies_of(prev: np.ndarray) -> np.ndarray:
    """Each row's first reply (the first later row whose parent it is), or -1; 1-D."""
    nxt = np.full(len(prev), -1, dtype=np.int64)
    rows = np.flatnonzero(prev >= 0)
    for r in rows[::-1]:  # backwards, so the earliest child is written last and wins
        nxt[prev[r]] = r
    return nxt


def _gather(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    idx = np.broadcast_to(idx, values.shape)
    got = np.take_along_axis(values, np.where(idx >= 0, idx, 0), axis=-1)
    return np.where(idx >= 0, got, 0.0)


def fuse(lex: np.ndarray, lex_in: np.ndarray, sem: np.ndarray, sem_in: np.ndarray, p: FusionParams,
         boost: np.ndarray | None = None, *, parent: np.ndarray | None = None, reply: np.ndarray | None = None,
         chars: np.ndarray | None = None) -> np.ndarray:
    """Fused score per candidate (higher is better); -inf for those in neither pool.

    ``lex``: BM25 scores, higher better; ``sem``: similarities (context-lifted); the masks say
    which candidates each half's pool holds. ``boost`` is added for chat signals (author, date).
    ``parent``/``reply`` index each row's neighbours among the rows (-1: none); rows in neither
    pool may be there only as neighbours. ``chars`` are text lengths.
    """
    lex = np.asarray(lex, dtype=np.float64)
    sem = np.asarray(sem, dtype=np.float64)
    union = lex_in | sem_in
    top_b = np.max(np.where(lex_in, lex, -np.inf), axis=-1, keepdims=True)
    lex_norm = np.where(lex_in, lex / np.where(np.isfinite(top_b) & (top_b > 0), top_b, 1.0), 0.0)
    top_d = np.max(np.where(sem_in, sem, -np.inf), axis=-1, keepdims=True)
    low_d = np.min(np.where(sem_in, sem, np.inf), axis=-1, keepdims=True)
    span = np.where(np.isfinite(top_d) & (top_d > low_d), top_d - low_d, 1.0)
    sem_norm = np.where(np.isfinite(sem), np.clip((sem - np.where(np.isfinite(low_d), low_d, 0.0)) / span,
                                                  0.0, 1.0), 0.0)
    w = lexical_weight(lex_norm, lex_in, sem_norm, sem_in, p)[..., None]
    if p.method == "rrf":
        k = float(p.rrf_k)
        rb, rd = _ranks(lex, lex_in), _ranks(sem, sem_in)
        fused = (k + 1) * (w / (k + rb) + (1 - w) / (k + rd))
    elif p.method == "score":
        fused = w * lex_norm + (1 - w) * sem_norm
    else:
        raise ValueError(f"unknown fusion method {p.method!r}")
    if boost is not None:
        fused = fused + boost
    for idx, words, meaning in ((parent, p.parent_words, p.parent_meaning), (reply, p.reply_words, p.reply_meaning)):
        if idx is not None and (words or meaning):
            fused = fused + words * _gather(lex_norm, idx) + meaning * _gather(sem_norm, idx)
    if chars is not None and p.length:
        fused = fused + p.length * np.log1p(np.broadcast_to(chars, fused.shape)) / 5.0
    return np.where(union, fused, -np.inf)


def spread_authors(order: list[int], authors: Sequence[A], wanted: Sequence[A], k: int) -> list[int]:
    """Re-order so the first ``k`` hold each wanted author's best candidate ("what does each of us think").

    ``order`` is best first; each wanted author's first appearance is promoted into the top k,
    keeping the fused order otherwise. Authors with no candidate are skipped.
    """
    if not wanted or k <= 0:
        return order
    best: dict[A, int] = {}
    for pos, a in enumerate(authors):
        if a in wanted and a not in best:
            best[a] = pos
    promoted = sorted(p for p in best.values() if p >= k)
    if not promoted:
        return order
    keep = [p for p in range(len(order)) if p not in best.values()]
    chosen = set(best.values())
    head_slots = k - len(chosen)
    head = [p for p in keep[:max(head_slots, 0)]]
    top = sorted(head + sorted(chosen))
    rest = [p for p in range(len(order)) if p not in set(top)]
    return [order[p] for p in top + rest]
