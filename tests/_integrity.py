"""Consistency checks of a store file, shared by the crash, fault and load tests.

``check(path)`` opens the file the way Chorus does (sqlite-vec loaded) and returns
a report; ``assert_consistent(path)`` fails with a readable message when:
- ``PRAGMA integrity_check`` is not ``ok``;
- the per-scope FTS5 indexes (``messages_fts_s<id>``, ``records_fts_s<id>``) do not hold exactly one
  row per live message / active record of their scope;
- the vec0 tables (``message_vec``, ``record_vec``) hold a row for anything else than
  an embedded live message / an active record, or under another scope;
- a platform message is stored twice in a scope.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.db import connect  # noqa: E402
from memory.store import scopeindex  # noqa: E402


@dataclass
class Report:
    integrity: str = ""
    messages: int = 0
    records: int = 0
    problems: list[str] = field(default_factory=list)
    msg_ids: dict[tuple[int, str], int] = field(default_factory=dict)  # (scope id, platform id) -> row id


def _has(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def check(path: str | Path, *, vectors_complete: bool = False) -> Report:
    """Read ``path`` and list every inconsistency. ``vectors_complete``: every live message must have a vector."""
    rep = Report()
    conn = connect(str(path))
    try:
        rep.integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if rep.integrity != "ok":
            rep.problems.append(f"integrity_check: {rep.integrity}")
        rep.messages = conn.execute("SELECT count(*) FROM messages WHERE deleted = 0").fetchone()[0]
        # Messages addressed to the bot are stored but indexed nowhere; every other live message is indexed.
        live = {r[0]: r[1] for r in conn.execute("SELECT id, scope_id FROM messages WHERE deleted = 0 "
                                                 "AND bot_traffic = 0")}
        for mid, sid, pid in conn.execute("SELECT id, scope_id, msg_id FROM messages"):
            if (sid, pid) in rep.msg_ids:
                rep.problems.append(f"message {pid} stored twice in scope {sid}")
            rep.msg_ids[(sid, pid)] = mid
        # One FTS5 table per scope (memory/store/scopeindex.py): each holds exactly its scope's live messages.
        for sid in sorted({r[0] for r in conn.execute("SELECT id FROM scopes")}):
            fts = scopeindex.rowids(conn, scopeindex.MESSAGES, sid)
            want = {m for m, s in live.items() if s == sid}
            if len(fts) != len(set(fts)) or set(fts) != want:
                extra, missing = sorted(set(fts) - want)[:5], sorted(want - set(fts))[:5]
                rep.problems.append(f"messages_fts_s{sid} has {len(fts)} rows for {len(want)} live messages "
                                    f"(extra {extra}, missing {missing})")
        if _has(conn, "message_vec"):
            vec = {r[0]: r[1] for r in conn.execute("SELECT rowid, scope_id FROM message_vec")}
            embedded = {r[0]: r[1] for r in conn.execute(
                "SELECT id, scope_id FROM messages WHERE deleted = 0 AND embedded = 1")}
            if vec != embedded:
                rep.problems.append(f"message_vec has {len(vec)} rows for {len(embedded)} embedded live messages")
            if vectors_complete and len(embedded) != len(live):
                rep.problems.append(f"{len(live) - len(embedded)} live messages have no vector")
        if _has(conn, "records"):
            active = {r[0]: r[1] for r in conn.execute("SELECT id, scope_id FROM records WHERE status = 'active'")}
            rep.records = len(active)
            for sid in sorted({r[0] for r in conn.execute("SELECT id FROM scopes")}):
                rfts = scopeindex.rowids(conn, scopeindex.RECORDS, sid)
                want = {r for r, s in active.items() if s == sid}
                if len(rfts) != len(set(rfts)) or set(rfts) != want:
                    rep.problems.append(f"records_fts_s{sid} has {len(rfts)} rows for {len(want)} active records")
            if _has(conn, "record_vec"):
                rvec = {r[0]: r[1] for r in conn.execute("SELECT rowid, scope_id FROM record_vec")}
                if any(active.get(r) != s for r, s in rvec.items()):
                    rep.problems.append("record_vec holds rows of inactive records or under another scope")
                if vectors_complete and set(rvec) != set(active):
                    rep.problems.append(f"record_vec has {len(rvec)} rows for {len(active)} active records")
            orphans = conn.execute("SELECT count(*) FROM record_sources rs LEFT JOIN records r ON r.id = rs.record_id "
                                   "WHERE r.id IS NULL").fetchone()[0]
            if orphans:
                rep.problems.append(f"{orphans} record_sources rows point at no record")
    finally:
        conn.close()
    return rep


def assert_consistent(path: str | Path, **kw) -> Report:
    rep = check(path, **kw)
    assert not rep.problems, "store inconsistent:\n  " + "\n  ".join(rep.problems)
    return rep
