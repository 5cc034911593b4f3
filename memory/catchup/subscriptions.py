"""Scheduled digests in the store: who subscribed where, and what became of each scheduled digest.

Every change goes through the store's one write path. A scheduled digest is one row per (channel,
member, run): claimed as 'pending', 'sending' just before the platform call, 'sent' just after. A row
left 'sending' by a crash may or may not have reached the member; the scheduler asks the platform
before it sends again, so a restart neither loses a digest nor sends it twice.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..db import Connection, select_into
from ..store import Store

OPEN = ("pending", "sending", "failed")
DONE = ("sent", "skipped")
DIGEST_COLUMNS = ("id, scope_id, person_id, slot, since_ts, until_ts, status, attempts, lines, last_error, "
                  "created_at, updated_at")


@dataclass
class DigestRow:
    id: int
    scope_id: int
    person_id: str
    slot: str
    since_ts: float
    until_ts: float
    status: str
    attempts: int
    lines: int
    last_error: str | None
    created_at: float
    updated_at: float

    @property
    def marker(self) -> str:
        """The reference printed in the digest, by which a restart recognises it on the platform."""
        return f"digest #{self.id}"


def subscribe(store: Store, scope_id: int, person_id: str, name: str = "") -> bool:
    """Subscribe a member to this channel's scheduled digest; False if they already were."""
    with store.write() as conn:
        return conn.execute("INSERT OR IGNORE INTO catchup_subscriptions(scope_id, person_id, display_name, "
                            "created_at) VALUES (?,?,?,?)", (scope_id, person_id, name, time.time())).rowcount > 0


def unsubscribe(store: Store, scope_id: int, person_id: str) -> bool:
    with store.write() as conn:
        return conn.execute("DELETE FROM catchup_subscriptions WHERE scope_id = ? AND person_id = ?",
                            (scope_id, person_id)).rowcount > 0


def subscribers(store: Store, scope_id: int) -> list[tuple[str, str]]:
    """(person id, display name) of everyone subscribed in the scope, in the order they subscribed."""
    with store.read() as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT person_id, display_name FROM catchup_subscriptions WHERE scope_id = ? ORDER BY created_at, "
            "person_id", (scope_id,))]


def last_covered(store: Store, scope_id: int, person_id: str) -> float | None:
    """Where the member's last delivered (or empty) scheduled digest ended; the next one starts there."""
    with store.read() as conn:
        row = conn.execute("SELECT max(until_ts) FROM catchup_digests WHERE scope_id = ? AND person_id = ? AND "
                           "status IN ('sent', 'skipped')", (scope_id, person_id)).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def _row(conn: Connection, sql: str, args: tuple) -> DigestRow | None:
    found = select_into(conn, DigestRow, f"SELECT {DIGEST_COLUMNS} FROM catchup_digests {sql}", args)
    return found[0] if found else None


def claim(store: Store, scope_id: int, person_id: str, slot: str, since: float, until: float) -> DigestRow:
    """The digest row of one member for one run: created 'pending' the first time, the same row after that."""
    now = time.time()
    with store.write() as conn:
        conn.execute("INSERT OR IGNORE INTO catchup_digests(scope_id, person_id, slot, since_ts, until_ts, status, "
                     "created_at, updated_at) VALUES (?,?,?,?,?, 'pending', ?, ?)",
                     (scope_id, person_id, slot, since, until, now, now))
        row = _row(conn, "WHERE scope_id = ? AND person_id = ? AND slot = ?", (scope_id, person_id, slot))
    assert row is not None
    return row


def mark(store: Store, row_id: int, status: str, *, error: str | None = None, lines: int | None = None,
         attempt: bool = False) -> None:
    with store.write() as conn:
        conn.execute("UPDATE catchup_digests SET status = ?, last_error = ?, lines = coalesce(?, lines), "
                     "attempts = attempts + ?, updated_at = ? WHERE id = ?",
                     (status, error, lines, int(attempt), time.time(), row_id))


def get(store: Store, row_id: int) -> DigestRow | None:
    with store.read() as conn:
        return _row(conn, "WHERE id = ?", (row_id,))


def open_rows(store: Store) -> list[DigestRow]:
    """Digests not yet sent or skipped (waiting, maybe sent before a crash, or failed and due a retry)."""
    with store.read() as conn:
        return select_into(conn, DigestRow, f"SELECT {DIGEST_COLUMNS} FROM catchup_digests WHERE status IN "
                           "('pending', 'sending', 'failed') ORDER BY id")


def attach(store: Store) -> None:
    """Forgetting a member also forgets their subscriptions and digest records (same transaction)."""
    def on_forget_person(conn: Connection, scope_id: int, person_id: str) -> None:
        conn.execute("DELETE FROM catchup_subscriptions WHERE scope_id = ? AND person_id = ?", (scope_id, person_id))
        conn.execute("DELETE FROM catchup_digests WHERE scope_id = ? AND person_id = ?", (scope_id, person_id))

    store.forget_person_hooks.append(on_forget_person)
