"""Hybrid search over Track 1: FTS5 BM25 and vector KNN fused per query (memory/fusion.py).

Every query is restricted to its scopes in SQL (each scope's own FTS5 table,
memory/store/scopeindex.py; the vec0 partition), never by filtering afterwards. BM25 scores and the
document counts used to prune terms come from the searched scopes' tables only, so a ranking in one
channel never depends on another channel's messages.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np

from . import ftsquery
from .db import OperationalError, outgrown
from .errors import EmbeddingError, InputError
from .ftsscope import snapshot
from .fusion import FusionParams, fuse, spread_authors
from .models import SearchHit, StoredMessage
from .question import Question
from .signals import dense_query, of_question, read_question
from .store import Store, scopeindex
from .vectors import DenseScores, VectorIndex

log = logging.getLogger(__name__)
_dense_pool: tuple[int, ThreadPoolExecutor] | None = None
_dense_pool_lock = threading.Lock()


def _dense_worker() -> ThreadPoolExecutor:
    """The threads that run the dense half of hybrid searches (see Searcher._hybrid); two, so concurrent
    questions do not queue. One pool per process: a forked child cannot use its parent's threads."""
    global _dense_pool
    with _dense_pool_lock:
        if _dense_pool is None or _dense_pool[0] != os.getpid():
            _dense_pool = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="chorus-dense"))
        return _dense_pool[1]

# In stores of 5,000+ messages, BM25 leaves out query terms found in more than this share of messages
# (when rarer terms remain): a cut that saves time at scale. Alone it keeps terms up to 10%; inside hybrid
# search, where the vectors carry the common words' meaning, up to 5%. Figures: docs/retrieval.md.
BM25_MAX_DF = 0.10
HYBRID_BM25_MAX_DF = 0.05

Mode = Literal["hybrid", "bm25", "dense"]


# The old fusion: BM25 ranks count fully, dense ranks 0.8, k = 10, 40 candidates a side (kept for
# Track 2's rrf() and as the tuner's starting point).
RRF_K = 10
DENSE_WEIGHT = 0.8
OLD_RRF = FusionParams(method="rrf", pool=40, lexical=1 / (1 + DENSE_WEIGHT), rrf_k=RRF_K)
# Hybrid search's constants, chosen leave-one-dataset-out by `chorus eval retrieval --lodo` (tuned on
# LoCoMo + SocialMemBench + FriendsQA dev for the worst of the three; docs/retrieval.md has the held-out
# table and what each signal adds). Re-tune with that command rather than editing by hand.
HYBRID = FusionParams(method="rrf", pool=160, lexical=0.5, adapt=0.2, rrf_k=10, author_column=0.0, author=0.2,
                      dates=0.4, parent_words=0.2, parent_meaning=0.2, reply_words=0.3, reply_meaning=0.2,
                      length=0.4)
