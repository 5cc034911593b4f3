"""The reply's two learned models, loaded from versioned files: the reranker and the decline.

The reranker is a LightGBM lambdarank model over the candidate features of
memory/query/candidates.py; the decline is a logistic regression over features of the
reranked list (how strong and how clear the best candidate is, whether the visible chat
uses the question's words at all, whether a top message states the kind of answer asked
for), with the probability threshold chosen leave-one-dataset-out for at most 5% false
declines. Both are rebuilt by ``chorus train reranker`` (evaluation/rerank_train.py) from
the dev splits whose licences allow it, and live in memory/query/models/.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import ModelMissing
from ..question import KINDS, Question
from .candidates import FEATURES

MODEL_DIR = Path(__file__).parent / "models"
RERANKER_FILE = "reranker-v1.txt"
DECLINE_FILE = "decline-v1.json"

# The reranker learns a correction to search's own order: each candidate starts from this multiple of
# -log(1 + search rank), so where the features say little the order stays search's (which is tuned
# leave-one-dataset-out). Chosen with the number of boosting rounds on SocialMemBench and FriendsQA held out.
SEARCH_PRIOR = 0.5
DECLINE_FEATURES: tuple[str, ...] = (
    "s1", "s1_s2", "cos1", "cos_max", "cov1", "cov_max3", "kind_top3", "kind_top1", "vocab_share",
    "unknown_names", "n_named", "ctx_cos_max3", "match_max3", "named_top1", "named_top3", "named_topic3",
    "author_topic1", "author_top1",
    *(f"q_{k}" for k in KINDS),
)
_F = {name: i for i, name in enumerate(FEATURES)}


class Reranker:
    """Scores candidates; higher is a better answer to the question."""

    def __init__(self, model_text: str, version: str) -> None:
        import lightgbm as lgb

        self.booster = lgb.Booster(model_str=model_text)
        self.version = version
        if self.booster.num_feature() != len(FEATURES):
            raise ModelMissing(f"reranker {version} expects {self.booster.num_feature()} features, "
                               f"this code builds {len(FEATURES)}; run `chorus train reranker`")

    @classmethod
    def load(cls, folder: Path | None = None) -> Reranker:
        path = (folder or MODEL_DIR) / RERANKER_FILE
        try:
            return cls(path.read_text(), path.name)
        except OSError as exc:
            raise ModelMissing(f"reranker model {path} is missing ({exc}); run `chorus train reranker`") from exc

    def score(self, x: np.ndarray) -> np.ndarray:
        if len(x) == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64) + search_prior(x)


def search_prior(x: np.ndarray) -> np.ndarray:
    """Each candidate's starting score from its search rank (see SEARCH_PRIOR)."""
    return -SEARCH_PRIOR * x[:, _F["rank"]].astype(np.float64)


@dataclass
class Decline:
    """P(the chat answers the question) from the reranked list; answer at or above ``threshold``."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    version: str = ""

    @classmethod
    def load(cls, folder: Path | None = None) -> Decline:
        path = (folder or MODEL_DIR) / DECLINE_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ModelMissing(f"decline model {path} is missing or damaged ({exc}); "
                               "run `chorus train reranker`") from exc
        if list(data.get("features", [])) != list(DECLINE_FEATURES):
            raise ModelMissing(f"decline model {path} was trained on other features; run `chorus train reranker`")
        return cls(np.asarray(data["mean"]), np.asarray(data["scale"]), np.asarray(data["coef"]),
                   float(data["intercept"]), float(data["threshold"]), path.name)

    def probability(self, x: np.ndarray) -> float:
        z = float(((x - self.mean) / self.scale) @ self.coef + self.intercept)
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def decline_features(q: Question, x: np.ndarray, scores: np.ndarray, order: Sequence[int],
                     vocab_share: float) -> np.ndarray:
    """The decline's features from the candidates' features ``x`` and reranker ``scores`` (``order``: best first).

    Counts that scale with the chat's size (candidates, topic words) are left out on purpose: they differ
    between datasets more than between answerable and unanswerable questions.
    """
    named = 1.0 if q.named else 0.0
    if len(order) == 0:
        vals = [-10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, vocab_share, float(len(q.unknown)), named,
                0.0, 0.0, 0.0, 0.0, 0.0, 1.0 - named, 1.0 - named]
    else:
        s = scores[list(order)]
        top3 = list(order[:3])
        topic = [int(i) for i in np.argsort(-(x[:, _F["cov"]] + x[:, _F["cos"]]), kind="stable")]
        topic3 = topic[:3]
        by_or_about = np.maximum(x[:, _F["author_named"]], x[:, _F["names_named"]])
        # Whether the messages most about the topic (words and meaning, whatever the ranking) are by the
        # person the question names: a question that pins the wrong person fails this. 1 when no one is named.
        author_topic1 = float(x[topic[0], _F["author_named"]]) if q.named else 1.0
        author_top1 = float(x[order[0], _F["author_named"]]) if q.named else 1.0
        vals = [float(s[0]), float(s[0] - s[1]) if len(s) > 1 else 1.0,
                float(x[order[0], _F["cos"]]), float(x[:, _F["cos"]].max()), float(x[order[0], _F["cov"]]),
                float(x[top3, _F["cov"]].max()), float(x[top3, _F["kind_match"]].max()),
                float(x[order[0], _F["kind_match"]]), vocab_share, float(len(q.unknown)), named,
                float(np.maximum(x[top3, _F["cos_prev"]], x[top3, _F["cos_parent"]]).max()),
                float(x[top3, _F["n_match"]].max()), float(by_or_about[order[0]]), float(by_or_about[top3].max()),
                float(by_or_about[topic3].max()), author_topic1, author_top1]
    return np.asarray(vals + [1.0 if q.kind == k else 0.0 for k in KINDS], dtype=np.float64)


@lru_cache(maxsize=4)
def shipped(folder: str | None = None) -> tuple[Reranker, Decline]:
    """The models in ``folder`` (the shipped ones by default), loaded once per process."""
    path = Path(folder) if folder else None
    return Reranker.load(path), Decline.load(path)
