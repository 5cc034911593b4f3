"""The store's plumbing: the connection, the one write transaction, meta and the vector table.

Every other part of ``Store`` (scopes, ingest, backlog, edits, reads, roster) builds on
``StoreBase.write`` and ``StoreBase.read``, so there is one write path into the file.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from .. import migrate
from ..db import BUSY_TIMEOUT_MS, Connection, DatabaseError, connect
from ..embeddings.base import Embedder
from ..errors import EmbeddingError, StoreError
from ..models import ScopeKey

DEFAULT_IDLE_GAP_S = 30 * 60


def explain_db_error(path: str, exc: BaseException, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> str:
    """A sentence naming what went wrong with the store file and what to do about it."""
    text = str(exc)
    low = text.casefold()
    if "full" in low:
        return (f"the disk holding the store {path} is full ({text}); nothing from this write was stored. "
                "Free space on that disk (or move [store].path to a bigger one) and retry")
    if "locked" in low or "busy" in low:
        return (f"the store {path} is locked by another process ({text}) for longer than the "
                f"{busy_timeout_ms / 1000:g} s busy timeout; nothing from this write was stored. Stop the other "
                "writer (a second `chorus run`, a backup or a sqlite3 shell holding a transaction) and retry")
    if "readonly" in low or "read-only" in low:
        return f"the store {path} is read-only ({text}); give this user write access to the file and its folder"
    if "malformed" in low or "not a database" in low:
        return (f"the store {path} is damaged ({text}); stop Chorus and restore it from a backup "
                "(`PRAGMA integrity_check` shows what is wrong)")
    if "i/o" in low:
        return f"the disk holding the store {path} failed a read or write ({text}); check the disk and free space"
    return f"the store {path} refused a write ({text})"


def same_model(info: dict, embedder: Embedder) -> bool:
    """Whether the vectors recorded in the store's meta (``info``) come from ``embedder``."""
    return info["model"] == embedder.name and int(info["dim"]) == int(embedder.dim)


class StoreBase:
    """One SQLite file in WAL mode, written through one lock."""

    closed = False

    def __init__(self, path: str | Path, *, embedder: Embedder | None = None,
                 idle_gap_s: float = DEFAULT_IDLE_GAP_S, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = str(path)
        self.embedder = embedder
        self.idle_gap_s = float(idle_gap_s)
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.conn: Connection = connect(self.path, busy_timeout_ms=self.busy_timeout_ms)
        self._lock = threading.RLock()
        self._embed_lock = threading.Lock()  # one backlog embedder at a time: never embed a row twice
        self._scope_cache: dict[ScopeKey, int] = {}
        # Run inside the same transaction when messages change (Track 2 registers here).
        self.change_hooks: list[Callable[[Connection, list[int], str], None]] = []
        # Run inside the forget-me transaction for each (scope, person) forgotten.
        self.forget_person_hooks: list[Callable[[Connection, int, str], None]] = []
        try:
            migrate.migrate(self.conn)
        except BaseException:
            self.conn.close()
            raise
        self.vector_dim: int | None = None
        if embedder is not None:
            self._ensure_vector_table(embedder)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction; rolls back on any error so nothing is stored half-way."""
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except DatabaseError as exc:
                raise StoreError("cannot start a write: " + explain_db_error(self.path, exc, self.busy_timeout_ms)) \
                    from exc
            try:
                yield self.conn
            except BaseException as exc:
                # SQLite may already have rolled back (e.g. SQLITE_FULL): never mask the cause.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                if isinstance(exc, DatabaseError):
                    raise StoreError(explain_db_error(self.path, exc, self.busy_timeout_ms)) from exc
                raise
            else:
                try:
                    self.conn.execute("COMMIT")
                except DatabaseError as exc:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise StoreError("could not commit: " + explain_db_error(self.path, exc, self.busy_timeout_ms)) \
                        from exc

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """The connection under the store lock, for reads (no transaction)."""
        with self._lock:
            yield self.conn

    def meta_get(self, key: str) -> str | None:
        with self.read() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    # ------------------------------------------------------------------ the vector table
    def _ensure_vector_table(self, embedder: Embedder) -> None:
        dim = int(embedder.dim)
        with self.write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedding'").fetchone()
            if row:
                info = json.loads(row[0])
                if not same_model(info, embedder):
                    raise EmbeddingError(
                        f"this store was indexed with {info['model']} ({info['dim']} dims) but the configured "
                        f"embedder is {embedder.name} ({dim} dims); configure the original model or run "
                        "`chorus reindex` to re-embed everything")
            else:
                conn.execute("INSERT INTO meta(key, value) VALUES ('embedding', ?)",
                             (json.dumps({"model": embedder.name, "dim": dim}),))
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS message_vec USING vec0("
                f"scope_id integer partition key, embedding float[{dim}] distance_metric=cosine)")
        self.vector_dim = dim

    def use_embedder(self, embedder: Embedder) -> bool:
        """Attach ``embedder`` to a store opened without one; False if the store holds another model's vectors."""
        info = self.meta_get("embedding")
        if info and not same_model(json.loads(info), embedder):
            return False
        self.embedder = embedder
        self._ensure_vector_table(embedder)
        return True

    @staticmethod
    def _take_vec_seq(conn: Connection, n: int) -> int:
        """Reserve ``n`` vector sequence numbers; returns the first (inside the write transaction)."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'vec_seq'").fetchone()
        first = int(row[0]) + 1 if row else 1
        conn.execute("INSERT INTO meta(key, value) VALUES ('vec_seq', ?) ON CONFLICT(key) DO UPDATE SET "
                     "value = excluded.value", (str(first + n - 1),))
        return first

    @staticmethod
    def _bump_vec_gen(conn: Connection, scope_ids: Sequence[int]) -> None:
        """Tell vector mirrors of these scopes to reload (a vector was removed or replaced)."""
        conn.executemany("UPDATE scope_state SET vec_gen = vec_gen + 1 WHERE scope_id = ?", [(s,) for s in scope_ids])

    def _has_vec(self, conn: Connection) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'message_vec'").fetchone() is not None

    def _after_change(self, conn: Connection, ids: list[int], reason: str) -> None:
        for hook in list(self.change_hooks):
            hook(conn, ids, reason)
