"""One ingest-and-embed pass per dataset, kept as arrays, so fusion constants are tuned offline.

For every conversation: each message's vector, author, time, parent row and length (taken from
the live vector mirror, so the parent rule is the searcher's own); for every question: its
vectors (as asked, and without asking words), the full BM25 ranking for each author-column
weight tried, and its chat signals. Scoring a constant setting is then numpy over these arrays
(evaluation/lodo.py), never a re-run of search.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from memory.datasets import load_dataset
from memory.embeddings.base import Embedder
from memory.errors import StoreError
from memory.search import HYBRID_BM25_MAX_DF, Searcher
from memory.signals import dense_query, read_question
from memory.store import Store

from .stores import conversation_stores, safe_name

AUTHOR_COLUMNS = (0.0, 0.3, 1.0)  # BM25 weights of the author-name column cached for tuning
CACHE_VERSION = 2


@dataclass
class ConversationFeatures:
    """Arrays over one conversation's messages (rows in store id order) and its questions."""

    ids: np.ndarray  # store message ids
    authors: np.ndarray  # author id per row (str)
    ts: np.ndarray
    prev: np.ndarray  # parent row or -1
    chars: np.ndarray
    roster_size: int
    questions: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    gold: list[list[int]] = field(default_factory=list)  # rows of the gold evidence
    n_gold: list[int] = field(default_factory=list)  # gold ids asked for (a gold id with no row counts as missed)
    cos: np.ndarray | None = None  # [questions, rows] similarity to the question as asked
    cos_rewrite: np.ndarray | None = None  # ... to the question without its asking words
    # weight -> per question (row, score)
    bm25: dict[float, list[list[tuple[int, float]]]] = field(default_factory=dict)
    named: list[list[str]] = field(default_factory=list)
    each: list[bool] = field(default_factory=list)
    asked_at: float = 0.0  # when the questions are asked (pinned dates are read at scoring time)


@dataclass
class DatasetFeatures:
    dataset: str
    conversations: list[ConversationFeatures]
    embedder: str
    version: int = CACHE_VERSION

    @property
    def n_questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)


def _conversation(store: Store, searcher: Searcher, conv, asked_at: float) -> ConversationFeatures:
    sid = store.scopes()[0].id
    mirror = searcher.vectors.mirror(sid)
    if mirror is None:
        raise StoreError(f"scope {sid} of {conv.id} has no vectors: embed the store before computing features")
    order = np.argsort(mirror.ids, kind="stable")
    ids = mirror.ids[order]
    back = np.empty_like(order)
    back[order] = np.arange(len(order))  # mirror row -> feature row
    prev = np.where(mirror.prev[order] >= 0, back[np.maximum(mirror.prev[order], 0)], -1)
    stored = {m.id: m for m in store.messages([int(i) for i in ids])}
    row_of_msg = {stored[int(i)].msg_id: n for n, i in enumerate(ids) if int(i) in stored}
    people = [(p.person_id, p.names()) for p in store.roster(sid) if not p.is_bot]
    f = ConversationFeatures(ids, mirror.authors[order], np.array([stored[int(i)].ts for i in ids]), prev,
                             mirror.chars[order], len(people), asked_at=asked_at)
    row_of_id = {int(i): n for n, i in enumerate(ids)}
    matrix = mirror.matrix[order]
    qs = [q for q in conv.questions if q.evidence]
    texts = [q.question for q in qs]
    if not texts:
        return f
    # One question at a time, as the searcher embeds them (batching pads, which moves int8 vectors a little).
    f.cos = np.stack([searcher.query_vector(t) for t in texts]).astype(np.float32) @ matrix.T
    f.cos_rewrite = np.stack([searcher.query_vector(dense_query(t)) for t in texts]).astype(np.float32) @ matrix.T
    for w in AUTHOR_COLUMNS:
        f.bm25[w] = [[(row_of_id[mid], -s) for mid, s in searcher.bm25([sid], t, 100_000, HYBRID_BM25_MAX_DF,
                                                                          author_weight=w) if mid in row_of_id]
                     for t in texts]
    for q in qs:
        f.questions.append(q.question)
        f.categories.append(q.category)
        wanted = set(q.evidence)
        f.gold.append(sorted(row_of_msg[e] for e in wanted if e in row_of_msg))
        f.n_gold.append(len(wanted))
        sig = read_question(q.question, people, asked_at)
        f.named.append(sig.authors)
        f.each.append(sig.each)
    return f


def collect(dataset: str, *, data: str | Path | None, embedder: Embedder, limit: int | None = None,
            progress: bool = True) -> DatasetFeatures:
    """Ingest and embed every conversation once (the normal ingest path) and keep its features."""
    conversations = load_dataset(dataset, data)[:limit]
    out = []
    stores = conversation_stores(tqdm(conversations, desc=f"features {dataset}", unit="conv", disable=not progress),
                                 embedder, prefix="chorus-lodo-", analyse=False)
    for cs in stores:
        out.append(_conversation(cs.store, Searcher(cs.store), cs.conv, cs.asked_at))
    return DatasetFeatures(dataset, out, getattr(embedder, "name", type(embedder).__name__))


def cached(dataset: str, cache_dir: str | Path, *, data: str | Path | None, embedder_factory,
           limit: int | None = None, progress: bool = True) -> DatasetFeatures:
    """The dataset's features from ``cache_dir``, collected (and saved) on first use or when the
    cache was made by another embedding model or cache version."""
    suffix = f"-{safe_name(str(data))}" if data else ""
    path = Path(cache_dir) / f"features-{dataset}{suffix}{f'-{limit}' if limit else ''}.pkl"
    embedder = embedder_factory()
    name = getattr(embedder, "name", type(embedder).__name__)
    if path.exists():
        with open(path, "rb") as fh:
            feats = pickle.load(fh)
        if getattr(feats, "version", None) == CACHE_VERSION and feats.embedder == name:
            return feats
    feats = collect(dataset, data=data, embedder=embedder, limit=limit, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(feats, fh)
    return feats
