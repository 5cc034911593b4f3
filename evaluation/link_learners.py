"""Which learner picks a change's target best, given the analysis pass's pair features (a measurement).

    python -m evaluation.link_learners [--train evaluation/data/train] [--unseen evaluation/data/incoming]

Each labelled change is read with its chat's gold history (memory/analysis/features.py's candidates and pair
features, as `chorus train acts` reads them), so the figure is the learner's alone: the share of changes whose
top-scored candidate is the turn it changes, leave-chats-out over the training chats (``acts_train.FOLDS``
folds by chat) and, fitted on all of them, on chats no model has read. The shipped link model is the pointwise
logistic regression; the others are LightGBM rankers and classifiers over the same features.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence

import numpy as np

Group = tuple[np.ndarray, np.ndarray]
Scorer = Callable[[np.ndarray], np.ndarray]


def groups_of(path: str) -> dict[str, list[Group]]:
    """Chat id -> the candidate groups of its labelled changes whose target is among the candidates."""
    from bot.app import load_embedder_from
    from bot.config import load_settings

    from .acts_data import Inputs, load_chats
    from .acts_train import read

    chats = load_chats(path, Inputs(load_embedder_from(load_settings(None))))
    return {c.id: [(x, y) for x, y in read(c).pairs["changes"] if y.any()] for c in chats}


def logistic(groups: Sequence[Group], c: float = 1.0) -> Scorer:
    """The shipped link model's fit (acts_train.fit_pairs), at C = ``c``."""
    from .acts_train import fit_pairs

    lr, mean, scale = fit_pairs(np.vstack([g[0] for g in groups]), np.concatenate([g[1] for g in groups]), c)
    return lambda gx: lr.decision_function((gx - mean) / scale)


def trees(groups: Sequence[Group], objective: str, rounds: int = 200, leaves: int = 7) -> Scorer:
    import lightgbm as lgb

    x, y = np.vstack([g[0] for g in groups]), np.concatenate([g[1] for g in groups])
    data = lgb.Dataset(x, y, group=[len(g[1]) for g in groups] if objective == "lambdarank" else None)
    params = {"objective": objective, "num_threads": 1, "verbose": -1, "learning_rate": 0.05,
              "num_leaves": leaves, "min_data_in_leaf": 20, "seed": 1}
    booster = lgb.train(params, data, num_boost_round=rounds)
    return lambda gx: np.asarray(booster.predict(gx))


LEARNERS: dict[str, Callable[[Sequence[Group]], Scorer]] = {
    "logistic (shipped)": logistic,
    "logistic C=0.1": lambda g: logistic(g, 0.1),
    "lambdarank 200x7": lambda g: trees(g, "lambdarank"),
    "lambdarank 400x15": lambda g: trees(g, "lambdarank", 400, 15),
    "binary trees 200x7": lambda g: trees(g, "binary"),
}


def right(score: Scorer, groups: Sequence[Group]) -> tuple[int, int]:
    return sum(bool(gy[int(np.argmax(score(gx)))]) for gx, gy in groups), len(groups)


def compare(train: dict[str, list[Group]], unseen: dict[str, list[Group]], folds: int) -> dict[str, dict]:
    names = sorted(train)
    parts = [names[f::folds] for f in range(folds)]
    every = [g for c in names for g in train[c]]
    held = [g for c in sorted(unseen) for g in unseen[c]]
    out = {}
    for name, fit in LEARNERS.items():
        hits = total = 0
        for part in parts:
            fitted = fit([g for c in names if c not in part for g in train[c]])
            a, b = right(fitted, [g for c in part for g in train[c]])
            hits, total = hits + a, total + b
        a, b = right(fit(every), held)
        out[name] = {"leave_chats_out": [hits, total], "unseen": [a, b]}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from .acts_train import FOLDS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", default="evaluation/data/train")
    p.add_argument("--unseen", default="evaluation/data/incoming")
    args = p.parse_args(argv)
    result = compare(groups_of(args.train), groups_of(args.unseen), FOLDS)
    for name, r in result.items():
        (a, b), (c, d) = r["leave_chats_out"], r["unseen"]
        print(f"{name:22s} leave-chats-out {a}/{b} = {a / b:.3f}   unseen {c}/{d} = {c / d:.3f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
