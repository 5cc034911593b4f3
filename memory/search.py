"""Hybrid search over Track 1: FTS5 BM25 and vector KNN fused by reciprocal rank.

Every query is restricted to its scopes in SQL (the FTS scope tag, the vec0
partition), never by filtering afterwards.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Literal

from . import ftsquery
from .db import OperationalError
from .errors import EmbeddingError, InputError
from .models import SearchHit, StoredMessage
from .store import Store
from .vectors import VectorIndex

log = logging.getLogger(__name__)

# In stores of 5,000+ messages, BM25 leaves out query terms found in more than this share of messages
# (when rarer terms remain). Alone it keeps terms up to 10%; inside hybrid search, where the vectors carry
# the common words' meaning, up to 5%. Measured at 100k messages: BM25 p95 25 -> 10 ms; hybrid recall@10
# with every term kept / 10% / 5%: LoCoMo 66.0 / 66.5 / 66.1, FriendsQA 59.2 / 59.9 / 59.3 (BM25 alone
# loses 2-6 points at 5%, hence the two settings).
BM25_MAX_DF = 0.10
HYBRID_BM25_MAX_DF = 0.05

Mode = Literal["hybrid", "bm25", "dense"]


def _porter(word: str) -> str:
    """The stem FTS5's porter tokenizer stores for ``word`` (the original Porter algorithm)."""
    global _STEMMER
    if _STEMMER is None:
        from nltk.stem.porter import PorterStemmer

        _STEMMER = PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM)
    return _STEMMER.stem(word)


_STEMMER = None
# Fusion constants: BM25 ranks count fully, dense ranks 0.8, k = 10 (a sharper head than the usual 60).
# Chosen on LoCoMo, SocialMemBench and FriendsQA together (README); score other data with --data.
RRF_K = 10
DENSE_WEIGHT = 0.8
RECALL_POOL = 40


@dataclass
class Ranked:
    id: int
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None


def rrf(bm25_ids: list[int], vector_ids: list[int], *, k: int = RRF_K,
        weights: tuple[float, float] = (1.0, DENSE_WEIGHT)) -> list[Ranked]:
    """Reciprocal rank fusion of two ranked id lists (best first)."""
    fused: dict[int, Ranked] = {}
    for rank, mid in enumerate(bm25_ids, 1):
        r = fused.setdefault(mid, Ranked(mid, 0.0))
        r.score += weights[0] / (k + rank)
        r.bm25_rank = rank
    for rank, mid in enumerate(vector_ids, 1):
        r = fused.setdefault(mid, Ranked(mid, 0.0))
        r.score += weights[1] / (k + rank)
        r.vector_rank = rank
    return sorted(fused.values(), key=lambda r: (-r.score, r.id))


