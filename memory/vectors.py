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
from dataclasses import dataclass, field

import numpy as np

from .db import chunked, marks
from .fusion import with_context
from .store import Store

# What the mirror loads per message, named so the loaded rows are read as columns by name.
_LOAD_NAMES = ("id", "author_id", "vec_seq", "msg_id", "reply_to", "session", "turn", "chars", "ts")
_LOAD_SQL = "id, author_id, vec_seq, msg_id, reply_to, session, turn, length(text) AS chars, ts"


@dataclass
class _Mirror:
    gen: int
    max_seq: int
    ids: np.ndarray
    matrix: np.ndarray
    authors: np.ndarray
    prev: np.ndarray  # row of each message's parent (reply-to, else previous turn), -1 if none loaded
    chars: np.ndarray  # text length, so short replies can borrow their parent's meaning
    reply: np.ndarray  # row of each message's first reply, -1 if none loaded
    ts: np.ndarray
    rows_by_msg: dict = field(default_factory=dict)  # (scope-local) msg_id -> row
    rows_by_turn: dict = field(default_factory=dict)  # (session, turn) -> row
    # argsort of ids, for looking rows up by message id (every mirror is built with it)
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def rows_of(ids: np.ndarray, order: np.ndarray, wanted) -> np.ndarray:
    """Row of each wanted message id in ``ids`` (``order`` sorts ``ids``), -1 where it has none."""
    if len(ids) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    want = np.asarray(wanted, dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, want, sorter=order), 0, len(ids) - 1)
    rows = order[pos]
    return np.where(ids[rows] == want, rows, -1)


