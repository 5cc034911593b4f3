"""Privacy operations: forget a person or a message, export a person's data, opt-outs, pause.

These are the only ways memory is removed on request, so they go through the store's
one delete path (``Store.delete_messages``), which also drops index rows and lets
Track 2 retract records in the same transaction. Knows nothing about any platform.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .db import Connection, chunked, marks, named
from .errors import StoreError
from .models import Message, ScopeKey, StoredMessage
from .store import Store, select_messages

FORGOTTEN = "forgotten"
EXPORT_FORMAT = "chorus-export/1"


@dataclass
class ForgetReport:
    """What ``forget_user`` removed, for the confirmation the user sees."""

    platform: str
    workspace: str
    user_id: str
    messages: int = 0
    scopes: int = 0
    roster_rows: int = 0
    scope_ids: list[int] = field(default_factory=list)

    def summary(self) -> str:
        return (f"Forgot {self.messages} message(s) in {self.scopes} channel(s) and removed "
                f"{self.roster_rows} roster entr{'y' if self.roster_rows == 1 else 'ies'}.")


# ---------------------------------------------------------------------- lookups
def workspace_scope_ids(store: Store, platform: str, workspace: str, *, include_dms: bool = True) -> list[int]:
    """Scopes of one workspace; with ``include_dms`` also the platform's DM scopes (a DM is the user's own)."""
    with store.read() as conn:
        rows = conn.execute("SELECT id FROM scopes WHERE platform = ? AND (workspace = ? OR (? AND is_dm = 1)) "
                            "ORDER BY id", (platform, workspace, int(include_dms))).fetchall()
    return [r[0] for r in rows]


def user_message_ids(store: Store, platform: str, workspace: str, user_id: str, *,
                     include_dms: bool = True) -> list[int]:
    """Ids of every live message this user wrote in the workspace (and their DMs with the bot)."""
    sids = workspace_scope_ids(store, platform, workspace, include_dms=include_dms)
    out: list[int] = []
    with store.read() as conn:
        for chunk in chunked(sids):
            out += [r[0] for r in conn.execute(
                f"SELECT id FROM messages WHERE deleted = 0 AND author_id = ? AND scope_id IN ({marks(chunk)}) "
                "ORDER BY id", [user_id, *chunk])]
    return out


def find_message(store: Store, platform: str, workspace: str, channel: str, msg_id: str) -> StoredMessage | None:
    """A live message by its platform id, where ``channel`` may be the scope channel or a thread id.

    Platforms name a thread message by the thread, but memory keeps it in the parent's scope.
    """
    with store.read() as conn:
        found = select_messages(
            conn, "WHERE s.platform = ? AND s.workspace = ? AND m.msg_id = ? AND m.deleted = 0 "
            "AND (s.channel = ? OR m.thread = ?) ORDER BY (s.channel = ?) DESC LIMIT 1",
            (platform, workspace, msg_id, channel, channel, channel))
    return found[0] if found else None


# ---------------------------------------------------------------------- forgetting
def _blank_authors(conn: Connection, ids: Sequence[int]) -> None:
    """Tombstones keep (scope, msg_id) so re-delivery stays out, but not who wrote them."""
    for chunk in chunked(ids):
        conn.execute(f"UPDATE messages SET author_id = '' WHERE deleted = 1 AND id IN ({marks(chunk)})", chunk)


def _scrub_writer_runs(conn: Connection, ids: Sequence[int]) -> None:
    """The writer's audit log quotes what it read: blank the runs whose window held a forgotten message."""
    cols = set(_table_columns(conn, "writer_runs"))
    if not {"scope_id", "first_message_id", "last_message_id"} <= cols:
        return
    blank = [f"{c} = ?" for c in ("raw_output", "accepted", "rejected", "error") if c in cols]
    values = ["" if c == "raw_output" else "[]" if c in ("accepted", "rejected") else None
              for c in ("raw_output", "accepted", "rejected", "error") if c in cols]
    if not blank:
        return
    for chunk in chunked(ids):
        for mid, sid in conn.execute(f"SELECT id, scope_id FROM messages WHERE id IN ({marks(chunk)})",
                                     chunk).fetchall():
            conn.execute(f"UPDATE writer_runs SET {', '.join(blank)} WHERE scope_id = ? AND first_message_id <= ? "
                         "AND last_message_id >= ?", [*values, sid, mid, mid])


