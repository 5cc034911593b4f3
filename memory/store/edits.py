"""Edits and deletions of Track 1 messages, with their index rows, in one transaction each.

``_delete_in`` is the one delete path: privacy's forget-me calls it inside its own
transaction, and the change hooks let Track 2 retract records resting on what went.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from ..db import Connection, chunked, marks
from ..models import Message, ScopeKey
from . import scopeindex
from .backlog import EmbeddingBacklog, embed_text, text_hash
from .ingest import check_length
from .reads import Reads
from .rows import IngestResult


class Edits(Reads, EmbeddingBacklog):
    """Replace a message's text (re-indexed) or remove messages (tombstones stay)."""

    def edit(self, key: ScopeKey, msg_id: str, new_text: str, *, edited_ts: float | None = None) -> bool:
        """Replace a message's text and re-index it; False when the message is unknown."""
        msg = Message(key.platform, key.workspace, key.channel, msg_id, "x", "x", new_text, edited_ts or time.time())
        check_length(msg.text, "edited message")
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
            conn.execute("UPDATE messages SET text = ?, text_hash = ?, edited_at = ?, embedded = ?, analysed = 0 "
                         "WHERE id = ?", (msg.text, text_hash(composed), msg.ts, 1 if vecs is not None else 0,
                                          current.id))
            conn.execute("DELETE FROM message_analysis WHERE message_id = ?", (current.id,))  # read it again
            scopeindex.delete(conn, scopeindex.MESSAGES, [(current.scope_id, current.id)])
            scopeindex.insert(conn, scopeindex.MESSAGES,
                              [(current.scope_id, current.id, msg.text, current.author_name)])
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
        """Tombstone ``ids`` inside the caller's transaction; returns how many were live."""
        n = 0
        for chunk in chunked(ids):
            qs = marks(chunk)
            scopeindex.delete(conn, scopeindex.MESSAGES, conn.execute(
                f"SELECT scope_id, id FROM messages WHERE deleted = 0 AND id IN ({qs})", chunk).fetchall())
            n += conn.execute(f"UPDATE messages SET deleted = 1, text = '', author_name = '', text_hash = '', "
                              f"embedded = 0, reply_to = NULL WHERE deleted = 0 AND id IN ({qs})", chunk).rowcount
            if self.vector_dim or self._has_vec(conn):
                conn.execute(f"DELETE FROM message_vec WHERE rowid IN ({qs})", chunk)
            # The analysis quotes the text (its entities): it goes with the message.
            conn.execute(f"DELETE FROM message_analysis WHERE message_id IN ({qs})", chunk)
            self._bump_vec_gen(conn, [r[0] for r in conn.execute(
                f"SELECT DISTINCT scope_id FROM messages WHERE id IN ({qs})", chunk)])
        self._after_change(conn, list(ids), reason)
        return n

    def delete(self, key: ScopeKey, msg_id: str) -> bool:
        """Delete one message by its scope and platform id; False when it is not stored."""
        current = self.find(key, msg_id)
        if current is None:
            return False
        return self.delete_messages([current.id]) > 0
