"""Training and evaluation examples for the reply's reranker and decline, built by the reply's own code.

For every question of a dataset: the question analysis, the evidence pack, the reranker's
candidates in context and their features, exactly as ``Answerer`` builds them at reply time
(`Answerer.candidates`), labelled by the gold evidence. For every answerable question with
evidence, a counterfactual too: the same question with its evidence messages removed from
what search and the candidates may use, after which the honest reply is a decline. Built
once per dataset and cached under ``out/train/`` (a pickle keyed by the feature list).
"""
from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from memory.datasets import load_dataset
from memory.embeddings.base import Embedder
from memory.query.answer import Answerer
from memory.query.candidates import FEATURES
from memory.question import Question
from memory.records import Records
from memory.search import Searcher

from .stores import conversation_stores


@dataclass
class Example:
    """One question's candidates: features, labels and what the held-out scores need."""

    dataset: str
    conversation: str
    qid: str
    category: str
    question: Question
    x: np.ndarray
    labels: np.ndarray  # 1 for a gold evidence message
    cand_ids: list[str]  # platform msg ids, in the candidates' order
    search_top: list[str]  # search's top 10 msg ids
    gold: list[str]
    vocab_share: float
    answerable: bool  # False: an unanswerable question, or a counterfactual with its evidence removed
    counterfactual: bool = False
    extra: dict = field(default_factory=dict)


def _key(dataset: str, data: str | Path | None, limit: int | None) -> str:
    raw = f"{dataset}|{data}|{limit}|{','.join(FEATURES)}|v4"
    return hashlib.sha1(raw.encode()).hexdigest()[:12]


def collect(dataset: str, data: str | Path | None, embedder: Embedder, *, limit: int | None = None,
            cache_dir: str | Path | None = "out/train", label: str | None = None,
            counterfactuals: bool = True) -> list[Example]:
    """Every question's examples for one dataset (from the cache when it holds them)."""
    cache = Path(cache_dir) / f"examples-{label or dataset}-{_key(dataset, data, limit)}.pkl" if cache_dir else None
    if cache is not None and cache.exists():
        with cache.open("rb") as fh:
            return pickle.load(fh)
    conversations = load_dataset(dataset, data)[:limit]
    out: list[Example] = []
    bar = tqdm(total=sum(len(c.questions) for c in conversations), desc=f"examples {label or dataset}", unit="q")
    for cs in conversation_stores(conversations, embedder):
        answerer = Answerer(cs.store, Searcher(cs.store), Records(cs.store), None)
        by_msg = {}
        with cs.store.read() as conn:
            for sid in cs.scope_ids:
                by_msg.update({r[0]: r[1] for r in conn.execute("SELECT msg_id, id FROM messages WHERE scope_id = ?",
                                                                (sid,))})
        for q in cs.conv.questions:
            bar.update(1)
            gold = list(dict.fromkeys(q.evidence))
            answerable = not q.adversarial
            variants: list[tuple[frozenset[int], bool]] = [(frozenset(), False)]
            if counterfactuals and answerable and gold:
                variants.append((frozenset(by_msg[g] for g in gold if g in by_msg), True))
            for exclude, cf in variants:
                pack, _, _ = answerer.prepare(cs.scope_ids, q.question, asked_at=cs.asked_at, exclude=exclude)
                cands, x, stats = answerer.candidates(cs.scope_ids, pack, exclude)
                ids = [c.message.msg_id for c in cands]
                out.append(Example(
                    dataset=label or dataset, conversation=cs.conv.id, qid=q.id, category=str(q.category),
                    question=pack.question, x=x, labels=np.asarray([1 if i in gold else 0 for i in ids], dtype=np.int8),
                    cand_ids=ids, search_top=[h.message.msg_id for h in pack.hits[:10]], gold=gold,
                    vocab_share=answerer.vocab_share(cs.scope_ids, pack.question.stems, exclude, stats),
                    answerable=answerable and not cf, counterfactual=cf))
    bar.close()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as fh:
            pickle.dump(out, fh)
    return out
