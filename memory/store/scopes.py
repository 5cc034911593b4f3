"""Scopes: the channel (or DM) a message belongs to, looked up once and cached by key."""
from __future__ import annotations

import time

from ..db import Connection, select_into
from ..models import ScopeKey
from .base import StoreBase
from .rows import SCOPE_COLUMNS, Scope


class Scopes(StoreBase):
    """Scope ids by platform, workspace and channel; the list of every scope."""

    def scope_id(self, key: ScopeKey, *, create: bool = False, name: str = "", is_dm: bool = False) -> int | None:
        """The id of ``key``'s scope; with ``create``, the scope is made on first sight."""
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
            return select_into(conn, Scope, f"SELECT {SCOPE_COLUMNS} FROM scopes ORDER BY id",
                               convert={"is_dm": bool, "opted_out": bool})
