"""Vector KNN over a scope's messages.

The durable index is the sqlite-vec ``message_vec`` table, written in the same
transaction as each message. Searching 100k vectors in one partition with vec0
costs ~50 ms on two cores, so queries are served from an in-memory float32 mirror
of the scope, kept fresh cheaply: appended rows are loaded incrementally, and any
edit or deletion (``scope_state.vec_gen``) reloads the scope. New vectors, whether of
fresh messages or of the embedding backlog, arrive in ``messages.vec_seq`` order. ``use_mirror=False``
queries vec0 directly.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .store import Store


@dataclass
class _Mirror:
    gen: int
    max_seq: int
    ids: np.ndarray
    matrix: np.ndarray
    authors: np.ndarray


class VectorIndex:
    """Cosine KNN restricted, in SQL, to the given scopes."""

    def __init__(self, store: Store, *, use_mirror: bool = True) -> None:
        self.store = store
        self.use_mirror = use_mirror
        self._mirrors: dict[int, _Mirror] = {}
        self._lock = threading.Lock()

    def knn(self, scope_ids: list[int], query: np.ndarray, k: int, *,
            author_id: str | None = None) -> list[tuple[int, float]]:
        """(message id, cosine distance) nearest first, across ``scope_ids`` (optionally one author's)."""
        if self.store.vector_dim is None or k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        found: list[tuple[int, float]] = []
        for sid in scope_ids:
            if author_id is not None or self.use_mirror:
                found.extend(self._knn_mirror(sid, q, k, author_id))
            else:
                found.extend(self._knn_vec0(sid, q, k))
        found.sort(key=lambda x: x[1])
        return found[:k]

    def best_per_author(self, scope_ids: list[int], query: np.ndarray,
                        author_ids: list[str]) -> dict[str, tuple[int, float]]:
        """Each author's single nearest message (one matrix product for all of them)."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        best: dict[str, tuple[int, float]] = {}
        wanted = set(author_ids)
        for sid in scope_ids:
            mirror = self._fresh(sid)
            if mirror is None or len(mirror.ids) == 0:
                continue
            sims = mirror.matrix @ q
            top = min(2000, len(sims))
            head = np.argpartition(-sims, top - 1)[:top]
            for i in head[np.argsort(-sims[head])]:
                a = mirror.authors[i]
                if a in wanted and (a not in best or 1.0 - float(sims[i]) < best[a][1]):
                    best[a] = (int(mirror.ids[i]), 1.0 - float(sims[i]))
            for a in wanted - set(best):  # quiet people: a masked argmax each
                masked = np.where(mirror.authors == a, sims, -np.inf)
                i = int(np.argmax(masked))
                if np.isfinite(masked[i]):
                    best[a] = (int(mirror.ids[i]), 1.0 - float(sims[i]))
        return best

    def _knn_vec0(self, scope_id: int, q: np.ndarray, k: int) -> list[tuple[int, float]]:
        with self.store.read() as conn:
            rows = conn.execute("SELECT rowid, distance FROM message_vec WHERE embedding MATCH ? AND k = ? "
                                "AND scope_id = ?", (q.tobytes(), int(k), int(scope_id))).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _knn_mirror(self, scope_id: int, q: np.ndarray, k: int,
                    author_id: str | None = None) -> list[tuple[int, float]]:
        mirror = self._fresh(scope_id)
        if mirror is None or len(mirror.ids) == 0:
            return []
        sims = mirror.matrix @ q
        if author_id is not None:
            sims = np.where(mirror.authors == author_id, sims, -np.inf)
            k = min(k, int(np.isfinite(sims).sum()))
            if k <= 0:
                return []
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(mirror.ids[i]), float(1.0 - sims[i])) for i in top]

    def _fresh(self, scope_id: int) -> _Mirror | None:
        with self._lock:
            with self.store.read() as conn:
                row = conn.execute("SELECT vec_gen FROM scope_state WHERE scope_id = ?", (scope_id,)).fetchone()
                if row is None:
                    return None
                gen = row[0]
                mirror = self._mirrors.get(scope_id)
                if mirror is None or mirror.gen != gen:
                    mirror = _Mirror(gen, 0, np.zeros(0, dtype=np.int64),
                                     np.zeros((0, self.store.vector_dim or 0), dtype=np.float32),
                                     np.zeros(0, dtype=object))
                if mirror.max_seq == 0 and len(mirror.ids) == 0:  # first load: everything with a vector
                    new = conn.execute("SELECT id, author_id, vec_seq FROM messages WHERE scope_id = ? AND embedded = 1 "
                                       "ORDER BY id", (scope_id,)).fetchall()
                else:
                    new = conn.execute("SELECT id, author_id, vec_seq FROM messages WHERE scope_id = ? AND embedded = 1 "
                                       "AND vec_seq > ? ORDER BY vec_seq", (scope_id, mirror.max_seq)).fetchall()
                if new:
                    ids = np.fromiter((r[0] for r in new), dtype=np.int64, count=len(new))
                    authors = np.array([r[1] for r in new], dtype=object)
                    vecs = np.empty((len(ids), self.store.vector_dim), dtype=np.float32)
                    pos = {int(i): n for n, i in enumerate(ids)}
                    for start in range(0, len(ids), 900):
                        chunk = [int(x) for x in ids[start:start + 900]]
                        for rid, blob in conn.execute(
                                f"SELECT rowid, embedding FROM message_vec WHERE rowid IN ({','.join('?' * len(chunk))})",
                                chunk):
                            vecs[pos[int(rid)]] = np.frombuffer(blob, dtype=np.float32)
                    mirror = _Mirror(gen, max(mirror.max_seq, max(int(r[2]) for r in new)),
                                     np.concatenate([mirror.ids, ids]),
                                     np.concatenate([mirror.matrix, vecs]) if len(mirror.ids) else vecs,
                                     np.concatenate([mirror.authors, authors]))
                self._mirrors[scope_id] = mirror
            return mirror
