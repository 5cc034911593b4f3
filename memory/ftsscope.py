"""Restricting an FTS5 message query to scopes the cheap way round.

Every indexed message carries exactly one scope tag (``s<id>``), so "in these scopes" and
"in no other scope" select the same rows. FTS5 pays for a tag by walking its posting list: when
the searched scopes hold most of the index (one big channel, the common case), naming them costs
a walk over nearly every message (~5 ms at 100k), while excluding the few others is almost free.
The choice only changes speed, never which rows match; the scope list it excludes is read in the
same read transaction as the search, so a scope created meanwhile cannot leak in.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from . import ftsquery
from .db import Connection, outgrown


class ScopeFilter:
    """Builds scope-restricted MATCH strings; remembers rough scope sizes until the store grows 5%."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}
        self._at = -1  # never counted: outgrown by any store

    def match(self, conn: Connection, query: str, scope_ids: list[int], columns: str = "{text author_name}") -> str:
        """``query`` restricted to ``scope_ids``, by inclusion or by exclusion, whichever walks less.

        Call it inside `snapshot` so the scopes it excludes are those the search then sees.
        """
        wanted = {int(s) for s in scope_ids}
        others = [int(r[0]) for r in conn.execute("SELECT id FROM scopes ORDER BY id") if int(r[0]) not in wanted]
        sizes = self._scope_sizes(conn, wanted | set(others))
        mine = sum(sizes.get(s, 0) for s in wanted)
        if sum(sizes.get(s, 0) for s in others) < mine:
            return ftsquery.excluding(query, others, columns)
        return ftsquery.scoped(query, sorted(wanted), columns)

    def _scope_sizes(self, conn: Connection, scope_ids: set[int]) -> dict[int, int]:
        n = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        with self._lock:
            if not outgrown(n, self._at) and scope_ids <= self._sizes.keys():
                return dict(self._sizes)
        sizes = {int(s): int(c) for s, c in conn.execute(
            "SELECT scope_id, count(*) FROM messages WHERE bot_traffic = 0 GROUP BY scope_id")}
        with self._lock:
            self._sizes = {s: sizes.get(s, 0) for s in scope_ids | sizes.keys()}
            self._at = n
            return dict(self._sizes)


@contextmanager
def snapshot(conn: Connection) -> Iterator[Connection]:
    """One read transaction (a consistent WAL snapshot) unless the connection is already in one."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