RECALL_POOL = HYBRID.pool


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

    def __init__(self, store: Store, *, vectors: VectorIndex | None = None,
                 params: FusionParams | None = None) -> None:
        self.store = store
        self.params = params or HYBRID
        self.vectors = vectors or VectorIndex(store)
        self._query_vectors: dict[str, object] = {}
        self._qv_lock = threading.Lock()  # guards the question-vector and term-frequency caches
        self._df: dict[int, dict[str, int]] = {}  # per scope: stem -> messages holding it
        self._df_at: dict[int, int] = {}  # per scope: its size when those counts were read
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
        with self._qv_lock:
            vec = self._query_vectors.get(text)
        if vec is None:
            embedder = self.store.embedder
            try:
                vec = embedder.embed([text])[0]  # type: ignore[union-attr]  # None: an EmbeddingError below
            except EmbeddingError:
                raise
            except Exception as exc:  # the model is third-party code: name it in the error
                raise EmbeddingError(f"embedding the question with {getattr(embedder, 'name', 'the model')} "
                                     f"failed: {exc}") from exc
            with self._qv_lock:  # the dense worker and the caller's thread both fill it
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
            self._degrade(exc)
            return None

    def _degrade(self, exc: EmbeddingError) -> None:
        """Log an embedder failure with its traceback and keep it in this thread's ``degraded``."""
        log.warning("meaning search unavailable, searching by words only: %s", exc, exc_info=exc)
        self.degraded = str(exc)

    def forget_query_vectors(self) -> None:
        """Drop cached question embeddings (benchmarks time the embedding of every question)."""
        with self._qv_lock:
            self._query_vectors.clear()

    def selective_terms(self, text: str, max_df: float = BM25_MAX_DF,
                        scope_ids: list[int] | None = None) -> list[str] | None:
        """Content words of ``text`` without those found in over ``max_df`` of the searched scopes'
        messages (when rarer ones exist).

        BM25 gives such terms little weight, but an OR query must still score every message that
        contains them; leaving them out keeps search fast at 100k+ messages in a scope. Only the
        searched scopes are counted, so what is pruned never depends on another channel.
        """
        words = ftsquery.terms(text)
        if len(words) < 2 or not scope_ids:
            return None
        stems = {w: ftsquery.stem(w) for w in words}
        with self.store.read() as conn:
            sizes = {sid: scopeindex.documents(conn, scopeindex.MESSAGES, sid) for sid in scope_ids}
            n = sum(sizes.values())
            if n < 5000:
                return None
            df = self._document_frequencies(conn, sizes, sorted(set(stems.values())))
        keep = [w for w in words if df.get(stems[w], 0) <= n * max_df]
        return keep if keep else None

    def _document_frequencies(self, conn, sizes: dict[int, int], stems: list[str]) -> dict[str, int]:
        """How many messages of the scopes in ``sizes`` hold each stem; each scope's counts are
        remembered until that scope grows by 5%.

        fts5vocab counts a term's documents by walking its whole posting list, a few ms per question
        at 100k messages; pruning only needs the share roughly, so a slightly old count will do.
        """
        total = dict.fromkeys(stems, 0)
        for sid, n in sizes.items():
            with self._qv_lock:
                if outgrown(n, self._df_at.get(sid, -1)):
                    self._df[sid] = {}
                    self._df_at[sid] = n
                cache = self._df.setdefault(sid, {})
                missing = [t for t in stems if t not in cache]
            if missing:
                found = scopeindex.term_stats(conn, scopeindex.MESSAGES, [sid], missing).df
                with self._qv_lock:
                    if len(cache) > 50_000:
                        cache.clear()
                    cache.update({t: int(found.get(t, 0)) for t in missing})
            with self._qv_lock:
                for t in stems:
                    total[t] += cache.get(t, 0)
        return total

    def bm25(self, scope_ids: list[int], text: str, limit: int = RECALL_POOL,
             max_df: float = BM25_MAX_DF, *, author_weight: float = 0.3) -> list[tuple[int, float]]:
        """(message id, FTS5 bm25 score: lower is better) best first; ``author_weight`` weighs the name column."""
        keep = self.selective_terms(text, max_df, scope_ids)
        query = ftsquery.match_any(" ".join(keep) if keep else text)
        if query is None or not scope_ids:
            return []
        with self.store.read() as conn, snapshot(conn):
            tables = [scopeindex.MESSAGES.table(s) for s in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES,
                                                                                         scope_ids)]
            if not tables:
                return []
            # One arm per scope: each table's bm25() reads that scope's statistics only. Ties go to the
            # older message, so equal scores order the same way whatever else the store holds.
            arms = " UNION ALL ".join(f"SELECT rowid AS id, bm25({t}, 1.0, ?) AS score FROM {t} WHERE {t} MATCH ?"
                                      for t in tables)
            args = [a for _ in tables for a in (float(author_weight), query)]
            try:
                rows = conn.execute(f"SELECT id, score FROM ({arms}) ORDER BY score, id LIMIT ?",
                                    (*args, int(limit))).fetchall()
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
            with self.store.read() as conn, snapshot(conn):
                tables = [scopeindex.MESSAGES.table(s)
                          for s in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES, scope_ids)]
                arms = " UNION ALL ".join(
                    f"SELECT f.rowid AS id, bm25({t}, 1.0, 0.0) AS score FROM {t} f JOIN messages m ON m.id = f.rowid "
                    f"WHERE {t} MATCH ? AND m.author_id = ?" for t in tables)
                ids = [r[0] for r in conn.execute(
                    f"SELECT id FROM ({arms}) ORDER BY score, id LIMIT ?",
                    (*(a for _ in tables for a in (f"text: ({query})", author_id)), int(k))).fetchall()] \
                    if tables else []
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

    def search(self, scope_ids: list[int], query: str | Question, *, k: int = 10, mode: Mode = "hybrid",
               pool: int | None = None, exclude: set[int] | frozenset[int] = frozenset(),
               asked_at: float | None = None, params: FusionParams | None = None) -> list[SearchHit]:
        """Top-``k`` messages for ``query`` from a recall pool of ``pool`` per retriever.

        ``query`` is the reply's ``Question`` (its text, its time and its chat signals), or plain words for
        callers without one (the reader's tools, /timeline, retrieval benchmarks), which search analyses itself;
        ``exclude`` drops message ids (e.g. the question being answered) before the cut;
        ``asked_at`` resolves relative dates in plain words ("last week"), now by default.
        """
        question = query if isinstance(query, Question) else None
        text = query.text if isinstance(query, Question) else query
        if mode not in ("hybrid", "bm25", "dense"):
            raise InputError(f"unknown search mode {mode!r}; use hybrid, bm25 or dense")
        p = params or self.params
        pool = int(pool or p.pool)
        if mode != "hybrid":
            found = (self.bm25(scope_ids, text, pool) if mode == "bm25"
                     else self.dense(scope_ids, text, pool, strict=True))
            ranked = [(mid, i) for i, (mid, _) in enumerate(found, 1) if mid not in exclude][:k]
            messages = {m.id: m for m in self.store.messages([mid for mid, _ in ranked])}
            return [SearchHit(messages[mid], 1.0 / (RRF_K + r), r if mode == "bm25" else None,
                              r if mode == "dense" else None, mode) for mid, r in ranked if mid in messages]
        if question is not None:
            asked_at = question.asked_at
        return self._hybrid(scope_ids, text, k, pool, exclude, asked_at, p, question)

    def _hybrid(self, scope_ids: list[int], text: str, k: int, pool: int, exclude: set[int] | frozenset[int],
                asked_at: float | None, p: FusionParams, question: Question | None = None) -> list[SearchHit]:
        """BM25 and vectors fused per query (memory/fusion.py), lifted by the question's chat signals."""
        # The question is embedded and compared with every vector on a worker thread while SQLite runs
        # BM25 here: both release the GIL, so on two cores the dense half costs little extra time.
        dense = None
        if self.store.embedder is not None and text.strip() and scope_ids:
            mirrors = self.vectors.mirrors(scope_ids)  # reads the store before BM25 takes it
            dense = _dense_worker().submit(self._dense_scores, dense_query(text) if p.rewrite else text, mirrors, p)
        lexical = self.bm25(scope_ids, text, pool, HYBRID_BM25_MAX_DF, author_weight=p.author_column)
        scores = None
        if dense is not None:
            scores, failure = dense.result()
            if failure is not None:  # hybrid search goes on by words alone if the embedder fails
                self._degrade(failure)
        semantic = scores.top(pool) if scores is not None else []
        cand = [mid for mid, _ in lexical]
        in_cand = set(cand)
        cand += [mid for mid, _ in semantic if mid not in in_cand]
        in_cand = set(cand)
        if not cand:
            return []
        n_cand = len(cand)
        rows = scores.rows(cand) if scores is not None else np.full(n_cand, -1)
        if scores is not None and (p.parent_words or p.parent_meaning or p.reply_words or p.reply_meaning):
            near = np.concatenate([scores.parent[rows[rows >= 0]], scores.reply[rows[rows >= 0]]])
            extra = [i for i in dict.fromkeys(scores.ids[near[near >= 0]].tolist()) if i not in in_cand]
            cand += extra
            rows = np.concatenate([rows, scores.rows(extra)])
        view = _Candidates(cand, rows, scores)
        lex = np.zeros(len(cand))
        lex[:len(lexical)] = [-s for _, s in lexical]  # FTS5 bm25() is lower-is-better
        lex_in = np.arange(len(cand)) < len(lexical)
        sem_in = np.isin(np.asarray(cand, dtype=np.int64), np.fromiter((m for m, _ in semantic), dtype=np.int64,
                                                                         count=len(semantic)))
        boost, wanted = self._signals(scope_ids, text, asked_at, p, view, k, question)
        fused = fuse(lex, lex_in, view.sims, sem_in, p, boost, parent=view.parent, reply=view.reply, chars=view.chars)
        ids = np.asarray(cand[:n_cand], dtype=np.int64)
        order = [int(n) for n in np.lexsort((ids, -fused[:n_cand])) if cand[n] not in exclude]
        if wanted:
            order = spread_authors(order, [view.author(n) for n in order], wanted, k)
        order = order[:k]
        messages = {m.id: m for m in self.store.messages([cand[n] for n in order])}
        lex_rank = {mid: r for r, (mid, _) in enumerate(lexical, 1)}
        sem_rank = {mid: r for r, (mid, _) in enumerate(semantic, 1)}
        return [SearchHit(messages[cand[n]], float(fused[n]), lex_rank.get(cand[n]), sem_rank.get(cand[n]), "hybrid")
                for n in order if cand[n] in messages]

    def _dense_scores(self, text: str, mirrors: list, p: FusionParams
                      ) -> tuple[DenseScores | None, EmbeddingError | None]:
        """The question's vector and its similarity to every mirrored message (runs on the dense worker)."""
        try:
            vec = self.query_vector(text)
        except EmbeddingError as exc:
            return None, exc
        return self.vectors.scores_in(mirrors, vec, context=p.context, short_chars=p.short_chars), None

    def _signals(self, scope_ids: list[int], text: str, asked_at: float | None, p: FusionParams,
                 view: _Candidates, k: int, question: Question | None = None
                 ) -> tuple[np.ndarray | None, list[str]]:
        """Boosts for messages by people the question names or inside periods it pins; who to spread over."""
        if not (p.author or p.dates or p.each):
            return None, []
        people = [(person.person_id, person.names()) for sid in scope_ids for person in self.store.roster(sid)
                  if not person.is_bot]
        sig = of_question(question) if question is not None else \
            read_question(text, people, asked_at if asked_at is not None else time.time())
        view.fill_missing(self.store)
        boost = np.zeros(len(view.ids))
        if p.author and sig.authors:
            boost += p.author * np.isin(view.authors, sig.authors)
        for start, end in sig.periods if p.dates else []:
            boost += p.dates * ((view.ts >= start) & (view.ts < end))
        wanted = [pid for pid, _ in people] if p.each and sig.each and len(people) <= k else []
        return boost, wanted

    def phrase(self, scope_ids: list[int], phrase: str, limit: int = 20) -> list[StoredMessage]:
        """Messages containing ``phrase`` exactly (case-insensitive), oldest first: "who said ..."."""
        query = ftsquery.match_phrase(phrase)
        if query is None or not scope_ids:
            return []
        with self.store.read() as conn, snapshot(conn):
            tables = [scopeindex.MESSAGES.table(s) for s in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES,
                                                                                         scope_ids)]
            arms = " UNION ALL ".join(f"SELECT rowid AS id FROM {t} WHERE {t} MATCH ?" for t in tables)
            rows = conn.execute(f"SELECT id FROM ({arms}) ORDER BY id LIMIT 2000",
                                [f"text: ({query})"] * len(tables)).fetchall() if tables else []
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


