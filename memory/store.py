"""Track 1: the one write path into the SQLite store.

Adapters, imports and scheduled jobs all write through ``Store``. Every write runs
in one ``BEGIN IMMEDIATE`` transaction under one lock, so a failed step leaves the
file as it was. Messages are stored whole; their FTS5 row (and the vector, when the
embedder runs inline) is written by the store in the same transaction. Messages
addressed to the bot are stored but never indexed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from . import migrate
from .db import BUSY_TIMEOUT_MS, Connection, DatabaseError, connect
from .embeddings.base import Embedder, prefix
from .errors import EmbeddingError, InputError, StoreError
from .models import Message, ScopeKey, StoredMessage

log = logging.getLogger(__name__)

DEFAULT_IDLE_GAP_S = 30 * 60
MAX_TEXT_CHARS = 1_000_000

MESSAGE_COLUMNS = (
    "m.id, m.scope_id, s.platform, s.workspace, s.channel, m.thread, m.msg_id, m.author_id, "
    "m.author_name, m.text, m.ts, m.session, m.turn, m.reply_to, m.edited_at IS NOT NULL, m.bot_traffic")


def row_to_message(row: Sequence) -> StoredMessage:
    return StoredMessage(
        id=row[0], scope_id=row[1], platform=row[2], workspace=row[3], channel=row[4], thread=row[5],
        msg_id=row[6], author_id=row[7], author_name=row[8], text=row[9], ts=row[10], session=row[11],
        turn=row[12], reply_to=row[13], edited=bool(row[14]), to_bot=bool(row[15]))


def embed_text(author_name: str, text: str) -> str:
    """What gets embedded for a message: who said it and what (names matter to questions)."""
    return f"{author_name}: {text}"


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


def text_hash(text: str) -> str:
    return hashlib.blake2b(prefix(text).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass
class IngestResult:
    inserted: int = 0
    duplicates: int = 0
    skipped: int = 0
    embedded: int = 0
    reused_vectors: int = 0

    def add(self, other: "IngestResult") -> None:
        for name in ("inserted", "duplicates", "skipped", "embedded", "reused_vectors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Person:
    scope_id: int
    person_id: str
    display_name: str
    aliases: list[str]
    n_messages: int
    first_ts: float
    last_ts: float
    is_bot: bool = False

    def names(self) -> list[str]:
        return [self.display_name, *self.aliases]


@dataclass
class Scope:
    id: int
    platform: str
    workspace: str
    channel: str
    name: str
    is_dm: bool
    opted_out: bool

    @property
    def key(self) -> ScopeKey:
        return ScopeKey(self.platform, self.workspace, self.channel)

    def label(self) -> str:
        shown = self.name or self.channel
        return f"{self.platform}:{self.workspace + '/' if self.workspace else ''}{shown}"



def _same_model(info: dict, embedder: Embedder) -> bool:
    """Whether the vectors recorded in the store's meta (``info``) come from ``embedder``."""
    return info["model"] == embedder.name and int(info["dim"]) == int(embedder.dim)

