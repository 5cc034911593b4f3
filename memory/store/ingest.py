"""Ingest: appending messages to Track 1 (deduplicated, sessions and turns placed, indexed, roster kept).

A batch is one transaction: messages, their FTS5 rows, their vectors (when the embedder
runs inline), the scopes' session cursors and the roster change together or not at all.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from ..db import Connection, chunked, marks
from ..errors import InputError
from ..models import Message, ScopeKey
from . import scopeindex
from .backlog import EmbeddingBacklog, embed_text, text_hash
from .rows import IngestResult
from .scopes import Scopes

MAX_TEXT_CHARS = 1_000_000


def check_length(text: str, what: str) -> None:
    """Refuse a text over ``MAX_TEXT_CHARS`` (``what`` names it in the error)."""
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"{what} is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


class _NewRow(NamedTuple):
    """A message about to be inserted: the INSERT's values (the first 12 fields) and where it came from."""

    scope_id: int
    msg_id: str
    thread: str
    author_id: str
    author_name: str
    text: str
    ts: float
    reply_to: str | None
    session: int
    turn: int
    text_hash: str
    embedded: int
    position: int  # in the batch (and in its vectors); not "index", which would hide tuple.index
    to_bot: int


class Ingest(Scopes, EmbeddingBacklog):
    """Appends messages; the same platform message is stored once."""

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
            check_length(msg.text, f"message {msg.msg_id}")
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
                f"SELECT id FROM scopes WHERE opted_out = 1 AND id IN ({marks(by_scope)})", list(by_scope))}
            for sid, msgs in by_scope.items():
                if sid in opted_out:
                    result.skipped += len(msgs)
                    continue
                existing: set[str] = set()
                for chunk in chunked([m.msg_id for m in msgs]):
                    existing.update(r[0] for r in conn.execute(
                        f"SELECT msg_id FROM messages WHERE scope_id = ? AND msg_id IN ({marks(chunk)})",
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

    def _append(self, conn: Connection, fresh: list[tuple[int, Message]], vectors: np.ndarray | None) -> None:
        """Insert new messages with their index rows, scope cursors and roster counts (in ``conn``'s transaction)."""
        fresh_sorted = sorted(range(len(fresh)), key=lambda i: (fresh[i][0], fresh[i][1].ts))
        states: dict[int, list] = {}
        people: dict[tuple[int, str], list] = {}
        rows: list[_NewRow] = []
        for i in fresh_sorted:
            sid, m = fresh[i]
            st = states.get(sid)
            if st is None:
                r = conn.execute("SELECT last_ts, last_session, last_turn FROM scope_state WHERE scope_id=?",
                                 (sid,)).fetchone()
                st = states[sid] = list(r) if r else [None, 0, 0]
            session, turn = self._place(st, m)
            rows.append(_NewRow(sid, m.msg_id, m.thread, m.author_id, m.author_name, m.text, m.ts, m.reply_to,
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
            "session, turn, text_hash, embedded, vec_seq, bot_traffic, analysed) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(base + n, *r[:12], seq + n - 1 if vectors is not None and not r.to_bot else 0, r.to_bot,
              2 if r.to_bot else 0) for n, r in enumerate(rows, 1)])
        # Bot traffic (questions to Chorus) is stored for the record but indexed nowhere: never evidence.
        scopeindex.insert(conn, scopeindex.MESSAGES, [(r.scope_id, base + n, r.text, r.author_name)
                                                      for n, r in enumerate(rows, 1) if not r.to_bot])
        if vectors is not None:
            conn.executemany("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                             [(base + n, r.scope_id, vectors[r.position].tobytes()) for n, r in enumerate(rows, 1)
                              if not r.to_bot])
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