class Searcher:
    """Track 1 retrieval: BM25, dense, hybrid, exact phrase and neighbour expansion."""

    def __init__(self, store: Store, *, vectors: VectorIndex | None = None) -> None:
        self.store = store
        self.vectors = vectors or VectorIndex(store)
        self._query_vectors: dict[str, object] = {}
        self._local = threading.local()  # `degraded` is per thread: questions are answered concurrently

    @property
    def degraded(self) -> str | None:
        """Why this thread's last vector search fell back to words, if it did."""
        return getattr(self._local, "degraded", None)

    @degraded.setter
    def degraded(self, reason: str | None) -> None:
        self._local.degraded = reason

    def query_vector(self, text: str):
        """The embedding of a query text, cached (one question is searched several ways)."""
        vec = self._query_vectors.get(text)
        if vec is None:
            embedder = self.store.embedder
            try:
                vec = embedder.embed([text])[0]  # type: ignore[union-attr]
            except EmbeddingError:
                raise
            except Exception as exc:  # the model is third-party code: name it in the error
                raise EmbeddingError(f"embedding the question with {getattr(embedder, 'name', 'the model')} "
                                     f"failed: {exc}") from exc
            if len(self._query_vectors) >= 256:
                self._query_vectors.pop(next(iter(self._query_vectors)))
            self._query_vectors[text] = vec
        return vec

    def vector_or_none(self, text: str):
        """The question's vector, or None when the embedder fails: search then goes on by words alone.

        BM25 covers every stored message, so a broken embedding model degrades answers instead of
        stopping them; the failure is logged with its traceback and kept in ``degraded``.
        """
        try:
            return self.query_vector(text)
        except EmbeddingError as exc:
            log.warning("meaning search unavailable, searching by words only: %s", exc, exc_info=True)
            self.degraded = str(exc)
            return None

    def forget_query_vectors(self) -> None:
        """Drop cached question embeddings (benchmarks time the embedding of every question)."""
        self._query_vectors.clear()

    def selective_terms(self, text: str, max_df: float = BM25_MAX_DF) -> list[str] | None:
        """Content words of ``text`` without those found in over ``max_df`` of all messages (when rarer ones exist).

        BM25 gives such terms little weight, but an OR query must still score every message that
        contains them; leaving them out keeps search fast at 100k+ messages in a scope.
        """
        words = ftsquery.terms(text)
        if len(words) < 2:
            return None
        stems = {w: _porter(w) for w in words}
        with self.store.read() as conn:
            n = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]  # ~ messages indexed
            unique = sorted(set(stems.values()))
            df = dict(conn.execute(
                f"SELECT term, doc FROM messages_fts_vocab WHERE term IN ({','.join('?' * len(unique))})",
                unique).fetchall())
        if n < 5000:
            return None
        keep = [w for w in words if df.get(stems[w], 0) <= n * max_df]
        return keep if keep else None

    def bm25(self, scope_ids: list[int], text: str, limit: int = RECALL_POOL,
             max_df: float = BM25_MAX_DF) -> list[tuple[int, float]]:
        keep = self.selective_terms(text, max_df)
        query = ftsquery.match_any(" ".join(keep) if keep else text)
        if query is None or not scope_ids:
            return []
        with self.store.read() as conn:
            try:
                rows = conn.execute(
                    "SELECT rowid, bm25(messages_fts, 1.0, 0.3, 0.0) AS score FROM messages_fts "
                    "WHERE messages_fts MATCH ? ORDER BY score LIMIT ?",
                    (ftsquery.scoped(query, scope_ids), int(limit))).fetchall()
            except OperationalError as exc:  # should be impossible: every term is quoted
                raise InputError(f"could not search for {text[:60]!r}: {exc}") from exc
        return [(int(r[0]), float(r[1])) for r in rows]

    def dense(self, scope_ids: list[int], text: str, limit: int = RECALL_POOL, *,
              strict: bool = True) -> list[tuple[int, float]]:
        """Nearest messages by meaning; with ``strict=False`` an embedder failure gives [] (see `vector_or_none`)."""
        embedder = self.store.embedder
        if embedder is None or not text.strip() or not scope_ids:
            return []
        vec = self.query_vector(text) if strict else self.vector_or_none(text)
        return [] if vec is None else self.vectors.knn(scope_ids, vec, limit)

    def by_author(self, scope_ids: list[int], author_id: str, text: str, k: int = 1) -> list[StoredMessage]:
        """One person's messages best matching ``text`` (BM25, then meaning), restricted in SQL."""
        if not scope_ids:
            return []
        query = ftsquery.match_any(text)
        ids: list[int] = []
        if query:
            with self.store.read() as conn:
                ids = [r[0] for r in conn.execute(
                    "SELECT f.rowid FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                    "WHERE messages_fts MATCH ? AND m.author_id = ? ORDER BY bm25(messages_fts, 1.0, 0.0, 0.0) "
                    "LIMIT ?", (ftsquery.scoped(query, scope_ids, "text"), author_id, int(k))).fetchall()]
        vec = self.vector_or_none(text) if len(ids) < k and self.store.embedder is not None and text.strip() \
            else None
        if vec is not None:
            for mid, _ in self.vectors.knn(scope_ids, vec, k, author_id=author_id):
                if mid not in ids:
                    ids.append(mid)
        return self.store.messages(ids[:k])

    def best_by_authors(self, scope_ids: list[int], text: str, author_ids: list[str],
                        pool: int = 200) -> dict[str, StoredMessage]:
        """Each author's best message for ``text``: the best-ranked one in a lexical pool, else the
        nearest by meaning. One query for all authors, so per-person rows stay cheap at 100k messages."""
        found: dict[str, int] = {}
        lexical = self.bm25(scope_ids, text, pool)
        if lexical:
            authors = {m.id: m.author_id for m in self.store.messages([i for i, _ in lexical])}
            for mid, _ in lexical:
                a = authors.get(mid)
                if a in author_ids and a not in found:
                    found[a] = mid
        missing = [a for a in author_ids if a not in found]
        vec = self.vector_or_none(text) if missing and self.store.embedder is not None and text.strip() else None
        if vec is not None:
            for a, (mid, _) in self.vectors.best_per_author(scope_ids, vec, missing).items():
                found[a] = mid
        msgs = {m.id: m for m in self.store.messages(list(found.values()))}
        return {a: msgs[mid] for a, mid in found.items() if mid in msgs}

    def search(self, scope_ids: list[int], text: str, *, k: int = 10, mode: Mode = "hybrid",
               pool: int = RECALL_POOL, exclude: set[int] | frozenset[int] = frozenset()) -> list[SearchHit]:
        """Top-``k`` messages for ``text`` from a recall pool of ``pool`` per retriever.

        ``exclude`` drops message ids (e.g. the question being answered) before the cut.
        """
        if mode not in ("hybrid", "bm25", "dense"):
            raise InputError(f"unknown search mode {mode!r}; use hybrid, bm25 or dense")
        lexical = (self.bm25(scope_ids, text, pool, HYBRID_BM25_MAX_DF) if mode == "hybrid"
                   else self.bm25(scope_ids, text, pool) if mode == "bm25" else [])
        # Hybrid search goes on by words alone if the embedder fails; dense search has nothing else.
        semantic = self.dense(scope_ids, text, pool, strict=mode == "dense") if mode in ("hybrid", "dense") else []
        fused = [r for r in rrf([i for i, _ in lexical], [i for i, _ in semantic]) if r.id not in exclude][:k]
        messages = {m.id: m for m in self.store.messages([r.id for r in fused])}
        return [SearchHit(messages[r.id], r.score, r.bm25_rank, r.vector_rank, mode)
                for r in fused if r.id in messages]

    def phrase(self, scope_ids: list[int], phrase: str, limit: int = 20) -> list[StoredMessage]:
        """Messages containing ``phrase`` exactly (case-insensitive), oldest first: "who said ..."."""
        query = ftsquery.match_phrase(phrase)
        if query is None or not scope_ids:
            return []
        with self.store.read() as conn:
            rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT 2000",
                                (ftsquery.scoped(query, scope_ids, columns="text"),)).fetchall()
        found = self.store.messages([r[0] for r in rows])
        needle = " ".join(phrase.casefold().split())
        exact = [m for m in found if needle in " ".join(m.text.casefold().split())]
        chosen = exact or found  # punctuation differences still count as the phrase
        chosen.sort(key=lambda m: (m.ts, m.id))
        return chosen[:limit]

    def expand(self, hits: list[StoredMessage], *, before: int = 1, after: int = 1,
               limit: int | None = None) -> list[StoredMessage]:
        """Add neighbouring turns of each hit (same session), keeping hits' order and no duplicates."""
        seen: set[int] = set()
        out: list[StoredMessage] = []
        for hit in hits:
            for m in self.store.neighbours(hit, before, after):
                if m.id not in seen:
                    seen.add(m.id)
                    out.append(m)
            if limit is not None and len(out) >= limit:
                break
        return out
