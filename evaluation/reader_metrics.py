"""The reader's figures: AUC of a score between two groups, SQuAD-style answer F1 and exact match,
and the threshold that keeps false declines under a ceiling."""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half; 0.5 when a group is empty."""
    if not len(positives) or not len(negatives):
        return 0.5
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(len(positives)), np.zeros(len(negatives))]
    return float(roc_auc_score(y, np.r_[np.asarray(positives, float), np.asarray(negatives, float)]))


def normalise(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split()


def token_f1(guess: str, gold: str) -> float:
    """SQuAD-style token F1 (tokens counted with their repeats)."""
    g, t = normalise(guess), normalise(gold)
    if not g or not t:
        return float(g == t)
    common = sum((Counter(g) & Counter(t)).values())
    if not common:
        return 0.0
    p, r = common / len(g), common / len(t)
    return 2 * p * r / (p + r)


def exact(guess: str, gold: str) -> float:
    return float(normalise(guess) == normalise(gold))


def threshold_for(answerable: Sequence[float], ceiling: float) -> float:
    """The highest threshold that declines at most ``ceiling`` of the answerable questions' best scores
    (a question declines when its score is below the threshold)."""
    if not len(answerable):
        return 0.0
    s = np.sort(np.asarray(answerable, dtype=np.float64))
    k = int(np.floor(ceiling * len(s)))  # this many may fall below
    return float(s[k]) if k < len(s) else float(s[-1])