class _Candidates:
    """Hybrid search's candidates (and their neighbours) as arrays read from the vector mirror."""

    def __init__(self, ids: list[int], rows: np.ndarray, scores: DenseScores | None) -> None:
        self.ids = ids
        n = len(ids)
        have = rows >= 0
        safe = np.maximum(rows, 0)
        if scores is None or len(scores.ids) == 0:
            have = np.zeros(n, dtype=bool)
        self.missing = [i for i in range(n) if not have[i]]
        pick = (lambda a, fill: np.where(have, a[safe], fill)) if have.any() else (lambda a, fill: np.full(n, fill))
        self.sims = pick(scores.sims, -np.inf) if scores is not None else np.full(n, -np.inf)
        self.chars = pick(scores.chars, 0) if scores is not None else np.zeros(n)
        self.ts = pick(scores.ts, np.nan).astype(float) if scores is not None else np.full(n, np.nan)
        self.authors = pick(scores.authors, "") if scores is not None else np.full(n, "", dtype=object)
        self.parent = np.full(n, -1, dtype=np.int64)
        self.reply = np.full(n, -1, dtype=np.int64)
        if scores is not None and have.any():
            by_row = np.argsort(rows, kind="stable")  # candidate position of a mirror row, by binary search
            sorted_rows = rows[by_row]
            for out, links in ((self.parent, scores.parent), (self.reply, scores.reply)):
                target = np.where(have, links[safe], -1)
                pos = np.clip(np.searchsorted(sorted_rows, target), 0, n - 1)
                found = (target >= 0) & (sorted_rows[pos] == target)
                out[found] = by_row[pos[found]]

    def fill_missing(self, store: Store) -> None:
        """Authors and times of candidates without a vector (embedding backlog), from the store."""
        if not self.missing:
            return
        found = {m.id: m for m in store.messages([self.ids[i] for i in self.missing])}
        self.authors = self.authors.astype(object)
        for i in self.missing:
            m = found.get(self.ids[i])
            if m is not None:
                self.authors[i], self.ts[i], self.chars[i] = m.author_id, m.ts, len(m.text)
        self.missing = []

    def author(self, n: int) -> str:
        return str(self.authors[n])
