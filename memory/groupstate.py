"""The group's state: its decisions, plans, rules and tasks as GROUP records with update chains (Track 2).

The analysis pass files each state act as a record that quotes its message (extractive, no model): a
decision, plan, rule or task starts a chain; a message that *changes* an earlier one appends a node to that
chain, so the head is what holds now and the chain is what it was, in order; a message that *confirms* one
is added to its sources. A task is filed under the member who does it (the roster says who), so it reads
in their row as well as the group's. Readers ("what did we decide?", /timeline, catch-up, replies about
the current or the earlier plan) read heads and chains from here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .analysis.types import ACT_KINDS, STATE_ACTS, Analysis
from .db import Connection, chunked, marks
from .models import GROUP, StoredMessage
from .records import NewRecord, Record, Records

LAYER = "group_interaction"
MODEL_PREFIX = "analysis"  # writer_model of the records the analysis pass files: "analysis/<model version>"
# A state act's record utype (a rule is the records' "norm").
UTYPE = {"decision": "decision", "plan": "plan", "rule": "norm", "task": "task"}
ORIGINS = tuple(UTYPE)  # the acts that start a chain ("change" continues one)
KIND_OF_UTYPE = {v: k for k, v in UTYPE.items()}


@dataclass(frozen=True)
class Filed:
    """What the group state did with one analysed message."""

    message_id: int
    record_id: int | None
    how: str  # "new", "changes", "confirms", "none"


def _utype_for_change(a: Analysis) -> str:
    """What a change with no chain to join is filed as: its likeliest kind among the chain-starting acts."""
    probs = dict(zip(ACT_KINDS, a.act.probs))
    best = max(ORIGINS, key=lambda k: probs.get(k, 0.0))
    return UTYPE[best]


class GroupState:
    """Files state acts as GROUP records, and reads heads and chains back."""

    def __init__(self, records: Records) -> None:
        self.records = records

    # ------------------------------------------------------------------ writes (in the analysis transaction)
    def file(self, conn: Connection, analysed: Sequence[tuple[StoredMessage, Analysis]],
             vectors: dict[int, np.ndarray], version: str) -> list[Filed]:
        """File the state acts among ``analysed`` (oldest first) in the caller's transaction."""
        out: list[Filed] = []
        for msg, a in analysed:
            out.append(self._file_one(conn, msg, a, vectors.get(msg.id), version))
        return out

    def _file_one(self, conn: Connection, msg: StoredMessage, a: Analysis, vector: np.ndarray | None,
                  version: str) -> Filed:
        kind = a.act.kind
        link = a.link
        if kind not in STATE_ACTS and (link is None or link.kind != "confirms"):
            return Filed(msg.id, None, "none")
        if self._already_filed(conn, msg.id):  # a record rests on it already (re-analysis, or a capable writer)
            return Filed(msg.id, None, "none")
        target = self._record_of(conn, link.target) if link is not None and link.kind in ("changes", "confirms") \
            else None
        if link is not None and link.kind == "confirms" and target is not None:
            # Agreeing to an act adds the agreement to its sources; a confirmation that is itself a change
            # ("fine, 21st at 8 it is") goes on as a change below.
            if kind != "change":
                conn.execute("INSERT OR IGNORE INTO record_sources(record_id, message_id) VALUES (?,?)",
                             (target.id, msg.id))
                return Filed(msg.id, target.id, "confirms")
        if kind not in STATE_ACTS:
            return Filed(msg.id, None, "none")
        head = self._current_head(conn, target) if target is not None else None
        updates: int | None = None
        if kind == "change" and head is not None and head.ts <= msg.ts:
            updates, utype = head.id, head.utype
            owner = a.act.owner if utype == "task" and a.act.owner not in (None, GROUP) else head.owner
        elif kind == "change":
            utype = _utype_for_change(a)
            owner = self._owner(msg, a, utype)
        else:
            utype = UTYPE[kind]
            owner = self._owner(msg, a, utype)
        sources = [msg.id]
        if link is not None and link.kind == "confirms" and target is None:
            sources.insert(0, link.target)  # a proposal agreed to: the decision rests on both messages
        rid = self.records.insert(conn, NewRecord(
            scope_id=msg.scope_id, layer=LAYER, utype=utype, owner=owner, source=msg.author_id, content=msg.text,
            ts=msg.ts, session=msg.session, turn=msg.turn, confidence=round(a.act.score, 4), message_ids=sources,
            verification={"by": "analysis", "act": kind, "score": round(a.act.score, 4), "topic": a.act.topic,
                          "link": None if link is None else {"kind": link.kind, "message": link.target,
                                                             "score": round(link.score, 4)}},
            updates=updates), run_id=None, model=f"{MODEL_PREFIX}/{version}", vector=vector)
        return Filed(msg.id, rid, "changes" if updates is not None else "new")

    @staticmethod
    def _owner(msg: StoredMessage, a: Analysis, utype: str) -> str:
        """GROUP, except for a task: the member who does it (the model's reading, else the author)."""
        if utype != "task":
            return GROUP
        return a.act.owner if a.act.owner and a.act.owner != GROUP else msg.author_id

    @staticmethod
    def _already_filed(conn: Connection, message_id: int) -> bool:
        return conn.execute("SELECT 1 FROM record_sources s JOIN records r ON r.id = s.record_id WHERE "
                            "s.message_id = ? AND r.status = 'active' AND r.layer = ?",
                            (message_id, LAYER)).fetchone() is not None

    def _record_of(self, conn: Connection, message_id: int) -> Record | None:
        """The active GROUP-layer record resting on a message (the newest, when several do)."""
        row = conn.execute("SELECT r.id FROM record_sources s JOIN records r ON r.id = s.record_id WHERE "
                           "s.message_id = ? AND r.status = 'active' AND r.layer = ? ORDER BY r.id DESC LIMIT 1",
                           (message_id, LAYER)).fetchone()
        return self._get(conn, int(row[0])) if row else None

    def _current_head(self, conn: Connection, rec: Record) -> Record | None:
        row = conn.execute("SELECT id FROM records WHERE chain_id = ? AND status = 'active' AND superseded_by IS "
                           "NULL ORDER BY id DESC LIMIT 1", (rec.chain_id,)).fetchone()
        return self._get(conn, int(row[0])) if row else None

    def _get(self, conn: Connection, rid: int) -> Record | None:
        """One record, read on the transaction's own connection (the store lock is re-entrant)."""
        found = self.records.get([rid])
        return found[0] if found else None

    def retract_for(self, conn: Connection, message_ids: Sequence[int], reason: str) -> int:
        """Retract the analysis-filed records resting on messages that were edited or deleted (the pass reads
        an edited message again and files it anew)."""
        ids: list[int] = []
        for chunk in chunked(message_ids):
            ids += [r[0] for r in conn.execute(
                f"SELECT DISTINCT r.id FROM record_sources s JOIN records r ON r.id = s.record_id WHERE "
                f"s.message_id IN ({marks(chunk)}) AND r.status = 'active' AND r.writer_model LIKE ?",
                [*chunk, f"{MODEL_PREFIX}/%"])]
        return self.records.retract(conn, ids, f"its message was {reason}") if ids else 0

    # ------------------------------------------------------------------ reads
    def heads(self, scope_ids: Sequence[int], *, utypes: Sequence[str] | None = None,
              limit: int = 10_000) -> list[Record]:
        """What holds now: the heads of the state's chains (GROUP records and tasks), newest first."""
        heads = self.records.heads(scope_ids, layers=[LAYER], limit=limit)
        if utypes is not None:
            heads = [h for h in heads if h.utype in utypes]
        return heads

    def chain(self, record_id: int) -> list[Record]:
        """A chain's active nodes, oldest first, with their sources (what it was, then what it is)."""
        nodes = [r for r in self.records.chain(record_id) if r.status == "active"]
        return self.records.get([r.id for r in nodes], with_sources=True)

    def records_of_messages(self, message_ids: Sequence[int]) -> dict[int, int]:
        """Message id -> the active state record resting on it."""
        out: dict[int, int] = {}
        with self.records.store.read() as conn:
            for chunk in chunked(message_ids):
                for mid, rid in conn.execute(
                        f"SELECT s.message_id, max(r.id) FROM record_sources s JOIN records r ON r.id = s.record_id "
                        f"WHERE s.message_id IN ({marks(chunk)}) AND r.status = 'active' AND r.layer = ? "
                        "GROUP BY s.message_id", [*chunk, LAYER]):
                    out[int(mid)] = int(rid)
        return out
