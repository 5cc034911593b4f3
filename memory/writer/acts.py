"""What the writer knows of each window message's act: the analysis pass's stored reading, as group acts.

The analysis pass owns the group's state (decisions, plans, changes, rules and tasks become GROUP records
with update chains as messages arrive), so the writer's cue proposer leaves those messages to it, and the gate
lets a capable model file a GROUP record only on a message the pass found to speak for the group.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.types import ACT_KINDS
from ..models import StoredMessage
from ..records import NewRecord, Record
from ..store import Store

# The stored act kinds that speak for the group, as the records' utypes name them (a rule is a norm).
AS_GROUP_ACT = {"decision": "decision", "plan": "plan", "change": "change", "rule": "norm", "task": "task"}


@dataclass(frozen=True)
class GroupAct:
    kind: str   # "decision" | "plan" | "norm" | "task" | "change"
    score: float
    # What a "change" with nothing earlier to change is filed as: its likeliest other kind.
    fallback: str = "plan"


def stored_group_acts(store: Store, messages: Sequence[StoredMessage]) -> dict[int, GroupAct | None]:
    """Message id -> its group act by the stored analysis (None: not a group act, or not analysed)."""
    found = store.analyses([m.id for m in messages])
    out: dict[int, GroupAct | None] = {}
    for m in messages:
        a = found.get(m.id)
        kind = AS_GROUP_ACT.get(a.act.kind) if a is not None else None
        if a is None or kind is None:
            out[m.id] = None
            continue
        probs = dict(zip(ACT_KINDS, a.act.probs))
        fallback = max(("decision", "plan", "rule", "task"), key=lambda k: probs.get(k, 0.0))
        out[m.id] = GroupAct(kind, round(a.act.score, 4), AS_GROUP_ACT[fallback])
    return out


def as_fact(rec: Record) -> NewRecord:
    """A committed state record in the form the insight pass reads its facts in."""
    return NewRecord(scope_id=rec.scope_id, layer=rec.layer, utype=rec.utype, owner=rec.owner, source=rec.source,
                     content=rec.content, ts=rec.ts, session=rec.session, turn=rec.turn, confidence=rec.confidence,
                     message_ids=list(rec.sources), verification=rec.verification)
