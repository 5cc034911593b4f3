"""Train the analysis pass's act and link models (``chorus train acts``) on the labelled training chats.

Data: the 21 labelled long chats of evaluation/data/train (every turn has an act kind and its links).
Each chat is read turn by turn through memory/analysis/features.py's Context, exactly as at ingest,
with the gold acts and links of the earlier turns as its history, and again with the acts and links
that models fitted without it predicted (what ingest will give the models, mistakes included). Owners
and topics in the gold history come from the run-time functions, so that what the link model learns
about them is what it will see.

Models:
- acts: a multinomial logistic regression (scikit-learn to fit, numpy to run) over the message's dense
  features (standardised) and its word features (binary; the vocabulary is the tokens found in at least
  ``MIN_CHATS`` training chats, so no chat's own names or jargon count), averaged with LightGBM trees
  over the same inputs (family "ensemble"). Classes are weighted against their frequency (``weights``)
  and the state-act threshold is chosen by leave-chats-out validation inside the training chats. The
  MiniLM vector itself can be read too (``vector``); held out it did not help (docs/analysis.md).
- links: one logistic regression per link kind over pair features (memory/analysis/links.py).

Validation is leave-chats-out: ``FOLDS`` folds by chat; each held-out chat is read by models fitted
without it (the threshold chosen without it too), streamed through the public protocols like ingest
(evaluation/acts_eval.py). The shipped models are then fitted on every chat with the same procedure.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memory.analysis.acts import EMBEDDER_FAMILY, LinearActModel
from memory.analysis.features import (
    ACT_FEATURES,
    ANSWER_WINDOW,
    PAIR_FEATURES,
    Context,
    act_features,
    candidates,
    pair_features,
    tokens,
)
from memory.analysis.links import PairLinkModel
from memory.analysis.owner import owner_of
from memory.analysis.topic import topic_of
from memory.analysis.types import ACT_KINDS, LINK_KINDS, STATE_ACTS, Act, Link

from .acts_data import Chat
from .acts_eval import Prediction, analyse, figures, pool, score

FOLDS = 7
MIN_CHATS = 3   # a word feature must occur in this many training chats
ACT_C = 0.3
LINK_C = 1.0
THRESHOLDS = tuple(round(x, 2) for x in np.arange(0.2, 0.81, 0.05))
INNER_FOLDS = 3
# The trees of the "ensemble" family: small and shallow (6,000 messages), one thread.
TREE_PARAMS = {"objective": "multiclass", "num_threads": 1, "verbose": -1, "learning_rate": 0.1,
               "num_leaves": 7, "min_data_in_leaf": 20, "feature_fraction": 0.3, "lambda_l2": 1.0, "seed": 1}
TREE_ROUNDS = 150
TREES_WEIGHT = 0.5  # the trees' share of the averaged probabilities


@dataclass
class Options:
    """What a fit reads and how: the choices validated in docs/analysis.md."""

    family: str = "ensemble"      # "linear": the logistic regression; "ensemble": averaged with boosted trees
    c: float = ACT_C
    weights: str = "sqrt"         # class weights: "none", "sqrt" (inverse square root of frequency), "balanced"
    vector: bool = False          # the MiniLM vector itself (its closeness to other turns is always read)
    vector_weight: float = 0.0    # > 0: the vector scaled by this (not standardised, so its 384 weights shrink)
    words: bool = True            # the word features
    dense: bool = True            # the dense features
    min_chats: int = MIN_CHATS
    bigrams: bool = True          # word pairs as well as words
    threshold: float | None = None  # None: chosen by inner leave-chats-out validation
    link_c: float = LINK_C
    history: str = "both"         # what the act model learns from: "gold" history, "predicted", or "both" readings
    link_history: str = "predicted"  # the same for the link model
    change_share: float = 0.25    # a state act links as a change when P(change) / P(state) reaches this


@dataclass
class Stream:
    """One chat read with its gold history: the act model's inputs and the link model's candidate pairs."""

    chat: Chat
    dense: np.ndarray
    words: list[list[str]]
    vectors: np.ndarray
    y: np.ndarray
    pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)


def gold_link(chat: Chat, i: int) -> Link | None:
    g = chat.gold[i]
    for kind in LINK_KINDS:
        if kind in g.links:
            return Link(kind, chat.turns[g.links[kind]].message.id, 1.0)
    return None


def read(chat: Chat, history: Prediction | None = None) -> Stream:
    """Read ``chat`` turn by turn, with the gold acts and links of earlier turns as history, or with what the
    models said of them (``history``: the predictions of models fitted without this chat), so that a model
    learns from the history it will see at ingest, mistakes included. Labels are always gold."""
    ctx = Context(chat.people)
    dense, words, ys = [], [], []
    pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in LINK_KINDS}
    for i, turn in enumerate(chat.turns):
        g = chat.gold[i]
        dense.append(act_features(turn, ctx))
        words.append(tokens(turn, chat.people))
        ys.append(ACT_KINDS.index(g.kind))
        if history is not None:
            act, link = history.analyses[i]
        else:
            k = ACT_KINDS.index(g.kind)
            act = Act(g.kind, 1.0, tuple(float(j == k) for j in range(len(ACT_KINDS))),
                      owner_of(g.kind, turn, ctx), "" if g.kind == "chatter" else topic_of(turn, ctx))
            link = gold_link(chat, i)
        cands = candidates(ctx)
        if cands:
            x = pair_features(turn, act, cands, ctx)
            ids = np.asarray([s.turn.message.id for s in cands])
            other = np.asarray([s.turn.message.author_id != turn.message.author_id for s in cands])
            recent = np.arange(len(cands)) < min(ANSWER_WINDOW, len(ctx.recent))
            state = np.asarray([s.act is not None and s.act.is_state for s in cands])
            pools = {"changes": state if g.kind == "change" else np.zeros(len(cands), bool),
                     "answers": recent & other, "confirms": other}
            for kind, mask in pools.items():
                if not mask.any():
                    continue
                target = chat.turns[g.links[kind]].message.id if kind in g.links else -1
                pairs[kind].append((x[mask], (ids[mask] == target).astype(np.int8)))
        ctx.push(turn, act, link)
    vecs = np.stack([t.vector if t.vector is not None else np.zeros(384, np.float32) for t in chat.turns])
    return Stream(chat, np.stack(dense), words, vecs, np.asarray(ys), pairs)


# ---- the act model ---------------------------------------------------------------------------------------

def _vocabulary(streams: Sequence[Stream], min_chats: int, bigrams: bool = True) -> list[str]:
    chats: dict[str, int] = {}
    for s in streams:
        for t in {t for ws in s.words for t in ws if bigrams or " " not in t}:
            chats[t] = chats.get(t, 0) + 1
    return sorted(t for t, n in chats.items() if n >= min_chats)


def _design(streams: Sequence[Stream], vocab: dict[str, int], opt: Options):
    from scipy import sparse

    dense = np.vstack([s.dense for s in streams]) if opt.dense else np.zeros((sum(len(s.y) for s in streams), 0))
    vecs = np.vstack([s.vectors for s in streams]) if opt.vector else np.zeros((len(dense), 0))
    rows, cols = [], []
    r = 0
    for s in streams:
        for ws in s.words:
            if opt.words:
                for t in ws:
                    j = vocab.get(t)
                    if j is not None:
                        rows.append(r)
                        cols.append(j)
            r += 1
    words = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(r, len(vocab)))
    return np.hstack([dense, vecs]).astype(np.float32), words


def _class_weights(y: np.ndarray, how: str) -> dict[int, float] | None:
    if how == "none":
        return None
    counts = np.bincount(y, minlength=len(ACT_KINDS)).astype(float)
    power = 0.5 if how == "sqrt" else 1.0
    w = {k: (len(y) / (len(ACT_KINDS) * counts[k])) ** power for k in range(len(ACT_KINDS)) if counts[k]}
    return w


def fit_acts(streams: Sequence[Stream], opt: Options, threshold: float, version: str = "acts-v2") -> dict:
    """Fit the act model on ``streams`` and export it (the dict memory/analysis/acts.py reads)."""
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression

    vocab_list = _vocabulary(streams, opt.min_chats, opt.bigrams) if opt.words else []
    vocab = {t: i for i, t in enumerate(vocab_list)}
    xd, xw = _design(streams, vocab, opt)
    y = np.concatenate([s.y for s in streams])
    mean, scale = xd.mean(axis=0), np.maximum(xd.std(axis=0), 1e-3)
    n_dense = len(ACT_FEATURES) if opt.dense else 0
    if opt.vector and opt.vector_weight > 0:
        mean[n_dense:], scale[n_dense:] = 0.0, 1.0 / opt.vector_weight
    x = sparse.hstack([sparse.csr_matrix((xd - mean) / scale), xw]).tocsr()
    lr = LogisticRegression(C=opt.c, max_iter=3000, class_weight=_class_weights(y, opt.weights))
    lr.fit(x, y)
    coef = np.zeros((len(ACT_KINDS), x.shape[1]), np.float32)
    bias = np.full(len(ACT_KINDS), -30.0, np.float32)
    for j, cls in enumerate(lr.classes_):
        coef[cls], bias[cls] = lr.coef_[j], lr.intercept_[j]
    w_d = coef[:, :xd.shape[1]] / scale  # fold the standardisation of the vector into its weights
    b = bias - w_d[:, n_dense:] @ mean[n_dense:]
    w_dense = np.zeros((len(ACT_KINDS), len(ACT_FEATURES)), np.float32)
    if opt.dense:
        w_dense = coef[:, :n_dense]
    r5 = lambda a: np.round(np.asarray(a, dtype=float), 5).tolist()  # noqa: E731
    trees = _fit_trees(streams, vocab, y, opt) if opt.family == "ensemble" else None
    return {"version": version, "kinds": list(ACT_KINDS), "dense": list(ACT_FEATURES),
            "embedder": EMBEDDER_FAMILY, "threshold": threshold, "options": vars(opt).copy(),
            "trees": trees, "trees_weight": TREES_WEIGHT if trees else 0.0,
            "mean": r5(mean[:n_dense] if opt.dense else np.zeros(len(ACT_FEATURES))),
            "scale": r5(scale[:n_dense] if opt.dense else np.ones(len(ACT_FEATURES))),
            "w_dense": r5(w_dense), "w_vector": r5(w_d[:, n_dense:]), "bias": r5(b), "vocab": vocab_list,
            "w_tokens": r5(coef[:, xd.shape[1]:].T)}


def _fit_trees(streams: Sequence[Stream], vocab: dict[str, int], y: np.ndarray, opt: Options) -> str:
    """Gradient-boosted trees over the raw dense features and the word features (LightGBM's text model):
    they read combinations a linear model cannot (a short message, a change word, a close earlier act)."""
    import lightgbm as lgb
    from scipy import sparse

    dense_only = Options(**{**vars(opt), "vector": False, "words": True, "dense": True})
    xd, xw = _design(streams, vocab, dense_only)
    x = sparse.hstack([sparse.csr_matrix(xd), xw]).tocsr().astype(np.float32)
    weights = _class_weights(y, opt.weights)
    data = lgb.Dataset(x, y, weight=np.asarray([weights[v] for v in y]) if weights else None)
    booster = lgb.train({**TREE_PARAMS, "num_class": len(ACT_KINDS)}, data, TREE_ROUNDS)
    return str(booster.model_to_string())


# ---- the link model --------------------------------------------------------------------------------------

def _best_f1(p: np.ndarray, right: np.ndarray, gold: int) -> tuple[float, float]:
    """(threshold, F1) best for links whose best candidate has probability ``p`` and is ``right``."""
    best = (0.5, 0.0)
    for t in np.arange(0.05, 0.96, 0.05):
        taken = p >= t
        tp = int((taken & right).sum())
        prec = tp / taken.sum() if taken.sum() else 0.0
        rec = tp / gold if gold else 0.0
        f = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        if f > best[1]:
            best = (float(round(t, 2)), f)
    return best


def fit_pairs(x: np.ndarray, y: np.ndarray, c: float):
    """A logistic regression over standardised pair features: (the fitted model, the features' mean, scale)."""
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-3)
    return LogisticRegression(C=c, max_iter=3000).fit((x - mean) / scale, y), mean, scale


def fit_links(streams: Sequence[Stream], opt: Options, version: str = "links-v2") -> dict:
    """Fit one pair model per link kind on ``streams`` and export them (memory/analysis/links.py reads it)."""
    out: dict = {"version": version, "features": list(PAIR_FEATURES), "options": {"c": opt.link_c},
                 "change_share": opt.change_share}
    for kind in LINK_KINDS:
        # A change whose target the history lacks teaches the ranker nothing about which candidate it was.
        groups = [g for s in streams for g in s.pairs[kind] if kind != "changes" or g[1].any()]
        x = np.vstack([g[0] for g in groups])
        y = np.concatenate([g[1] for g in groups])
        lr, mean, scale = fit_pairs(x, y, opt.link_c)
        d = {"weights": np.round(lr.coef_[0], 5).tolist(), "bias": round(float(lr.intercept_[0]), 5),
             "mean": np.round(mean, 5).tolist(), "scale": np.round(scale, 5).tolist()}
        if kind != "changes":
            best_p, right = [], []
            for gx, gy in groups:
                p = lr.predict_proba((gx - mean) / scale)[:, 1]
                j = int(np.argmax(p))
                best_p.append(p[j])
                right.append(bool(gy[j]))
            d["threshold"], d["train_f1"] = _best_f1(np.asarray(best_p), np.asarray(right),
                                                     int(sum(int(gy.any()) for _, gy in groups)))
        out[kind] = d
    return out


# ---- validation ------------------------------------------------------------------------------------------

def folds(chats: Sequence[Chat], k: int) -> list[list[int]]:
    """Chat indexes of each fold (chats in name order, dealt round robin)."""
    order = sorted(range(len(chats)), key=lambda i: chats[i].id)
    return [[order[j] for j in range(f, len(order), k)] for f in range(k)]


def curve(probs: np.ndarray, gold: np.ndarray) -> list[dict]:
    """Detection precision, recall and F1 at each threshold of ``THRESHOLDS`` on held-out probabilities."""
    out = []
    for t in THRESHOLDS:
        tp = float((gold & (probs >= t)).sum())
        prec, rec = tp / max(1, (probs >= t).sum()), tp / max(1, gold.sum())
        out.append({"threshold": t, "precision": round(prec, 4), "recall": round(rec, 4),
                    "f1": round(2 * prec * rec / (prec + rec), 4) if prec + rec else 0.0})
    return out


def inner_predictions(streams: Sequence[Stream], opt: Options) -> list[Prediction]:
    """Each chat of ``streams`` read like ingest by models fitted (on gold history) without it."""
    chats = [s.chat for s in streams]
    out: list[Prediction | None] = [None] * len(streams)
    for fold in folds(chats, min(INNER_FOLDS, len(streams))):
        rest = [s for i, s in enumerate(streams) if i not in fold]
        act = LinearActModel(fit_acts(rest, opt, opt.threshold or 0.5))
        link = PairLinkModel(fit_links(rest, opt))
        for i in fold:
            out[i] = analyse(chats[i], act, link)
    return [p for p in out if p is not None]


def fit(streams: Sequence[Stream], opt: Options) -> tuple[dict, dict]:
    """The act and link models for ``streams``. The threshold is the best on the chats' inner leave-chats-out
    probabilities; with ``opt.history == "predicted"`` the models are then refitted on the chats read with
    those predictions as history (what ingest will give them), besides the gold-history reading."""
    needs_inner = opt.threshold is None or opt.history != "gold" or opt.link_history != "gold"
    preds = inner_predictions(streams, opt) if needs_inner else []
    t = opt.threshold
    if t is None:
        probs = np.concatenate([p.state_probs for p in preds])
        gold = np.concatenate([[g.kind in STATE_ACTS for g in s.chat.gold] for s in streams])
        t = float(max(curve(probs, gold), key=lambda r: r["f1"])["threshold"])
    predicted = [read(s.chat, p) for s, p in zip(streams, preds)] if preds else []
    readings = {"gold": list(streams), "predicted": predicted, "both": [*streams, *predicted]}
    return fit_acts(readings[opt.history], opt, t), fit_links(readings[opt.link_history], opt)


def validate(chats: Sequence[Chat], streams: Sequence[Stream], opt: Options,
             progress: Callable[[str, dict], None] | None = None) -> dict:
    """Leave-chats-out figures: each chat read by models fitted (and thresholded) without it."""
    per: dict[str, dict] = {}
    preds: dict[str, Prediction] = {}
    thresholds = []
    for fold in folds(chats, FOLDS):
        rest = [s for i, s in enumerate(streams) if i not in fold]
        am, lm = fit(rest, opt)
        thresholds.append(am["threshold"])
        act, link = LinearActModel(am), PairLinkModel(lm)
        for i in fold:
            p = analyse(chats[i], act, link)
            preds[chats[i].id] = p
            c = score(chats[i].gold, p)
            per[chats[i].id] = {**c, **figures(c), "threshold": am["threshold"]}
            if progress:
                progress(chats[i].id, per[chats[i].id])
    total = pool([{k: v for k, v in c.items() if isinstance(v, int)} for c in per.values()])
    probs = np.concatenate([preds[c.id].state_probs for c in chats])
    gold = np.concatenate([[g.kind in STATE_ACTS for g in c.gold] for c in chats])
    return {"options": vars(opt).copy(), "folds": FOLDS, "thresholds": thresholds, "curve": curve(probs, gold),
            "overall": {**total, **figures(total)}, "per_chat": per,
            "messages_per_second": round(sum(len(c.turns) for c in chats) / sum(p.seconds for p in preds.values()), 1)}


def train(chats: Sequence[Chat], opt: Options | None = None,
          progress: Callable[[str, dict], None] | None = None) -> tuple[dict, dict, dict]:
    """(act model, link model, leave-chats-out report) for ``chats``."""
    opt = opt or Options()
    streams = [read(c) for c in chats]
    report = validate(chats, streams, opt, progress)
    act_model, link_model = fit(streams, opt)
    trained_on = [c.id for c in chats]
    summary = {k: v for k, v in report["overall"].items() if not isinstance(v, int)}
    for m in (act_model, link_model):
        m["trained_on"] = trained_on
        m["validation"] = {"leave_chats_out": summary, "folds": FOLDS}
    return act_model, link_model, report


def report_markdown(report: dict) -> str:
    from .acts_eval import pct
    from .report import markdown_table

    cols = ("precision", "recall", "kind_accuracy", "changes_accuracy", "owner_accuracy", "question_recall",
            "answers_recall", "confirms_recall")
    rows = [[cid, f.get("gold_acts", 0), f.get("detected", 0), *[pct(f[k]) for k in cols], f["threshold"]]
            for cid, f in sorted(report["per_chat"].items())]
    o = report["overall"]
    rows.append(["**all**", o.get("gold_acts", 0), o.get("detected", 0), *[pct(o[k]) for k in cols], ""])
    return markdown_table(["held-out chat", "gold acts", "detected", "act P", "act R", "kind right",
                           "changes right", "owner right", "question R", "answers R", "confirms R", "threshold"],
                          rows) + f"\n\nread at {report['messages_per_second']} messages/s; options {report['options']}"


__all__ = ["Options", "train", "validate", "read", "fit", "fit_acts", "fit_links", "report_markdown"]