@dataclass
class DenseScores:
    """Similarity of the question to every message of the scopes searched (context-lifted)."""

    ids: np.ndarray
    sims: np.ndarray
    authors: np.ndarray
    _order: np.ndarray
    parent: np.ndarray  # rows (into these arrays) of each message's parent / first reply, -1 if none
    reply: np.ndarray
    chars: np.ndarray
    ts: np.ndarray

    def rows(self, ids: list[int]) -> np.ndarray:
        """Row of each message id, -1 for ids without a vector."""
        return rows_of(self.ids, self._order, ids)

    def at(self, ids: list[int]) -> np.ndarray:
        """Similarities of the given message ids (-inf for those without a vector)."""
        rows = self.rows(ids)
        return np.where(rows >= 0, self.sims[np.maximum(rows, 0)] if len(self.ids) else -np.inf, -np.inf)

    def top(self, k: int) -> list[tuple[int, float]]:
        k = min(k, len(self.sims))
        if k <= 0:
            return []
        head = np.argpartition(-self.sims, k - 1)[:k]
        head = head[np.argsort(-self.sims[head], kind="stable")]
        return [(int(self.ids[i]), float(self.sims[i])) for i in head]


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

    def scores(self, scope_ids: list[int], query: np.ndarray, *, context: float = 0.0,
               short_chars: int = 0) -> DenseScores:
        """The question's similarity to every message of ``scope_ids`` (one matrix product per scope).

        With ``context`` a short message's similarity is lifted by its parent's (memory/fusion.py).
        """
        return self.scores_in(self.mirrors(scope_ids), query, context=context, short_chars=short_chars)

    def mirrors(self, scope_ids: list[int]) -> list[_Mirror]:
        """The scopes' in-memory mirrors, brought up to date (the only step that reads the store).

        A mirror is never changed in place, only replaced, so one taken here can be searched by
        another thread while the store serves other reads.
        """
        if self.store.vector_dim is None:
            return []
        return [m for m in (self._fresh(sid) for sid in scope_ids) if m is not None and len(m.ids)]

    def scores_in(self, mirrors: list[_Mirror], query: np.ndarray, *, context: float = 0.0,
                  short_chars: int = 0) -> DenseScores:
        """`scores` over mirrors already taken with `mirrors` (numpy only: no store access)."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        parts = []
        for mirror in mirrors:
            sims = with_context(mirror.matrix @ q, mirror.prev, mirror.chars, context, short_chars)
            parts.append((mirror.ids, sims, mirror.authors, mirror.order, mirror.prev, mirror.reply, mirror.chars,
                          mirror.ts))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return DenseScores(empty, np.zeros(0, dtype=np.float32), np.zeros(0, dtype=object), empty, empty, empty,
                               empty, np.zeros(0))
        if len(parts) == 1:
            return DenseScores(*parts[0])
        ids = np.concatenate([p[0] for p in parts])
        offsets = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
        shift = [lambda a, o=o: np.where(a >= 0, a + o, -1) for o in offsets]
        return DenseScores(ids, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                           np.argsort(ids, kind="stable"), np.concatenate([f(p[4]) for f, p in zip(shift, parts)]),
                           np.concatenate([f(p[5]) for f, p in zip(shift, parts)]),
                           np.concatenate([p[6] for p in parts]), np.concatenate([p[7] for p in parts]))

    def similarities(self, scope_ids: list[int], query: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Cosine of ``query`` to just these messages' vectors (a gather, not a product over the scope)."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        want = np.asarray(sorted(set(ids)), dtype=np.int64)
        out: dict[int, float] = {}
        for sid in scope_ids:
            mirror = self._fresh(sid) if self.store.vector_dim is not None else None
            if mirror is None or len(mirror.ids) == 0:
                continue
            rows = rows_of(mirror.ids, mirror.order, want)
            found = rows >= 0
            for mid, sim in zip(want[found], mirror.matrix[rows[found]] @ q):
                out[int(mid)] = float(sim)
        return out

    def mirror(self, scope_id: int) -> _Mirror | None:
        """The scope's in-memory vectors, fresh (ids, matrix, authors, parent rows, lengths)."""
        return self._fresh(scope_id)

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
                                     np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64),
                                     np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), np.zeros(0), {}, {},
                                     np.zeros(0, dtype=np.int64))
                if mirror.max_seq == 0 and len(mirror.ids) == 0:  # first load: everything with a vector
                    new = conn.execute(f"SELECT {_LOAD_SQL} FROM messages WHERE scope_id = ? AND embedded = 1 "
                                       "ORDER BY id", (scope_id,)).fetchall()
                else:
                    new = conn.execute(f"SELECT {_LOAD_SQL} FROM messages WHERE scope_id = ? AND embedded = 1 "
                                       "AND vec_seq > ? ORDER BY vec_seq", (scope_id, mirror.max_seq)).fetchall()
                if new:
                    col = dict(zip(_LOAD_NAMES, zip(*new)))
                    ids = np.fromiter(col["id"], dtype=np.int64, count=len(new))
                    authors = np.array(col["author_id"], dtype=object)
                    vecs = np.empty((len(ids), self.store.vector_dim or 0), dtype=np.float32)
                    pos = {int(i): n for n, i in enumerate(ids)}
                    for chunk in chunked(ids.tolist()):
                        for rid, blob in conn.execute(
                                f"SELECT rowid, embedding FROM message_vec WHERE rowid IN ({marks(chunk)})", chunk):
                            vecs[pos[int(rid)]] = np.frombuffer(blob, dtype=np.float32)
                    prev, chars = _parents(mirror, col)
                    reply = np.concatenate([mirror.reply, np.full(len(new), -1, dtype=np.int64)])
                    for n, parent in enumerate(prev):  # in load order: the first reply wins
                        if parent >= 0 and reply[parent] < 0:
                            reply[parent] = len(mirror.ids) + n
                    all_ids = np.concatenate([mirror.ids, ids])
                    mirror = _Mirror(gen, max(mirror.max_seq, max(int(s) for s in col["vec_seq"])), all_ids,
                                     np.concatenate([mirror.matrix, vecs]) if len(mirror.ids) else vecs,
                                     np.concatenate([mirror.authors, authors]), np.concatenate([mirror.prev, prev]),
                                     np.concatenate([mirror.chars, chars]), reply,
                                     np.concatenate([mirror.ts, np.array([float(t) for t in col["ts"]])]),
                                     mirror.rows_by_msg,
                                     mirror.rows_by_turn,
                                     np.argsort(all_ids, kind="stable"))
                self._mirrors[scope_id] = mirror
            return mirror


def _parents(mirror: _Mirror, col: dict[str, tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Parent rows and text lengths of newly loaded messages (``col``: their columns by name);
    updates the mirror's lookup tables."""
    base = len(mirror.ids)
    n_new = len(col["id"])
    prev = np.full(n_new, -1, dtype=np.int64)
    for n, (msg_id, reply_to, session, turn) in enumerate(zip(col["msg_id"], col["reply_to"], col["session"],
                                                               col["turn"])):
        row = base + n
        mirror.rows_by_msg[msg_id] = row
        mirror.rows_by_turn[(session, turn)] = row
        parent = mirror.rows_by_msg.get(reply_to) if reply_to else None
        if parent is None:
            parent = mirror.rows_by_turn.get((session, turn - 1))
        prev[n] = -1 if parent is None or parent == row else parent
    chars = np.fromiter((int(c or 0) for c in col["chars"]), dtype=np.int32, count=n_new)
    return prev, chars
