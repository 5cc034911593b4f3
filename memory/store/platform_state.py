"""What the store keeps for the platforms themselves: handled event ids and history-import cursors.

Both used to be written with SQL from the adapters; they live here so the store stays the one place that
writes the file, and adapters reach it only through the bot's door (``bot.door``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .base import StoreBase

PRUNE_EVERY = 1000  # handled events between two prunes of the old ones


@dataclass
class Cursor:
    """How far a history import of one stream got: the oldest and newest platform ids fetched."""

    oldest_id: str | None = None
    newest_id: str | None = None
    fetched: int = 0
    done: bool = False


class PlatformState(StoreBase):
    """Event ids already handled (a platform's retries are answered once) and backfill cursors."""

    _events_since_prune = 0

    def first_event(self, platform: str, event_id: str, *, keep_s: float = 86400.0) -> bool:
        """True the first time ``event_id`` is seen (within ``keep_s``); later deliveries return False."""
        now = time.time()
        with self.write() as conn:
            fresh = conn.execute("INSERT OR IGNORE INTO processed_events(platform, event_id, created_at) "
                                 "VALUES (?,?,?)", (platform, event_id, now)).rowcount > 0
            self._events_since_prune += 1
            if self._events_since_prune >= PRUNE_EVERY:
                conn.execute("DELETE FROM processed_events WHERE created_at < ?", (now - keep_s,))
                self._events_since_prune = 0
        return fresh

    def backfill_cursor(self, scope_id: int, stream: str) -> Cursor:
        with self.read() as conn:
            row = conn.execute("SELECT oldest_id, newest_id, fetched, done FROM backfill_cursors "
                               "WHERE scope_id = ? AND stream = ?", (scope_id, stream)).fetchone()
        return Cursor(row[0], row[1], row[2], bool(row[3])) if row else Cursor()

    def save_backfill_cursor(self, scope_id: int, stream: str, cursor: Cursor) -> None:
        with self.write() as conn:
            conn.execute(
                "INSERT INTO backfill_cursors(scope_id, stream, oldest_id, newest_id, fetched, done, updated_at) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(scope_id, stream) DO UPDATE SET oldest_id = excluded.oldest_id, "
                "newest_id = excluded.newest_id, fetched = excluded.fetched, done = excluded.done, "
                "updated_at = excluded.updated_at",
                (scope_id, stream, cursor.oldest_id, cursor.newest_id, cursor.fetched, int(cursor.done), time.time()))
