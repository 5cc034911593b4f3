"""The act model: what each message does for the group (ActModel of memory/analysis/types.py).

A multinomial logistic regression over the eight ACT_KINDS (averaged with LightGBM trees over the same
inputs less the vector, when the model file holds them) reads the features of
memory/analysis/features.py: the message's MiniLM vector, its words and clause shape (a learned
vocabulary), and dense measures of its place in the conversation and its closeness to earlier state
acts. Trained by ``chorus train acts`` (evaluation/acts_train.py) on the labelled training chats; at
run time numpy reads the exported coefficients and LightGBM the trees (both in memory/models/acts-v2.json).

State acts are rare (about one message in ten), so a message is filed as one when the summed
probability of the five state kinds passes a threshold chosen by leave-chats-out validation, and then
as the likeliest of those five; otherwise as the likeliest of the other three.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..people import People
from .features import ACT_FEATURES, Context, act_features, tokens
from .owner import owner_of
from .topic import topic_of
from .types import ACT_KINDS, STATE_ACTS, Act, History, Turn

MODEL_PATH = Path(__file__).resolve().parents[1] / "models" / "acts-v2.json"
EMBEDDER_FAMILY = "all-MiniLM-L6-v2"
_STATE = np.asarray([k in STATE_ACTS for k in ACT_KINDS])


class LinearActModel:
    """The exported act classifier; reads a scope's turns oldest first."""

    def __init__(self, model: dict) -> None:
        if tuple(model.get("kinds", ())) != ACT_KINDS:
            raise ValueError(f"act model kinds {model.get('kinds')} are not {ACT_KINDS}")
        if tuple(model.get("dense", ())) != ACT_FEATURES:
            raise ValueError("act model was trained on other dense features than memory/analysis/features.py's")
        self.version = str(model["version"])
        self.vocab = {t: i for i, t in enumerate(model["vocab"])}
        self.w_tokens = np.asarray(model["w_tokens"], dtype=np.float32).reshape(len(self.vocab), len(ACT_KINDS))
        self.w_dense = np.asarray(model["w_dense"], dtype=np.float32)      # (kinds, dense)
        self.w_vector = np.asarray(model["w_vector"], dtype=np.float32)    # (kinds, dim) or (kinds, 0)
        self.bias = np.asarray(model["bias"], dtype=np.float32)
        self.mean = np.asarray(model["mean"], dtype=np.float32)
        scale = np.asarray(model["scale"], dtype=np.float32)
        self.scale = np.where(scale > 0, scale, 1.0)
        self.threshold = float(model["threshold"])
        self.trees_weight = float(model.get("trees_weight") or 0.0)
        self.trees = _booster(model["trees"]) if model.get("trees") else None

    def probabilities(self, turn: Turn, ctx: Context) -> np.ndarray:
        """P(kind) for each of ACT_KINDS."""
        dense = act_features(turn, ctx)
        z = (dense - self.mean) / self.scale
        logits = self.bias + self.w_dense @ z
        if self.w_vector.shape[1] and turn.vector is not None:
            logits = logits + self.w_vector @ turn.vector
        rows = [self.vocab[t] for t in tokens(turn, ctx.people) if t in self.vocab]
        if rows:
            logits = logits + self.w_tokens[rows].sum(axis=0)
        logits = logits - logits.max()
        p = np.exp(logits)
        p = p / p.sum()
        if self.trees is not None:
            row = np.zeros(len(ACT_FEATURES) + len(self.vocab), dtype=np.float32)
            row[: len(ACT_FEATURES)] = dense
            row[[len(ACT_FEATURES) + r for r in rows]] = 1.0
            trees = np.asarray(self.trees.predict(row[None, :], num_threads=1), dtype=np.float32)[0]
            p = (1.0 - self.trees_weight) * p + self.trees_weight * trees
        return p

    def decide(self, p: np.ndarray) -> int:
        """The index of the kind filed: a state kind when their summed probability passes the threshold."""
        if float(p[_STATE].sum()) >= self.threshold:
            return int(np.argmax(np.where(_STATE, p, -1.0)))
        return int(np.argmax(np.where(_STATE, -1.0, p)))

    def act(self, turn: Turn, ctx: Context) -> Act:
        p = self.probabilities(turn, ctx)
        k = self.decide(p)
        kind = ACT_KINDS[k]
        topic = "" if kind == "chatter" else topic_of(turn, ctx)
        return Act(kind, round(float(p[k]), 4), tuple(round(float(x), 4) for x in p),
                   owner_of(kind, turn, ctx), topic)

    def acts(self, turns: Sequence[Turn], history: History, people: People) -> list[Act]:
        ctx = Context.of(history, people)
        out: list[Act] = []
        for t in turns:
            a = self.act(t, ctx)
            out.append(a)
            ctx.push(t, a, None)
        return out


def _booster(text: str):  # noqa: ANN202 - lightgbm is untyped
    import lightgbm as lgb

    return lgb.Booster(model_str=text)


def load_act_model(path: str | Path = MODEL_PATH) -> LinearActModel:
    return LinearActModel(json.loads(Path(path).read_text("utf-8")))
