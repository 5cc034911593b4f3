"""Keeps Track 2 honest when Track 1 changes.

Registered as store change hooks, inside the same transaction as the edit or
deletion: a record resting only on deleted messages is retracted; a record with
other sources, or whose message was edited, is re-verified against the text that
remains and retracted if no longer grounded; a group-state record the analysis pass filed from an
edited message is retracted, and the pass files the new text anew. Insights citing a retracted fact
go too.
"""
from __future__ import annotations

import weakref

from .db import Connection
from .groupstate import GroupState
from .records import Records
from .store import Store
from .writer.grounding import ground

_ATTACHED: weakref.WeakSet[Store] = weakref.WeakSet()  # stores whose hooks are registered


def attach(store: Store, records: Records, *, threshold: float = 0.5) -> None:
    """Register the Track 2 hooks on ``store`` (idempotent per store)."""
    if store in _ATTACHED:
        return

    state = GroupState(records)

    def on_change(conn: Connection, message_ids: list[int], reason: str) -> None:
        if reason == "edited":  # the analysis pass reads the new text again and files it anew
            state.retract_for(conn, message_ids, reason)
        affected = records.records_resting_on(conn, message_ids)
        retracted: list[int] = []
        for rid, sources in affected.items():
            content, layer = conn.execute("SELECT content, layer FROM records WHERE id = ?", (rid,)).fetchone()
            alive = [r[0] for m in sources for r in conn.execute(
                "SELECT text FROM messages WHERE id = ? AND deleted = 0", (m,))]
            if not alive:
                records.retract(conn, [rid], f"every source message was {reason}", erase=reason == "forgotten")
                retracted.append(rid)
            elif layer != "persona_insight" and ground(content, alive).score < threshold:
                records.retract(conn, [rid], f"no longer grounded after a source message was {reason}")
                retracted.append(rid)
        cascade(conn, records, retracted, reason)

    def on_forget_person(conn: Connection, scope_id: int, person_id: str) -> None:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM records WHERE scope_id = ? AND owner = ? AND source = ? AND status = 'active'",
            (scope_id, person_id, person_id))]
        records.retract(conn, ids, "the person asked to be forgotten", erase=True)
        # Erase the text of every record they were the only source of, retracted or not.
        conn.execute("UPDATE records SET content = '', status = 'retracted', "
                     "retracted_reason = 'the person asked to be forgotten' WHERE scope_id = ? AND source = ?",
                     (scope_id, person_id))
        cascade(conn, records, ids, "forgotten")

    store.change_hooks.append(on_change)
    store.forget_person_hooks.append(on_forget_person)
    _ATTACHED.add(store)


def cascade(conn: Connection, records: Records, retracted: list[int], reason: str) -> None:
    """Retract insights that cite any retracted fact."""
    todo = list(retracted)
    while todo:
        rid = todo.pop()
        for (iid,) in conn.execute("SELECT l.from_id FROM record_links l JOIN records r ON r.id = l.from_id "
                                   "WHERE l.to_id = ? AND l.kind = 'cites' AND r.status = 'active'", (rid,)).fetchall():
            records.retract(conn, [iid], f"a fact it cites was retracted ({reason})", erase=reason == "forgotten")
            todo.append(iid)