class _Scrubbing:
    """While forgetting, freed pages are zeroed; afterwards FTS segments are rewritten and the WAL emptied,
    so the forgotten text does not linger in the file where SQL can no longer see it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.before = 0

    def __enter__(self) -> _Scrubbing:
        with self.store.read() as conn:
            self.before = int(conn.execute("PRAGMA secure_delete").fetchone()[0])
            conn.execute("PRAGMA secure_delete = ON")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                with self.store.write() as conn:
                    fts_tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE "
                                              "'CREATE VIRTUAL TABLE%fts5%' AND sql NOT LIKE '%fts5vocab%'").fetchall()
                    for (name,) in fts_tables:
                        conn.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")
                with self.store.read() as conn:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            with self.store.read() as conn:
                conn.execute(f"PRAGMA secure_delete = {self.before}")


def forget_user(store: Store, platform: str, workspace: str, user_id: str, *,
                include_dms: bool = True) -> ForgetReport:
    """Remove every message of a user in a workspace, their roster rows and (via hooks) Track 2 data.

    One transaction does it all, so a crash leaves either everything or nothing forgotten:
    the store's delete path (index rows and change hooks), blanking the tombstones' authors and
    the writer's audit log, then every ``store.forget_person_hooks`` callable with
    ``(conn, scope_id, person_id)`` for each scope before the roster row goes.
    """
    report = ForgetReport(platform, workspace, user_id)
    ids = user_message_ids(store, platform, workspace, user_id, include_dms=include_dms)
    sids = workspace_scope_ids(store, platform, workspace, include_dms=include_dms)
    hooks = list(getattr(store, "forget_person_hooks", []) or [])
    touched: set[int] = set()
    with _Scrubbing(store):
        with store.write() as conn:
            report.messages = store._delete_in(conn, ids, FORGOTTEN) if ids else 0
            _blank_authors(conn, ids)
            _scrub_writer_runs(conn, ids)
            for chunk in chunked(ids):
                touched |= {r[0] for r in conn.execute(
                    f"SELECT DISTINCT scope_id FROM messages WHERE id IN ({marks(chunk)})", chunk)}
            for chunk in chunked(sids):
                touched |= {r[0] for r in conn.execute(
                    f"SELECT scope_id FROM people WHERE person_id = ? AND scope_id IN ({marks(chunk)})",
                    [user_id, *chunk])}
            for sid in sorted(touched):
                for hook in hooks:
                    hook(conn, sid, user_id)
                report.roster_rows += conn.execute("DELETE FROM people WHERE scope_id = ? AND person_id = ?",
                                                   (sid, user_id)).rowcount
    report.scope_ids = sorted(touched)
    report.scopes = len(touched)
    return report


def forget_message(store: Store, key: ScopeKey, msg_id: str) -> bool:
    """Forget one message (by its scope and platform id); False when it is not remembered."""
    current = store.find(key, msg_id)
    if current is None:
        return False
    return forget_stored(store, current)


def forget_stored(store: Store, message: StoredMessage) -> bool:
    """Forget a message already looked up (e.g. through a link that named its thread)."""
    with _Scrubbing(store):
        with store.write() as conn:  # one transaction: a crash never leaves the author or audit log behind
            n = store._delete_in(conn, [message.id], FORGOTTEN)
            _blank_authors(conn, [message.id])
            _scrub_writer_runs(conn, [message.id])
    return n > 0


# ---------------------------------------------------------------------- export
def _table_columns(conn: Connection, table: str) -> list[str]:
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is None:
        return []
    return [r["name"] for r in named(conn, f"PRAGMA table_info({table})")]


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return None  # vectors and other blobs are not personal text
    return value


def _records_for(conn: Connection, scope_ids: list[int], user_id: str, message_ids: list[int]) -> list[dict]:
    """Track 2 records by or about the user, read defensively (the schema belongs to Track 2)."""
    cols = _table_columns(conn, "records")
    if not cols or not scope_ids:
        return []
    person_cols = [c for c in ("owner", "owner_id", "source", "source_id") if c in cols]
    clauses: list[str] = [f"{c} = ?" for c in person_cols]
    params: list[Any] = [user_id] * len(person_cols)
    src_cols = _table_columns(conn, "record_sources")
    rec_key = "id" if "id" in cols else "rowid"
    if {"record_id", "message_id"} <= set(src_cols) and message_ids:
        for chunk in chunked(message_ids):
            clauses.append(f"{rec_key} IN (SELECT record_id FROM record_sources WHERE message_id IN "
                           f"({marks(chunk)}))")
            params += chunk
    if not clauses:
        return []
    scope_filter = ""
    if "scope_id" in cols:
        scope_filter = f"scope_id IN ({marks(scope_ids)}) AND "
        params = [*scope_ids, *params]
    rows = named(conn, f"SELECT * FROM records WHERE {scope_filter}({' OR '.join(clauses)}) ORDER BY {rec_key}",
                 params)
    return [{n: _plain(row[n]) for n in row.keys()} for row in rows]


INTERNAL_RECORD_COLUMNS = ("scope_id", "chain_id", "writer_run_id")


def _exported_records(conn: Connection, rows: list[dict], scope_labels: dict[int, str]) -> list[dict]:
    """Records as the user may read them: store row ids become numbers local to this export.

    Row ids count what every channel of the store holds, so an export carries none: a record is numbered
    in the export, its links point at those numbers (or null when the linked record is not the user's),
    its scope is named, and its messages are given by their platform ids.
    """
    local = {row["id"]: n for n, row in enumerate(rows, start=1) if "id" in row}
    out: list[dict] = []
    for row in rows:
        item = {k: v for k, v in row.items() if k not in INTERNAL_RECORD_COLUMNS}
        if "scope_id" in row:
            item = {"scope": scope_labels.get(row["scope_id"], ""), **item}
        if "id" in row:
            item["id"] = local[row["id"]]
            item["messages"] = [r[0] for r in conn.execute(
                "SELECT m.msg_id FROM record_sources s JOIN messages m ON m.id = s.message_id "
                "WHERE s.record_id = ? ORDER BY m.ts, m.id", (row["id"],))]
        for link in ("prev_id", "superseded_by"):
            if link in item:
                item[link] = local.get(item[link])
        out.append(item)
    return out


def export_user(store: Store, platform: str, workspace: str, user_id: str, *, include_dms: bool = True) -> dict:
    """Everything Chorus keeps by or about one user in a workspace, as plain JSON-ready data."""
    sids = workspace_scope_ids(store, platform, workspace, include_dms=include_dms)
    ids = user_message_ids(store, platform, workspace, user_id, include_dms=include_dms)
    messages = store.messages(ids)
    scopes = {s.id: s for s in store.scopes() if s.id in set(sids)}
    with store.read() as conn:
        roster: list = []
        for chunk in chunked(sids):
            roster += named(conn, "SELECT scope_id, display_name, aliases, n_messages, first_ts, last_ts FROM people "
                            f"WHERE person_id = ? AND scope_id IN ({marks(chunk)})", [user_id, *chunk])
        records = _exported_records(conn, _records_for(conn, sids, user_id, ids),
                                    {sid: f"{s.platform}:{s.workspace}:{s.channel}" for sid, s in scopes.items()})
    return {
        "format": EXPORT_FORMAT,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform,
        "workspace": workspace,
        "user_id": user_id,
        "opted_out": is_user_opted_out(store, platform, workspace, user_id),
        "roster": [{"scope": scopes[r["scope_id"]].label() if r["scope_id"] in scopes else r["scope_id"],
                    "display_name": r["display_name"], "aliases": json.loads(r["aliases"]),
                    "messages": r["n_messages"], "first_ts": r["first_ts"], "last_ts": r["last_ts"]}
                   for r in roster],
        "messages": [{"scope": f"{m.platform}:{m.workspace}:{m.channel}", "channel": m.channel, "thread": m.thread,
                      "msg_id": m.msg_id, "ts": m.ts, "time": m.when.isoformat(), "text": m.text,
                      "reply_to": m.reply_to, "edited": m.edited} for m in messages],
        "records": records,
    }


# ---------------------------------------------------------------------- opt-outs and pause
def opt_out_user(store: Store, platform: str, workspace: str, user_id: str) -> bool:
    """Stop remembering a user's messages in a workspace; True if this changed anything."""
    with store.write() as conn:
        return conn.execute("INSERT OR IGNORE INTO user_optouts(platform, workspace, user_id, created_at) "
                            "VALUES (?,?,?,?)", (platform, workspace, user_id, time.time())).rowcount > 0


def opt_in_user(store: Store, platform: str, workspace: str, user_id: str) -> bool:
    with store.write() as conn:
        return conn.execute("DELETE FROM user_optouts WHERE platform = ? AND workspace = ? AND user_id = ?",
                            (platform, workspace, user_id)).rowcount > 0


def is_user_opted_out(store: Store, platform: str, workspace: str, user_id: str) -> bool:
    with store.read() as conn:
        return conn.execute("SELECT 1 FROM user_optouts WHERE platform = ? AND workspace = ? AND user_id = ?",
                            (platform, workspace, user_id)).fetchone() is not None


def set_paused(store: Store, platform: str, workspace: str, paused: bool) -> bool:
    """Pause (or resume) remembering anything new in a workspace; True if the state changed."""
    with store.write() as conn:
        before = conn.execute("SELECT paused FROM workspace_state WHERE platform = ? AND workspace = ?",
                              (platform, workspace)).fetchone()
        conn.execute("INSERT INTO workspace_state(platform, workspace, paused, updated_at) VALUES (?,?,?,?) "
                     "ON CONFLICT(platform, workspace) DO UPDATE SET paused = excluded.paused, "
                     "updated_at = excluded.updated_at", (platform, workspace, int(paused), time.time()))
    return bool(before[0] if before else 0) != paused


def is_paused(store: Store, platform: str, workspace: str) -> bool:
    with store.read() as conn:
        row = conn.execute("SELECT paused FROM workspace_state WHERE platform = ? AND workspace = ?",
                           (platform, workspace)).fetchone()
    return bool(row and row[0])


def ensure_scope(store: Store, key: ScopeKey, *, default_opt_in: bool = True, name: str = "",
                 is_dm: bool = False) -> int:
    """The scope's id, creating it opted in or out per the configured default (a DM is always in)."""
    sid = store.scope_id(key)
    if sid is not None:
        return sid
    with store.write() as conn:
        conn.execute("INSERT OR IGNORE INTO scopes(platform, workspace, channel, name, is_dm, opted_out, created_at) "
                     "VALUES (?,?,?,?,?,?,?)", (key.platform, key.workspace, key.channel, name, int(is_dm),
                                                0 if (default_opt_in or is_dm) else 1, time.time()))
    sid = store.scope_id(key)
    if sid is None:  # pragma: no cover - the row was just inserted
        raise StoreError(f"could not create the scope {key}")
    return sid


def set_channel_opt_in(store: Store, key: ScopeKey, opted_in: bool, *, default_opt_in: bool = True,
                       name: str = "", is_dm: bool = False) -> bool:
    """Opt a channel into (or out of) memory; True if the state changed. Existing memory is kept."""
    sid = ensure_scope(store, key, default_opt_in=default_opt_in, name=name, is_dm=is_dm)
    with store.write() as conn:
        return conn.execute("UPDATE scopes SET opted_out = ? WHERE id = ? AND opted_out != ?",
                            (0 if opted_in else 1, sid, 0 if opted_in else 1)).rowcount > 0


def is_channel_opted_in(store: Store, key: ScopeKey, *, default_opt_in: bool = True) -> bool:
    with store.read() as conn:
        row = conn.execute("SELECT opted_out FROM scopes WHERE platform = ? AND workspace = ? AND channel = ?",
                           (key.platform, key.workspace, key.channel)).fetchone()
    if row is None:
        return default_opt_in
    return not row[0]


def _opted_out_anywhere(store: Store, platform: str, user_id: str) -> bool:
    """A DM belongs to no workspace, so an opt-out anywhere on the platform covers it."""
    with store.read() as conn:
        return conn.execute("SELECT 1 FROM user_optouts WHERE platform = ? AND user_id = ?",
                            (platform, user_id)).fetchone() is not None


def ingest_refusal(store: Store, msg: Message, *, default_opt_in: bool = True) -> str | None:
    """Why a message must not be remembered ('paused', 'user opted out', 'channel opted out'), or None.

    Creates the scope on first sight so the configured channel default is recorded once.
    """
    if is_paused(store, msg.platform, msg.workspace):
        return "paused"
    if is_user_opted_out(store, msg.platform, msg.workspace, msg.author_id) or (
            msg.is_dm and _opted_out_anywhere(store, msg.platform, msg.author_id)):
        return "user opted out"
    key = ScopeKey.of(msg)
    ensure_scope(store, key, default_opt_in=default_opt_in, name=msg.channel_name, is_dm=msg.is_dm)
    if not is_channel_opted_in(store, key, default_opt_in=default_opt_in):
        return "channel opted out"
    return None
