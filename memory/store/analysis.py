"""The analysis rows stored with each message, and the analysis backlog (``messages.analysed``).

A message waits (``analysed = 0``) until the analysis pass (``memory.analysis.runner``) has read it; when the
store has an embedder it waits for its vector first, since the models read it. Edits put a message back in
the backlog; deletions take its row with them (it quotes the text's entities). Readers get the parse
(entities) and the act of any message from here, so nothing runs NER or a classifier at question time.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence

import numpy as np

from ..analysis.types import Act, Analysis, Link
from ..db import Connection, chunked, marks
from ..models import StoredMessage
from ..nlp import Entity, Parsed
from .base import StoreBase
from .rows import select_messages

WAITING, DONE, NEVER, FAILED = 0, 1, 2, 3  # messages.analysed (3: the pass failed on it; logged)

_COLUMNS = ("message_id, entities, has_reason, has_place, chunks, shape, act, act_score, act_probs, owner, topic, "
            "link_kind, link_to, link_score")


def _row_to_analysis(row: Sequence) -> Analysis:
    mid, ents, reason, place, chunks, shape, act, score, probs, owner, topic, link_kind, link_to, link_score = row
    parsed = Parsed(tuple(Entity(t, label) for t, label in json.loads(ents)), bool(reason), bool(place),
                    tuple(json.loads(chunks)), tuple(json.loads(shape)))
    link = Link(link_kind, int(link_to), float(link_score or 0.0)) if link_kind and link_to is not None else None
    return Analysis(int(mid), parsed, Act(act, float(score), tuple(json.loads(probs)), owner, topic or ""), link)


class AnalysisRows(StoreBase):
    """Reads and writes of ``message_analysis``; the backlog of messages waiting for it."""

    def _ready_sql(self, conn: Connection) -> str:
        """Waiting messages the pass can read now: with the store's vector when it keeps vectors."""
        return " AND m.embedded = 1" if self.vector_dim or self._has_vec(conn) else ""

    def pending_analysis(self, scope_ids: Sequence[int] | None = None) -> int:
        """How many live messages (of ``scope_ids``, or of the whole store) still wait for the analysis."""
        sql, args = "SELECT count(*) FROM messages WHERE analysed = 0 AND deleted = 0", []
        if scope_ids is not None:
            sql += f" AND scope_id IN ({marks(scope_ids)})"
            args = [int(s) for s in scope_ids]
        with self.read() as conn:
            return conn.execute(sql, args).fetchone()[0]

    def failed_analysis(self, scope_ids: Sequence[int] | None = None) -> int:
        """How many live messages the analysis pass failed on (each failure is in the log)."""
        sql, args = "SELECT count(*) FROM messages WHERE analysed = 3 AND deleted = 0", []
        if scope_ids is not None:
            sql += f" AND scope_id IN ({marks(scope_ids)})"
            args = [int(s) for s in scope_ids]
        with self.read() as conn:
            return conn.execute(sql, args).fetchone()[0]

    def mark_analysis_failed(self, ids: Sequence[int]) -> None:
        """Take messages the pass cannot read out of the backlog (``chorus analyse --retry`` puts them back)."""
        with self.write() as conn:
            conn.executemany("UPDATE messages SET analysed = 3 WHERE id = ? AND analysed = 0", [(i,) for i in ids])

    def retry_failed_analysis(self) -> int:
        """Put the messages the pass failed on back in the backlog; returns how many."""
        with self.write() as conn:
            return conn.execute("UPDATE messages SET analysed = 0 WHERE analysed = 3 AND deleted = 0").rowcount

    def analysis_batch(self, limit: int, scope_ids: Sequence[int] | None = None) -> list[StoredMessage]:
        """The oldest waiting messages of one scope (the scope with the oldest one), at most ``limit``.

        One scope per batch: a message is read against what came before it in its own scope.
        """
        where, args = "", []
        if scope_ids is not None:
            where, args = f" AND m.scope_id IN ({marks(scope_ids)})", [int(s) for s in scope_ids]
        with self.read() as conn:
            ready = self._ready_sql(conn)
            first = conn.execute(f"SELECT m.scope_id FROM messages m WHERE m.analysed = 0 AND m.deleted = 0{ready}"
                                 f"{where} ORDER BY m.id LIMIT 1", args).fetchone()
            if first is None:
                return []
            return select_messages(conn, f"WHERE m.scope_id = ? AND m.analysed = 0 AND m.deleted = 0{ready} "
                                   "ORDER BY m.id LIMIT ?", (first[0], limit))

    def message_vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """Stored unit vectors of messages (those that have one)."""
        ids = list(ids)
        out: dict[int, np.ndarray] = {}
        with self.read() as conn:
            if not ids or not self._has_vec(conn):
                return out
            for chunk in chunked(ids):
                for mid, blob in conn.execute(f"SELECT rowid, embedding FROM message_vec WHERE rowid IN "
                                              f"({marks(chunk)})", chunk):
                    out[int(mid)] = np.frombuffer(blob, dtype=np.float32)
        return out

    def analyses(self, ids: Iterable[int]) -> dict[int, Analysis]:
        """The stored analysis of each message that has one."""
        ids = list(ids)
        out: dict[int, Analysis] = {}
        with self.read() as conn:
            for chunk in chunked(ids):
                for row in conn.execute(f"SELECT {_COLUMNS} FROM message_analysis WHERE message_id IN "
                                        f"({marks(chunk)})", chunk):
                    a = _row_to_analysis(row)
                    out[a.message_id] = a
        return out

    def parsed(self, ids: Iterable[int]) -> dict[int, Parsed]:
        """The stored parse (named entities, reason and place phrases) of each analysed message."""
        return {mid: a.parsed for mid, a in self.analyses(ids).items()}

    def recent_before(self, scope_id: int, before_id: int, limit: int) -> list[StoredMessage]:
        """The live messages of a scope just before ``before_id`` (no bot traffic), oldest first."""
        with self.read() as conn:
            found = select_messages(conn, "WHERE m.scope_id = ? AND m.id < ? AND m.deleted = 0 AND m.bot_traffic = 0 "
                                    "ORDER BY m.id DESC LIMIT ?", (scope_id, before_id, limit))
        return found[::-1]

    def acts_before(self, scope_id: int, before_id: int, kinds: Sequence[str], limit: int) -> list[StoredMessage]:
        """The live messages of a scope before ``before_id`` whose stored act is one of ``kinds``, oldest first."""
        with self.read() as conn:
            found = select_messages(
                conn, f"JOIN message_analysis a ON a.message_id = m.id WHERE m.scope_id = ? AND m.id < ? AND "
                f"m.deleted = 0 AND a.act IN ({marks(kinds)}) ORDER BY m.id DESC LIMIT ?",
                (scope_id, before_id, *kinds, limit))
        return found[::-1]

    def save_analyses(self, conn: Connection, analyses: Sequence[Analysis], texts: dict[int, str],
                      version: str) -> list[Analysis]:
        """Store analyses in the caller's transaction; returns those stored.

        A message edited or deleted since it was read (its text is no longer ``texts[id]``) is skipped: it
        is back in the backlog, or gone.
        """
        if not analyses:
            return []
        current: dict[int, tuple[int, str]] = {}
        for chunk in chunked([a.message_id for a in analyses]):
            for mid, sid, text in conn.execute(f"SELECT id, scope_id, text FROM messages WHERE deleted = 0 AND "
                                               f"analysed = 0 AND id IN ({marks(chunk)})", chunk):
                current[int(mid)] = (int(sid), text)
        kept = [a for a in analyses if a.message_id in current and current[a.message_id][1] == texts.get(a.message_id)]
        now = time.time()
        conn.executemany(
            f"INSERT OR REPLACE INTO message_analysis({_COLUMNS}, scope_id, version, analysed_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(a.message_id, json.dumps([[e.text, e.label] for e in a.parsed.entities], ensure_ascii=False),
              int(a.parsed.has_reason), int(a.parsed.has_place),
              json.dumps(list(a.parsed.chunks), ensure_ascii=False),
              json.dumps(list(a.parsed.shape), ensure_ascii=False), a.act.kind, a.act.score,
              json.dumps([round(float(p), 5) for p in a.act.probs]), a.act.owner, a.act.topic,
              a.link.kind if a.link else None, a.link.target if a.link else None, a.link.score if a.link else None,
              current[a.message_id][0], version, now) for a in kept])
        conn.executemany("UPDATE messages SET analysed = 1 WHERE id = ?", [(a.message_id,) for a in kept])
        return kept

