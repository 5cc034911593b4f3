"""Reads of Track 1: a message by its platform id, by store ids, the latest, and a message's neighbours."""
from __future__ import annotations

from collections.abc import Sequence

from ..db import chunked, marks
from ..models import ScopeKey, StoredMessage
from .rows import select_messages
from .scopes import Scopes


class Reads(Scopes):
    """Live (not deleted) messages, mapped by column name into ``StoredMessage``."""

    def find(self, key: ScopeKey, msg_id: str) -> StoredMessage | None:
        """A live message by its scope and platform id."""
        sid = self.scope_id(key)
        if sid is None:
            return None
        with self.read() as conn:
            found = select_messages(conn, "WHERE m.scope_id = ? AND m.msg_id = ? AND m.deleted = 0", (sid, msg_id))
        return found[0] if found else None

    def messages(self, ids: Sequence[int]) -> list[StoredMessage]:
        """Live messages by store id, in the order of ``ids`` (unknown or deleted ones left out)."""
        if not ids:
            return []
        out: dict[int, StoredMessage] = {}
        with self.read() as conn:
            for chunk in chunked(ids):
                for msg in select_messages(conn, f"WHERE m.deleted = 0 AND m.id IN ({marks(chunk)})", chunk):
                    out[msg.id] = msg
        return [out[i] for i in ids if i in out]

    def recent(self, scope_id: int, limit: int = 20) -> list[StoredMessage]:
        """The scope's latest ``limit`` messages, oldest first."""
        with self.read() as conn:
            found = select_messages(conn, "WHERE m.scope_id = ? AND m.deleted = 0 ORDER BY m.ts DESC, m.id DESC "
                                    "LIMIT ?", (scope_id, limit))
        return found[::-1]

    def neighbours(self, msg: StoredMessage, before: int = 1, after: int = 1) -> list[StoredMessage]:
        """Messages around ``msg`` in the same session, in order (the message included)."""
        with self.read() as conn:
            return select_messages(
                conn, "WHERE m.scope_id = ? AND m.session = ? AND m.turn BETWEEN ? AND ? AND m.deleted = 0 "
                "AND m.bot_traffic = 0 ORDER BY m.turn, m.id",
                (msg.scope_id, msg.session, msg.turn - before, msg.turn + after))

    def count_messages(self, scope_id: int | None = None, *, bot_traffic: bool | None = None) -> int:
        """Live messages in one scope, or in the whole store; ``bot_traffic`` True / False counts only
        the messages addressed to the bot (and its replies) / only the chat's own."""
        sql, args = "SELECT count(*) FROM messages WHERE deleted = 0", []
        if scope_id is not None:
            sql += " AND scope_id = ?"
            args.append(scope_id)
        if bot_traffic is not None:
            sql += " AND bot_traffic = ?"
            args.append(int(bot_traffic))
        with self.read() as conn:
            return conn.execute(sql, args).fetchone()[0]