class Store:
    """The Chorus store: one SQLite file in WAL mode, written through one lock."""

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

    # ------------------------------------------------------------------ plumbing
    closed = False

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.conn.close()

    def __enter__(self) -> "Store":
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
        with self._lock:
            yield self.conn

    def meta_get(self, key: str) -> str | None:
        with self.read() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _ensure_vector_table(self, embedder: Embedder) -> None:
        dim = int(embedder.dim)
        with self.write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedding'").fetchone()
            if row:
                info = json.loads(row[0])
                if not _same_model(info, embedder):
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

    def reset_vectors(self, embedder: Embedder) -> None:
        """Drop every message and record vector so a different embedding model can re-index the store.

        One transaction: the store either keeps the old vectors or has none (all messages
        back in the embedding backlog, which `embed_pending` works through).
        """
        with self.write() as conn:
            conn.execute("DROP TABLE IF EXISTS message_vec")
            conn.execute("DROP TABLE IF EXISTS record_vec")
            conn.execute("DELETE FROM meta WHERE key = 'embedding'")
            conn.execute("UPDATE messages SET embedded = 0 WHERE bot_traffic = 0")
            conn.execute("UPDATE scope_state SET vec_gen = vec_gen + 1")
        self.embedder = embedder
        self._ensure_vector_table(embedder)

    def use_embedder(self, embedder: Embedder) -> bool:
        """Attach ``embedder`` to a store opened without one; False if the store holds another model's vectors."""
        info = self.meta_get("embedding")
        if info and not _same_model(json.loads(info), embedder):
            return False
        self.embedder = embedder
        self._ensure_vector_table(embedder)
        return True

    # ------------------------------------------------------------------ scopes
    def scope_id(self, key: ScopeKey, *, create: bool = False, name: str = "", is_dm: bool = False) -> int | None:
        cached = self._scope_cache.get(key)
        if cached is not None:
            return cached
        with self.read() as conn:
            row = conn.execute("SELECT id FROM scopes WHERE platform=? AND workspace=? AND channel=?",
                               (key.platform, key.workspace, key.channel)).fetchone()
        if row is None and create:
            with self.write() as conn:
                row = self._create_scope(conn, key, name, is_dm)
        if row is None:
            return None
        self._scope_cache[key] = row[0]
        return row[0]

    def _create_scope(self, conn: Connection, key: ScopeKey, name: str, is_dm: bool) -> tuple[int]:
        conn.execute(
            "INSERT OR IGNORE INTO scopes(platform, workspace, channel, name, is_dm, created_at) "
            "VALUES (?,?,?,?,?,?)", (key.platform, key.workspace, key.channel, name, int(is_dm), time.time()))
        return conn.execute("SELECT id FROM scopes WHERE platform=? AND workspace=? AND channel=?",
                            (key.platform, key.workspace, key.channel)).fetchone()

    def scopes(self) -> list[Scope]:
        with self.read() as conn:
            rows = conn.execute("SELECT id, platform, workspace, channel, name, is_dm, opted_out FROM scopes "
                                "ORDER BY id").fetchall()
        return [Scope(r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6])) for r in rows]

    def get_scope(self, scope_id: int) -> Scope | None:
        return next((s for s in self.scopes() if s.id == scope_id), None)

    # ------------------------------------------------------------------ ingest
    def ingest(self, messages: Iterable[Message], *, embed: bool = True, batch_size: int = 512,
               progress: Callable[[int], None] | None = None) -> IngestResult:
        """Append messages to Track 1. The same platform message is stored once.

        With ``embed`` the vectors are computed before the transaction and written in
        it; without, messages wait in the embedding backlog (``embed_pending``).
        """
        total = IngestResult()
        batch: list[Message] = []
        for msg in messages:
            batch.append(msg)
            if len(batch) >= batch_size:
                total.add(self._ingest_batch(batch, embed))
                if progress:
                    progress(len(batch))
                batch = []
        if batch:
            total.add(self._ingest_batch(batch, embed))
            if progress:
                progress(len(batch))
        return total

    def ingest_one(self, message: Message, *, embed: bool = True) -> IngestResult:
        return self._ingest_batch([message], embed)

    def _ingest_batch(self, batch: list[Message], embed: bool) -> IngestResult:
        result = IngestResult()
        for msg in batch:
            if len(msg.text) > MAX_TEXT_CHARS:
                raise InputError(f"message {msg.msg_id} is {len(msg.text)} characters; the limit is {MAX_TEXT_CHARS}")
        # Deduplicate inside the batch first (a retried event can arrive twice at once),
        # grouping by scope as we go.
        grouped: dict[tuple[str, str, str], dict[str, Message]] = {}
        for msg in batch:
            group = grouped.setdefault((msg.platform, msg.workspace, msg.channel), {})
            if msg.msg_id in group:
                result.duplicates += 1
            else:
                group[msg.msg_id] = msg
        with self.write() as conn:
            scope_ids: dict[ScopeKey, int] = {}
            fresh: list[tuple[int, Message]] = []
            by_scope: dict[int, list[Message]] = {}
            for triple, group in grouped.items():
                key = ScopeKey(*triple)
                sid = self._scope_cache.get(key)
                if sid is None:
                    first = next(iter(group.values()))
                    sid = self._create_scope(conn, key, first.channel_name, first.is_dm)[0]
                scope_ids[key] = sid
                by_scope.setdefault(sid, []).extend(group.values())
            opted_out = {r[0] for r in conn.execute(
                f"SELECT id FROM scopes WHERE opted_out = 1 AND id IN ({','.join('?' * len(by_scope))})",
                list(by_scope))}
            for sid, msgs in by_scope.items():
                if sid in opted_out:
                    result.skipped += len(msgs)
                    continue
                existing: set[str] = set()
                ids = [m.msg_id for m in msgs]
                for i in range(0, len(ids), 500):
                    chunk = ids[i:i + 500]
                    existing.update(r[0] for r in conn.execute(
                        f"SELECT msg_id FROM messages WHERE scope_id = ? AND msg_id IN ({','.join('?' * len(chunk))})",
                        [sid, *chunk]))
                for m in msgs:
                    if m.msg_id in existing:
                        result.duplicates += 1
                    else:
                        fresh.append((sid, m))
            if fresh:
                vectors = self._vectors_for(conn, [embed_text(m.author_name, m.text) for _, m in fresh],
                                            result) if embed else None
                self._append(conn, fresh, vectors)
                result.inserted += len(fresh)
        for key, sid in scope_ids.items():
            self._scope_cache[key] = sid
        return result

    def _vectors_for(self, conn: Connection | None, texts: list[str], result: IngestResult) -> np.ndarray | None:
        """Vectors for texts, reusing stored ones for identical text (never embed twice).

        With ``conn=None`` the model runs without holding the store lock (the backlog path).
        """
        if self.embedder is None:
            return None
        hashes = [text_hash(t) for t in texts]
        out = np.zeros((len(texts), self.vector_dim or self.embedder.dim), dtype=np.float32)
        known: dict[str, np.ndarray] = {}
        wanted = sorted(set(hashes))

        def lookup(conn: Connection) -> None:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                for h, blob in conn.execute(
                        "SELECT m.text_hash, v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
                        f"WHERE m.embedded = 1 AND m.text_hash IN ({','.join('?' * len(chunk))}) "
                        "GROUP BY m.text_hash", chunk):
                    known[h] = np.frombuffer(blob, dtype=np.float32)

        if conn is None:  # the caller holds no lock: look up under it briefly, run the model outside it
            with self.read() as c:
                lookup(c)
        else:
            lookup(conn)
        todo_idx: dict[str, list[int]] = {}
        for i, h in enumerate(hashes):
            if h in known:
                out[i] = known[h]
                result.reused_vectors += 1
            else:
                todo_idx.setdefault(h, []).append(i)
        if todo_idx:
            order = list(todo_idx)
            try:
                vecs = self.embedder.embed([prefix(texts[todo_idx[h][0]]) for h in order])
            except EmbeddingError:
                raise
            except Exception as exc:  # the model is third-party code: name it in the error
                raise EmbeddingError(f"embedding with {self.embedder.name} failed: {exc}") from exc
            for h, vec in zip(order, vecs):
                for i in todo_idx[h]:
                    out[i] = vec
            result.embedded += len(order)
            result.reused_vectors += sum(len(v) - 1 for v in todo_idx.values())
        return out

    def _append(self, conn: Connection, fresh: list[tuple[int, Message]], vectors: np.ndarray | None) -> None:
        fresh_sorted = sorted(range(len(fresh)), key=lambda i: (fresh[i][0], fresh[i][1].ts))
        states: dict[int, list] = {}
        people: dict[tuple[int, str], list] = {}
        rows = []
        for i in fresh_sorted:
            sid, m = fresh[i]
            st = states.get(sid)
            if st is None:
                r = conn.execute("SELECT last_ts, last_session, last_turn FROM scope_state WHERE scope_id=?",
                                 (sid,)).fetchone()
                st = states[sid] = list(r) if r else [None, 0, 0]
            session, turn = self._place(st, m)
            rows.append((sid, m.msg_id, m.thread, m.author_id, m.author_name, m.text, m.ts, m.reply_to,
                         session, turn, text_hash(embed_text(m.author_name, m.text)),
                         2 if m.to_bot else 1 if vectors is not None else 0, i, int(m.to_bot)))
            if m.to_bot:  # asking the bot does not make someone a member whose views are remembered
                continue
            p = people.get((sid, m.author_id))
            if p is None:
                people[(sid, m.author_id)] = [m.author_name, m.ts, m.ts, 1, int(m.is_bot)]
            else:
                p[0] = m.author_name if m.ts >= p[2] else p[0]
                p[1] = min(p[1], m.ts)
                p[2] = max(p[2], m.ts)
                p[3] += 1
        base = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        seq = self._take_vec_seq(conn, len(rows)) if vectors is not None else 1
        conn.executemany(
            "INSERT INTO messages(id, scope_id, msg_id, thread, author_id, author_name, text, ts, reply_to, "
            "session, turn, text_hash, embedded, vec_seq, bot_traffic) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(base + n, *r[:12], seq + n - 1 if vectors is not None and not r[13] else 0, r[13])
             for n, r in enumerate(rows, 1)])
        # Bot traffic (questions to Chorus) is stored for the record but indexed nowhere: never evidence.
        conn.executemany("INSERT INTO messages_fts(rowid, text, author_name, scope_tag) VALUES (?,?,?,?)",
                         [(base + n, r[5], r[4], f"s{r[0]}") for n, r in enumerate(rows, 1) if not r[13]])
        if vectors is not None:
            conn.executemany("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                             [(base + n, r[0], vectors[r[12]].tobytes()) for n, r in enumerate(rows, 1)
                              if not r[13]])
        conn.executemany(
            "INSERT INTO scope_state(scope_id, last_ts, last_session, last_turn) VALUES (?,?,?,?) "
            "ON CONFLICT(scope_id) DO UPDATE SET last_ts=excluded.last_ts, last_session=excluded.last_session, "
            "last_turn=excluded.last_turn", [(sid, st[0], st[1], st[2]) for sid, st in states.items()])
        conn.executemany(
            "INSERT INTO people(scope_id, person_id, display_name, first_ts, last_ts, n_messages, is_bot) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(scope_id, person_id) DO UPDATE SET "
            "display_name = CASE WHEN excluded.last_ts >= people.last_ts THEN excluded.display_name "
            "ELSE people.display_name END, first_ts = min(people.first_ts, excluded.first_ts), "
            "last_ts = max(people.last_ts, excluded.last_ts), n_messages = people.n_messages + excluded.n_messages",
            [(sid, pid, v[0], v[1], v[2], v[3], v[4]) for (sid, pid), v in people.items()])

    def _place(self, st: list, m: Message) -> tuple[int, int]:
        """Session and turn for a message appended to a scope whose cursor is ``st``."""
        last_ts, last_session, last_turn = st
        if m.session_hint is not None:
            session = int(m.session_hint)
            turn = last_turn + 1 if session == last_session else 1
        elif last_ts is None:
            session, turn = 1, 1
        elif m.ts - last_ts > self.idle_gap_s:
            session, turn = last_session + 1, 1
        else:
            session, turn = max(last_session, 1), last_turn + 1
        st[0] = m.ts if last_ts is None else max(last_ts, m.ts)
        st[1], st[2] = session, turn
        return session, turn

    def embed_pending(self, *, batch_size: int = 256, progress: Callable[[int], None] | None = None,
                      limit: int | None = None, scope_ids: Sequence[int] | None = None,
                      newest_first: bool = False) -> int:
        """Embed messages imported without vectors (the backlog); returns how many were done.

        ``scope_ids`` and ``newest_first`` pick what a question needs first: its scope's latest messages.
        """
        if self.embedder is None:
            raise EmbeddingError("no embedding model is configured, so the backlog cannot be embedded")
        done = 0
        while limit is None or done < limit:
            with self._embed_lock:
                n = self._embed_batch(batch_size if limit is None else min(batch_size, limit - done), scope_ids,
                                      newest_first)
            if n == 0:
                break
            done += n
            if progress:
                progress(n)
        return done

    def _embed_batch(self, batch_size: int, scope_ids: Sequence[int] | None = None, newest_first: bool = False) -> int:
        where, args = "", []
        if scope_ids is not None:
            where, args = f" AND scope_id IN ({','.join('?' * len(scope_ids))})", [int(s) for s in scope_ids]
        order = "DESC" if newest_first else "ASC"
        with self.read() as conn:
            rows = conn.execute("SELECT id, scope_id, author_name || ': ' || text FROM messages "
                                f"WHERE embedded = 0 AND deleted = 0{where} ORDER BY id {order} LIMIT ?",
                                (*args, batch_size)).fetchall()
        if rows:
            result = IngestResult()
            # The model runs outside the write lock, so live messages are never stuck behind a batch.
            vecs = self._vectors_for(None, [r[2] for r in rows], result)
            with self.write() as conn:
                # A message edited or deleted meanwhile keeps its new state (it is picked up again if needed).
                marks = ",".join("?" * len(rows))
                current = dict(conn.execute(
                    f"SELECT id, author_name || ': ' || text FROM messages WHERE embedded = 0 AND deleted = 0 "
                    f"AND id IN ({marks})", [r[0] for r in rows]).fetchall())
                fresh = [(mid, sid, vec) for (mid, sid, text), vec in zip(rows, vecs) if current.get(mid) == text]
                for mid, sid, vec in fresh:
                    conn.execute("DELETE FROM message_vec WHERE rowid = ?", (mid,))
                    conn.execute("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                                 (mid, sid, vec.tobytes()))
                seq = self._take_vec_seq(conn, len(fresh))
                conn.executemany("UPDATE messages SET embedded = 1, vec_seq = ? WHERE id = ?",
                                 [(seq + n, f[0]) for n, f in enumerate(fresh)])
        return len(rows)

    def pending_embeddings(self) -> int:
        with self.read() as conn:
            return conn.execute("SELECT count(*) FROM messages WHERE embedded = 0 AND deleted = 0").fetchone()[0]

    # ------------------------------------------------------------------ edit / delete
    def find(self, key: ScopeKey, msg_id: str) -> StoredMessage | None:
        sid = self.scope_id(key)
        if sid is None:
            return None
        with self.read() as conn:
            row = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN scopes s ON s.id = m.scope_id "
                               "WHERE m.scope_id = ? AND m.msg_id = ? AND m.deleted = 0", (sid, msg_id)).fetchone()
        return row_to_message(row) if row else None

    def edit(self, key: ScopeKey, msg_id: str, new_text: str, *, edited_ts: float | None = None) -> bool:
        """Replace a message's text and re-index it; False when the message is unknown."""
        msg = Message(key.platform, key.workspace, key.channel, msg_id, "x", "x", new_text, edited_ts or time.time())
        if len(msg.text) > MAX_TEXT_CHARS:
            raise InputError(f"edited message is {len(msg.text)} characters; the limit is {MAX_TEXT_CHARS}")
        current = self.find(key, msg_id)
        if current is None:
            return False
        if current.text == msg.text:
            return True
        result = IngestResult()
        with self.write() as conn:
            composed = embed_text(current.author_name, msg.text)
            if current.to_bot:  # still bot traffic: the record changes, no index does
                conn.execute("UPDATE messages SET text = ?, text_hash = ?, edited_at = ? WHERE id = ?",
                             (msg.text, text_hash(composed), msg.ts, current.id))
                self._after_change(conn, [current.id], "edited")
                return True
            vecs = self._vectors_for(conn, [composed], result) if self.vector_dim else None
            conn.execute("UPDATE messages SET text = ?, text_hash = ?, edited_at = ?, embedded = ? WHERE id = ?",
                         (msg.text, text_hash(composed), msg.ts, 1 if vecs is not None else 0, current.id))
            conn.execute("DELETE FROM messages_fts WHERE rowid = ?", (current.id,))
            conn.execute("INSERT INTO messages_fts(rowid, text, author_name, scope_tag) VALUES (?,?,?,?)",
                         (current.id, msg.text, current.author_name, f"s{current.scope_id}"))
            if self.vector_dim:
                conn.execute("DELETE FROM message_vec WHERE rowid = ?", (current.id,))
            if vecs is not None:
                conn.execute("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                             (current.id, current.scope_id, vecs[0].tobytes()))
            self._bump_vec_gen(conn, [current.scope_id])
            self._after_change(conn, [current.id], "edited")
        return True

    def delete_messages(self, ids: Sequence[int], *, reason: str = "deleted") -> int:
        """Remove messages from Track 1 and its indexes (a tombstone keeps re-delivery out)."""
        if not ids:
            return 0
        with self.write() as conn:
            n = self._delete_in(conn, ids, reason)
        return n

    def _delete_in(self, conn: Connection, ids: Sequence[int], reason: str) -> int:
        n = 0
        for i in range(0, len(ids), 500):
            chunk = list(ids[i:i + 500])
            marks = ",".join("?" * len(chunk))
            n += conn.execute(f"UPDATE messages SET deleted = 1, text = '', author_name = '', text_hash = '', "
                              f"embedded = 0, reply_to = NULL WHERE deleted = 0 AND id IN ({marks})", chunk).rowcount
            conn.execute(f"DELETE FROM messages_fts WHERE rowid IN ({marks})", chunk)
            if self.vector_dim or self._has_vec(conn):
                conn.execute(f"DELETE FROM message_vec WHERE rowid IN ({marks})", chunk)
            self._bump_vec_gen(conn, [r[0] for r in conn.execute(
                f"SELECT DISTINCT scope_id FROM messages WHERE id IN ({marks})", chunk)])
        self._after_change(conn, list(ids), reason)
        return n

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
        conn.executemany("UPDATE scope_state SET vec_gen = vec_gen + 1 WHERE scope_id = ?", [(s,) for s in scope_ids])

    def _has_vec(self, conn: Connection) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'message_vec'").fetchone() is not None

    def delete(self, key: ScopeKey, msg_id: str) -> bool:
        current = self.find(key, msg_id)
        if current is None:
            return False
        return self.delete_messages([current.id]) > 0

    def _after_change(self, conn: Connection, ids: list[int], reason: str) -> None:
        for hook in list(self.change_hooks):
            hook(conn, ids, reason)

    # ------------------------------------------------------------------ reads
    def messages(self, ids: Sequence[int]) -> list[StoredMessage]:
        if not ids:
            return []
        out: dict[int, StoredMessage] = {}
        with self.read() as conn:
            for i in range(0, len(ids), 500):
                chunk = list(ids[i:i + 500])
                for row in conn.execute(
                        f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN scopes s ON s.id = m.scope_id "
                        f"WHERE m.deleted = 0 AND m.id IN ({','.join('?' * len(chunk))})", chunk):
                    out[row[0]] = row_to_message(row)
        return [out[i] for i in ids if i in out]

    def recent(self, scope_id: int, limit: int = 20) -> list[StoredMessage]:
        with self.read() as conn:
            rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN scopes s ON s.id = m.scope_id "
                                "WHERE m.scope_id = ? AND m.deleted = 0 ORDER BY m.ts DESC, m.id DESC LIMIT ?",
                                (scope_id, limit)).fetchall()
        return [row_to_message(r) for r in reversed(rows)]

    def neighbours(self, msg: StoredMessage, before: int = 1, after: int = 1) -> list[StoredMessage]:
        """Messages around ``msg`` in the same session, in order (the message included)."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN scopes s ON s.id = m.scope_id "
                "WHERE m.scope_id = ? AND m.session = ? AND m.turn BETWEEN ? AND ? AND m.deleted = 0 "
                "AND m.bot_traffic = 0 ORDER BY m.turn, m.id", (msg.scope_id, msg.session, msg.turn - before, msg.turn + after)).fetchall()
        return [row_to_message(r) for r in rows]

    def roster(self, scope_id: int) -> list[Person]:
        with self.read() as conn:
            rows = conn.execute("SELECT scope_id, person_id, display_name, aliases, n_messages, first_ts, last_ts, "
                                "is_bot FROM people WHERE scope_id = ? ORDER BY first_ts", (scope_id,)).fetchall()
        return [Person(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], bool(r[7])) for r in rows]

    def add_alias(self, scope_id: int, person_id: str, alias: str) -> None:
        alias = alias.strip()
        if not alias:
            raise InputError("an alias cannot be empty")
        with self.write() as conn:
            row = conn.execute("SELECT aliases FROM people WHERE scope_id = ? AND person_id = ?",
                               (scope_id, person_id)).fetchone()
            if row is None:
                raise InputError(f"{person_id} has not spoken in this channel, so has no roster entry")
            aliases = json.loads(row[0])
            if alias not in aliases:
                aliases.append(alias)
            conn.execute("UPDATE people SET aliases = ? WHERE scope_id = ? AND person_id = ?",
                         (json.dumps(aliases), scope_id, person_id))

    def count_messages(self, scope_id: int | None = None) -> int:
        with self.read() as conn:
            if scope_id is None:
                return conn.execute("SELECT count(*) FROM messages WHERE deleted = 0").fetchone()[0]
            return conn.execute("SELECT count(*) FROM messages WHERE deleted = 0 AND scope_id = ?",
                                (scope_id,)).fetchone()[0]
