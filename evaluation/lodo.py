"""Leave-one-dataset-out tuning of hybrid search's constants, scored offline in numpy.

Each dataset's cached features (evaluation/features.py) become padded [questions, messages]
arrays; one constant setting is then scored by the very fusion code the searcher runs
(memory/fusion.py). Constants are chosen by coordinate search on two datasets (mean of their
recall@10) and reported on the third, for each of the three, beside those chosen on all three.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memory.fusion import FusionParams, fuse, replies_of, spread_authors, with_context
from memory.search import OLD_RRF
from memory.signals import pinned_periods

from .features import AUTHOR_COLUMNS, DatasetFeatures
from .report import markdown_table

K = 10
KS = (5, 10)
# Values tried for each constant (coordinate search: one constant at a time, the rest held).
GRID: dict[str, tuple] = {
    "method": ("rrf", "score"),
    "pool": (40, 80, 160, 240),
    "lexical": (0.2, 0.3, 0.4, 0.5, 0.556, 0.6, 0.7),
    "adapt": (0.0, 0.25, 0.5, 1.0, 2.0),
    "rrf_k": (1.0, 3.0, 10.0, 30.0, 60.0),
    "author_column": AUTHOR_COLUMNS,
    "author": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8),
    "context": (0.0, 0.15, 0.3, 0.5, 0.8),
    "short_chars": (20, 40, 80, 160),
    "dates": (0.0, 0.1, 0.2, 0.4, 0.8),
    "each": (False, True),
    "rewrite": (False, True),
    "parent_words": (0.0, 0.05, 0.1, 0.2, 0.3),
    "parent_meaning": (0.0, 0.1, 0.2, 0.3, 0.5, 0.8),
    "reply_words": (0.0, 0.1, 0.2, 0.3, 0.5),
    "reply_meaning": (0.0, 0.05, 0.1, 0.2),
    "length": (0.0, 0.1, 0.2, 0.4, 0.8, 1.2, 1.6),
}
# Each chat signal on its own: the setting that turns it off.
SIGNALS_OFF: dict[str, dict] = {
    "author boost": {"author": 0.0}, "author-name column": {"author_column": 0.0},
    "reply/previous-turn context": {"context": 0.0}, "pinned dates": {"dates": 0.0},
    "each-member spread": {"each": False}, "dense query rewrite": {"rewrite": False},
    "parent's match": {"parent_words": 0.0, "parent_meaning": 0.0},
    "first reply's match": {"reply_words": 0.0, "reply_meaning": 0.0}, "length prior": {"length": 0.0},
    "adaptive weight": {"adapt": 0.0}, "the larger pool (40 each)": {"pool": 40},
}


# The setting tried for a signal the tuned constants leave off, so every signal has its own row.
SIGNALS_ON: dict[str, dict] = {
    "author boost": {"author": 0.2}, "author-name column": {"author_column": 1.0},
    "reply/previous-turn context": {"context": 0.3}, "pinned dates": {"dates": 0.4},
    "each-member spread": {"each": True}, "dense query rewrite": {"rewrite": True},
    "parent's match": {"parent_words": 0.2, "parent_meaning": 0.2},
    "first reply's match": {"reply_words": 0.2, "reply_meaning": 0.1}, "length prior": {"length": 0.4},
    "adaptive weight": {"adapt": 0.5}, "the larger pool (40 each)": {"pool": 160},
}


@dataclass
class Batch:
    """One dataset as padded arrays (pads: -inf similarity, never in a pool, never gold)."""

    name: str
    cos: np.ndarray
    cos_rewrite: np.ndarray
    prev: np.ndarray
    reply: np.ndarray
    chars: np.ndarray
    valid: np.ndarray
    bm_score: dict[float, np.ndarray]
    bm_rank: dict[float, np.ndarray]
    author_hit: np.ndarray
    date_hit: np.ndarray
    author_code: np.ndarray
    gold: np.ndarray
    n_gold: np.ndarray
    each: np.ndarray
    roster: np.ndarray
    categories: list[str]


def batch(feats: DatasetFeatures) -> Batch:
    convs = [c for c in feats.conversations if c.questions]
    q = sum(len(c.questions) for c in convs)
    n = max(len(c.ids) for c in convs)
    cos = np.full((q, n), -np.inf, dtype=np.float32)
    cos_rw = cos.copy()
    prev = np.full((q, n), -1, dtype=np.int32)
    reply = np.full((q, n), -1, dtype=np.int32)
    chars = np.zeros((q, n), dtype=np.int32)
    valid = np.zeros((q, n), dtype=bool)
    bm_score = {w: np.zeros((q, n), dtype=np.float32) for w in AUTHOR_COLUMNS}
    bm_rank = {w: np.full((q, n), 10**9, dtype=np.int32) for w in AUTHOR_COLUMNS}
    author_hit = np.zeros((q, n), dtype=bool)
    date_hit = np.zeros((q, n), dtype=bool)
    author_code = np.full((q, n), -1, dtype=np.int32)
    gold = np.zeros((q, n), dtype=bool)
    n_gold = np.zeros(q)
    each = np.zeros(q, dtype=bool)
    roster = np.zeros(q, dtype=np.int32)
    cats: list[str] = []
    i = 0
    for c in convs:
        if c.cos is None or c.cos_rewrite is None:  # no question with evidence: nothing to add
            continue
        m = len(c.ids)
        codes = {a: j for j, a in enumerate(sorted(set(c.authors)))}
        code_row = np.array([codes[a] for a in c.authors], dtype=np.int32)
        reply_row = replies_of(c.prev)
        for j in range(len(c.questions)):
            cos[i, :m], cos_rw[i, :m] = c.cos[j], c.cos_rewrite[j]
            prev[i, :m], chars[i, :m], valid[i, :m], author_code[i, :m] = c.prev, c.chars, True, code_row
            reply[i, :m] = reply_row
            for w in AUTHOR_COLUMNS:
                for rank, (row, score) in enumerate(c.bm25[w][j]):
                    bm_score[w][i, row], bm_rank[w][i, row] = score, rank
            author_hit[i, :m] = np.isin(c.authors, c.named[j])
            asked_at = getattr(c, "asked_at", 0.0) or float(c.ts.max()) + 3600
            for a, b in pinned_periods(c.questions[j], asked_at):
                date_hit[i, :m] |= (c.ts >= a) & (c.ts < b)
            gold[i, c.gold[j]] = True
            n_gold[i] = c.n_gold[j]
            each[i], roster[i] = c.each[j], c.roster_size
            cats.append(c.categories[j])
            i += 1
    return Batch(feats.dataset, cos, cos_rw, prev, reply, chars, valid, bm_score, bm_rank, author_hit, date_hit,
                 author_code, gold, n_gold, each, roster, cats)


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Row-wise indices of the k best, best first, ties to the lower index (the searcher's id order)."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(scores, part, axis=1)
    return np.take_along_axis(part, np.lexsort((part, -vals), axis=1), axis=1)


def _recalls(b: Batch, order: np.ndarray, scores: np.ndarray | None = None) -> dict[int, np.ndarray]:
    hits = np.take_along_axis(b.gold, order, axis=1)
    if scores is not None:  # fewer than k candidates: the rest was never retrieved
        hits &= np.isfinite(np.take_along_axis(scores, order, axis=1))
    return {k: hits[:, :k].sum(axis=1) / b.n_gold for k in KS}


def score_hybrid(b: Batch, p: FusionParams) -> dict[int, np.ndarray]:
    """Per-question recall@k of hybrid search with constants ``p`` (what Searcher.search would return)."""
    cos = b.cos_rewrite if p.rewrite else b.cos
    sem = with_context(cos, b.prev, b.chars, p.context, p.short_chars)
    sem = np.where(b.valid, sem, -np.inf)
    pool = min(p.pool, sem.shape[1])
    kth = -np.partition(-sem, pool - 1, axis=1)[:, pool - 1:pool]
    sem_in = b.valid & (sem >= kth)
    lex_in = b.bm_rank[p.author_column] < p.pool
    boost = p.author * b.author_hit + p.dates * b.date_hit
    fused = fuse(b.bm_score[p.author_column], lex_in, sem, sem_in, p, boost, parent=b.prev, reply=b.reply,
                 chars=b.chars)
    order = _top(fused, K)
    if p.each:
        for i in np.flatnonzero(b.each & (b.roster <= K)):
            full = [int(x) for x in np.argsort(-fused[i], kind="stable") if np.isfinite(fused[i, x])]
            wanted = sorted({int(c) for c in b.author_code[i] if c >= 0})
            spread = spread_authors(full, [int(b.author_code[i, x]) for x in full], wanted, K)[:K]
            order[i, :len(spread)] = spread
    return _recalls(b, order, fused)


def score_half(b: Batch, half: str) -> dict[int, np.ndarray]:
    """The halves alone, as `search --mode bm25|dense` ranks them (BM25 name column weight 0.3)."""
    if half == "bm25":
        rank = b.bm_rank[0.3].astype(np.float64)
        scores = np.where(rank < 10**9, -rank, -np.inf)
    else:
        scores = np.where(b.valid, b.cos, -np.inf)
    return _recalls(b, _top(scores, K), scores)


def mean_recall(batches: list[Batch], p: FusionParams, k: int = K) -> float:
    """Macro mean over datasets (each dataset counts once, whatever its size)."""
    return float(np.mean([100 * score_hybrid(b, p)[k].mean() for b in batches]))


def objective(batches: list[Batch], p: FusionParams, how: str = "mean") -> float:
    """What tuning maximises: the datasets' mean recall@10, or (``min``) the worst dataset's."""
    vals = [100 * score_hybrid(b, p)[K].mean() for b in batches]
    return float(min(vals) + 1e-3 * np.mean(vals)) if how == "min" else float(np.mean(vals))


def tune(batches: list[Batch], start: FusionParams = OLD_RRF, sweeps: int = 4, how: str = "mean") -> FusionParams:
    """Coordinate search over GRID maximising ``objective`` on ``batches``."""
    best, best_val = start, objective(batches, start, how)
    for _ in range(sweeps):
        improved = False
        for name, values in GRID.items():
            for v in values:
                cand = best.with_(**{name: v})
                if cand == best:
                    continue
                val = objective(batches, cand, how)
                if val > best_val + 1e-9:
                    best, best_val, improved = cand, val, True
        if not improved:
            break
    return best


@dataclass
class LodoResult:
    names: list[str]
    halves: dict[str, dict[str, dict[int, float]]]  # dataset -> half -> k -> recall
    before: dict[str, dict[int, float]]
    held_out: dict[str, dict[int, float]]
    held_out_mean: dict[str, dict[int, float]]  # the same, tuned for the mean instead of the worst dataset
    all_tuned: dict[str, dict[int, float]]
    chosen: dict[str, FusionParams]  # "all" and "without <dataset>"
    ablations: dict[str, dict[str, float]]  # row -> dataset -> recall@10 (all-tuned constants)

    def to_markdown(self) -> str:
        rows = []
        for d in self.names:
            h = self.halves[d]
            best_half = max(h["bm25"][10], h["dense"][10])
            rows.append([d, h["bm25"][10], h["dense"][10], self.before[d][10], self.held_out[d][10],
                         self.held_out[d][5], f"{self.held_out[d][10] - best_half:+.1f}", self.held_out_mean[d][10],
                         self.all_tuned[d][10], self.all_tuned[d][5]])
        out = ["### Leave-one-dataset-out: recall@10 (and @5) of hybrid search\n",
               markdown_table(["held-out dataset", "BM25 @10", "dense @10", "old RRF @10", "LODO hybrid @10",
                               "LODO hybrid @5", "LODO vs better half", "LODO, mean-tuned @10", "all-tuned @10",
                               "all-tuned @5"], rows),
               "\n### Constants chosen\n",
               markdown_table(["tuned on", *GRID], [[k, *[getattr(p, g) for g in GRID]]
                                                    for k, p in self.chosen.items()]),
               "\n### Each signal on its own: recall@10 with the all-tuned constants, one signal switched off\n",
               markdown_table(["row", *self.names, "mean"],
                              [[r, *[v[d] for d in self.names], float(np.mean([v[d] for d in self.names]))]
                               for r, v in self.ablations.items()])]
        return "\n".join(out)

    def to_json(self) -> dict:
        return {"datasets": self.names, "halves": self.halves, "old_rrf": self.before, "lodo": self.held_out,
                "lodo_mean_tuned": self.held_out_mean,
                "all_tuned": self.all_tuned, "chosen": {k: p.to_dict() for k, p in self.chosen.items()},
                "ablations_recall@10": self.ablations}


def _at(scores: dict[int, np.ndarray]) -> dict[int, float]:
    return {k: round(100 * float(v.mean()), 2) for k, v in scores.items()}


def leave_one_out(batches: list[Batch], start: FusionParams = OLD_RRF, how: str = "min") -> LodoResult:
    """Tune on all but one dataset, score the one left out (for each); also tune on all.

    ``how="min"`` tunes for the worst training dataset (robust first); the mean-tuned held-out
    scores are reported beside it.
    """
    names = [b.name for b in batches]
    chosen = {"all": tune(batches, start, how=how)}
    held: dict[str, dict[int, float]] = {}
    held_mean: dict[str, dict[int, float]] = {}
    for b in batches:
        rest = [o for o in batches if o is not b]
        p = tune(rest, start, how=how)
        chosen[f"all but {b.name}"] = p
        held[b.name] = _at(score_hybrid(b, p))
        other = "mean" if how == "min" else "min"
        held_mean[b.name] = _at(score_hybrid(b, tune(rest, start, how=other)))
    best = chosen["all"]
    ablations: dict[str, dict[str, float]] = {"all signals (shipped)": {b.name: _at(score_hybrid(b, best))[10]
                                                                      for b in batches}}
    for row, off in SIGNALS_OFF.items():
        p = best.with_(**off)
        label = f"without {row}"
        if p == best:  # tuned off: show what turning it on costs or gains
            settings = ", ".join(f"{k}={v}" for k, v in SIGNALS_ON[row].items())
            p, label = best.with_(**SIGNALS_ON[row]), f"with {row} ({settings})"
        ablations[label] = {b.name: _at(score_hybrid(b, p))[10] for b in batches}
    plain = best.with_(**{k: v for off in SIGNALS_OFF.values() for k, v in off.items() if k != "pool"})
    ablations["fusion alone (no chat signals, no adaptation)"] = {b.name: _at(score_hybrid(b, plain))[10]
                                                                  for b in batches}
    return LodoResult(names, {b.name: {h: _at(score_half(b, h)) for h in ("bm25", "dense")} for b in batches},
                      {b.name: _at(score_hybrid(b, OLD_RRF)) for b in batches}, held, held_mean,
                      {b.name: _at(score_hybrid(b, best)) for b in batches}, chosen, ablations)


def run_lodo(args, embedder_factory) -> int:
    """``chorus eval retrieval --lodo``: features once per dataset (cached), then the table."""
    from pathlib import Path

    from .features import cached
    from .report import write_json

    batches = [batch(cached(name, args.cache, data=None, embedder_factory=embedder_factory, limit=args.limit))
               for name in ("locomo", "socialmem", "friendsqa")]
    result = leave_one_out(batches)
    md = result.to_markdown()
    out = Path(args.out)
    write_json(out / "retrieval-lodo.json", result.to_json())
    (out / "retrieval-lodo.md").write_text(md + "\n", "utf-8")
    print(md)
    print(f"\nwritten to {out}/retrieval-lodo.json and .md")
    return 0
