"""``chorus train reranker``: fit the reply's reranker and decline, leave-one-dataset-out, and ship them.

What ships is trained only on data whose licence allows it: SocialMemBench dev (CC BY 4.0),
FriendsQA dev (Apache-2.0) and our own question set (tests/data/chats). LoCoMo (CC BY-NC)
is only ever held out. For each dataset held out in turn, the models are trained on the
licensed others and scored on it; the table this prints is that held-out measurement.

- Reranker: LightGBM lambdarank over the candidate features, one group per question that
  has a gold message among its candidates.
- Decline: a logistic regression over features of the reranked list. Its training rows use
  out-of-fold reranker scores (folds by conversation), so it learns from scores like the
  ones it will see on new chats, not from the reranker's memory of its own training data.
  Negatives are unanswerable questions and counterfactuals (evidence removed).
- Threshold: the highest probability threshold that keeps false declines (answerable
  questions declined) at or under ``FD_CAP`` on every tuning dataset.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory.query.candidates import FEATURES
from memory.query.rank_model import (
    DECLINE_FEATURES,
    DECLINE_FILE,
    MODEL_DIR,
    RERANKER_FILE,
    decline_features,
    search_prior,
)

from .report import markdown_table
from .rerank_data import Example

LICENSED = ("socialmem", "friendsqa", "own")
HELD_OUT = ("locomo", "socialmem", "friendsqa")
FD_CAP = 0.05
FOLDS = 3
SEED = 7
LGB_PARAMS = {"objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [3], "learning_rate": 0.05,
              "num_leaves": 15, "min_data_in_leaf": 20, "feature_fraction": 0.8, "bagging_fraction": 0.8,
              "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "seed": SEED, "deterministic": True,
              "num_threads": 2, "force_row_wise": True}
ROUNDS = 200


def _rankable(examples: Sequence[Example]) -> list[Example]:
    return [e for e in examples if e.answerable and len(e.labels) > 1 and e.labels.any()]


def fit_reranker(examples: Sequence[Example]):
    """A lambdarank booster over the answerable questions that have a gold candidate."""
    import lightgbm as lgb

    train = _rankable(examples)
    x = np.concatenate([e.x for e in train])
    y = np.concatenate([e.labels for e in train]).astype(np.int32)
    ds = lgb.Dataset(x, y, group=[len(e.labels) for e in train], feature_name=list(FEATURES), free_raw_data=False,
                     init_score=search_prior(x))
    return lgb.train(LGB_PARAMS, ds, num_boost_round=ROUNDS)


def _score(booster, e: Example) -> np.ndarray:
    if not len(e.x):
        return np.zeros(0)
    return np.asarray(booster.predict(e.x, num_threads=1), dtype=np.float64) + search_prior(e.x)


def _order(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))] if len(scores) else []


def oof_scores(examples: Sequence[Example]) -> list[np.ndarray]:
    """Each example's reranker scores from a model that did not see its conversation."""
    convs = sorted({(e.dataset, e.conversation) for e in examples})
    rng = np.random.default_rng(SEED)
    fold = {c: int(i) for c, i in zip(convs, rng.permutation(len(convs)) % FOLDS)}
    out: list[np.ndarray | None] = [None] * len(examples)
    for f in range(FOLDS):
        train = [e for e in examples if fold[(e.dataset, e.conversation)] != f]
        booster = fit_reranker(train)
        for i, e in enumerate(examples):
            if fold[(e.dataset, e.conversation)] == f:
                out[i] = _score(booster, e)
    return [s if s is not None else np.zeros(0) for s in out]


def decline_rows(examples: Sequence[Example], scores: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x = np.stack([decline_features(e.question, e.x, s, _order(s), e.vocab_share) for e, s in zip(examples, scores)])
    y = np.asarray([1 if e.answerable else 0 for e in examples])
    return x, y


def fit_decline(x: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    lr = LogisticRegression(C=0.5, max_iter=2000)
    lr.fit((x - mean) / scale, y)
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": lr.coef_[0].tolist(),
            "intercept": float(lr.intercept_[0])}


def probabilities(model: dict, x: np.ndarray) -> np.ndarray:
    z = ((x - np.asarray(model["mean"])) / np.asarray(model["scale"])) @ np.asarray(model["coef"]) + model["intercept"]
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


def choose_threshold(probs: np.ndarray, examples: Sequence[Example], cap: float = FD_CAP) -> float:
    """The highest threshold keeping false declines at or under ``cap`` on every dataset in ``examples``."""
    best = 0.0
    for t in np.unique(np.round(probs, 4)):
        ok = True
        for ds in {e.dataset for e in examples}:
            pos = [p for p, e in zip(probs, examples) if e.dataset == ds and e.answerable]
            if pos and np.mean(np.asarray(pos) < t) > cap:
                ok = False
                break
        if ok:
            best = max(best, float(t))
    return best


def metrics(examples: Sequence[Example], scores: Sequence[np.ndarray], probs: np.ndarray, threshold: float) -> dict:
    """Held-out figures: cite-hit@1/@3 of the reranked order, search recall@3/@5, declines."""
    hit1, hit3, s_hit3, r3, r5, fd, dec_un, dec_cf, dec_c5 = ([] for _ in range(9))
    for e, s, p in zip(examples, scores, probs):
        declined = p < threshold
        if e.counterfactual:
            dec_cf.append(declined)
            continue
        if not e.answerable:
            dec_un.append(declined)
            if e.category == "5":
                dec_c5.append(declined)
            continue
        fd.append(declined)
        if not e.gold:
            continue
        gold = set(e.gold)
        top = [e.cand_ids[i] for i in _order(s)[:3]]
        hit1.append(bool(gold & set(top[:1])))
        hit3.append(bool(gold & set(top)))
        s_hit3.append(bool(gold & set(e.search_top[:3])))
        r3.append(len(gold & set(e.search_top[:3])) / len(gold))
        r5.append(len(gold & set(e.search_top[:5])) / len(gold))

    def pct(v: list) -> float | None:
        return round(100 * float(np.mean(v)), 1) if v else None

    return {"n": len([e for e in examples if not e.counterfactual]), "cite_hit@1": pct(hit1), "cite_hit@3": pct(hit3),
            "search_hit@3": pct(s_hit3), "search_recall@3": pct(r3), "search_recall@5": pct(r5),
            "false_declines": pct(fd), "declined_unanswerable": pct(dec_un), "declined_counterfactual": pct(dec_cf),
            "declined_category5": pct(dec_c5), "threshold": round(threshold, 4)}


def train_models(train: Sequence[Example]) -> tuple[object, dict, float]:
    """Reranker, decline and threshold fitted on ``train``."""
    booster = fit_reranker(train)
    oof = oof_scores(train)
    x, y = decline_rows(train, oof)
    decline = fit_decline(x, y)
    threshold = choose_threshold(probabilities(decline, x), train)
    return booster, decline, threshold


def lodo(examples: dict[str, list[Example]]) -> dict[str, dict]:
    """Train on the licensed sets other than the held-out one; score the held-out one."""
    out: dict[str, dict] = {}
    for held in HELD_OUT:
        if held not in examples:
            continue
        train = [e for ds in LICENSED if ds != held and ds in examples for e in examples[ds]]
        booster, decline, threshold = train_models(train)
        test = examples[held]
        scores = [_score(booster, e) for e in test]
        x, _ = decline_rows(test, scores)
        out[held] = {"trained_on": sorted({e.dataset for e in train}),
                     **metrics(test, scores, probabilities(decline, x), threshold)}
    return out


def write_models(booster, decline: dict, threshold: float, folder: Path = MODEL_DIR, *,
                 trained_on: Sequence[str] = LICENSED) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rr = folder / RERANKER_FILE
    rr.write_text(booster.model_to_string())
    dc = folder / DECLINE_FILE
    dc.write_text(json.dumps({"version": DECLINE_FILE, "features": list(DECLINE_FEATURES), **decline,
                              "threshold": threshold, "fd_cap": FD_CAP, "trained_on": list(trained_on)}, indent=1))
    return [rr, dc]


def lodo_table(results: dict[str, dict]) -> str:
    headers = ["held out", "trained on", "n", "cite-hit@1", "cite-hit@3", "search recall@5", "search hit@3",
               "false declines", "declined unanswerable", "declined counterfactual", "declined LoCoMo cat. 5",
               "threshold"]
    rows = []
    for held, r in results.items():
        rows.append([held, "+".join(r["trained_on"]), r["n"], *(_fmt(r[k]) for k in (
            "cite_hit@1", "cite_hit@3", "search_recall@5", "search_hit@3", "false_declines", "declined_unanswerable",
            "declined_counterfactual", "declined_category5")), r["threshold"]])
    return markdown_table(headers, rows)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def importance(booster) -> list[tuple[str, float]]:
    gains = booster.feature_importance(importance_type="gain")
    total = float(sum(gains)) or 1.0
    return sorted(((n, round(100 * g / total, 1)) for n, g in zip(FEATURES, gains)), key=lambda t: -t[1])


def grouped(examples: Sequence[Example]) -> dict[str, list[Example]]:
    out: dict[str, list[Example]] = defaultdict(list)
    for e in examples:
        out[e.dataset].append(e)
    return dict(out)
