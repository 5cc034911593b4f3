"""Deterministic verification of the writer's proposed actions.

The model only proposes. Each action is checked against the schema, the roster,
the current heads and the window's messages; accepted actions become ``NewRecord``s
with system-filled coordinates, and every rejection carries a reason the operator
can read in ``writer_runs``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import StoredMessage
from ..records import (
    GROUP,
    GROUP_LAYERS,
    PERSON_LAYERS,
    NewRecord,
    Record,
    parse_entry_id,
)
from ..store import Person
from .acts import GroupAct
from .attribution import check_filing
from .cues import People
from .grounding import DuplicateIndex, contained, ground, near_duplicate, quotes, steering_reason
from .schema import MAX_CONTENT_CHARS, Add, Noop, validate_action  # noqa: F401  (MAX_CONTENT_CHARS re-exported)


@dataclass
class Rejection:
    action: Any
    reason: str

    def to_json(self) -> dict:
        return {"action": self.action, "reason": self.reason}


@dataclass
class Verdict:
    accepted: list[NewRecord] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    noops: int = 0


def max_actions(n_messages: int) -> int:
    return max(8, 2 * n_messages)


class RosterIndex:
    """Resolves names the model writes (display name, alias or id, any case) to person ids."""

    def __init__(self, roster: Sequence[Person]) -> None:
        self.by_name: dict[str, str] = {}
        self.display: dict[str, str] = {}
        self.bots = {p.person_id for p in roster if p.is_bot}
        self.people = People(roster)
        for p in roster:
            self.display[p.person_id] = p.display_name
            for name in (p.person_id, *p.names()):
                self.by_name.setdefault(" ".join(name.casefold().split()), p.person_id)

    def resolve(self, name: Any) -> str | None:
        if not isinstance(name, str):
            return None
        key = " ".join(name.casefold().split())
        if key == "group":
            return GROUP
        return self.by_name.get(key)


def parse_actions(raw: str) -> list[Any]:
    """The action list from the model's JSON text; raises ValueError with the reason."""
    try:
        data = json.loads(raw, strict=False)
    except json.JSONDecodeError as exc:
        raise ValueError(f"output is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if isinstance(data, dict) and isinstance(data.get("actions"), list):
        return data["actions"]
    raise ValueError("output has no 'actions' list")


def salvage_actions(raw: str) -> list[Any]:
    """Complete action objects from output cut off mid-way (the unfinished tail is dropped).

    Constrained decoding guarantees the text is a prefix of valid JSON, so every
    object before the cut is whole. The caller logs that the output was truncated.
    """
    start = raw.find("[")
    if start < 0:
        return []
    decoder = json.JSONDecoder()
    items: list[Any] = []
    pos = start + 1
    while True:
        while pos < len(raw) and raw[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(raw) or raw[pos] == "]":
            return items
        try:
            obj, pos = decoder.raw_decode(raw, pos)
        except json.JSONDecodeError:
            return items
        items.append(obj)


def insight_says_nothing(content: str, message: str) -> str | None:
    """Why an insight (a GROUP interpretation) says nothing, or None: it must pass the replies' support check
    against its message and not be a quote of it (an extractive record always is)."""
    from ..query.support import check_sentence

    result = check_sentence(content, {1: message})
    if not result.ok:
        return f"fails the support check against message it rests on ({result.reason})"
    if quotes(content, message):
        return "quotes its one message instead of saying what it means"
    return None


def verify(actions: list[Any], *, window: Sequence[StoredMessage], roster: RosterIndex,
           heads: dict[int, Record], threshold: float, scope_id: int,
           group_acts: Mapping[int, GroupAct | None] | None = None) -> Verdict:
    """Check each proposed action; return what may be committed and why the rest may not.

    ``group_acts`` (message store id -> act) is the analysis pass's reading of the window
    (``memory.writer.acts.stored_group_acts``): a GROUP record's message must be a group act there, or a
    thread several members joined."""
    verdict = Verdict()
    acts: Mapping[int, GroupAct | None] = group_acts if group_acts is not None else {}
    limit = max_actions(len(window))
    texts = [m.text for m in window]
    steering = [steering_reason(t) for t in texts]
    accepted_texts: list[tuple[str, str, str, list[int]]] = []  # (owner, layer, content, messages) so far
    current = DuplicateIndex((h.id, h.content) for h in heads.values())  # built once, not once per action
    updated: set[int] = set()
    for n, action in enumerate(actions):
        if n >= limit:
            verdict.rejected.append(Rejection(action, f"over the limit of {limit} actions for {len(window)} messages"))
            continue
        reason, rec = _check(action, window, texts, steering, roster, heads, current, threshold, scope_id, acts)
        if rec is None and reason == "noop":
            verdict.noops += 1
            continue
        if rec is not None:
            # Same statement under any owner: one message is not filed twice under two people.
            dup = next((a for a in accepted_texts if near_duplicate(a[2], rec.content)
                        or (a[3] == rec.message_ids and contained(a[2], rec.content))), None)
            if dup is not None:
                where = "" if dup[0] == rec.owner else f" (already filed under {roster.display.get(dup[0], dup[0])})"
                reason, rec = f"repeats an earlier action in the same output{where}", None
            elif rec.updates is not None and rec.updates in updated:
                reason, rec = f"E{rec.updates} was already updated earlier in this output", None
        if rec is None:
            verdict.rejected.append(Rejection(action, reason or "rejected"))
            continue
        accepted_texts.append((rec.owner, rec.layer, rec.content, rec.message_ids))
        if rec.updates is not None:
            updated.add(rec.updates)
        verdict.accepted.append(rec)
    return verdict


def _check(action: Any, window: Sequence[StoredMessage], texts: list[str], steering: list[str | None],
           roster: RosterIndex, heads: dict[int, Record], current: DuplicateIndex, threshold: float,
           scope_id: int, acts: Mapping[int, GroupAct | None]) -> tuple[str | None, NewRecord | None]:
    model, why = validate_action(action)
    if model is None:
        return why, None
    if isinstance(model, Noop):
        return "noop", None
    op, content = model.op, model.content
    target: Record | None = None
    if op == "UPDATE":
        rid = parse_entry_id(action.get("entry_id", ""))
        target = heads.get(rid) if rid is not None else None
        if target is None and not all(k in action for k in ("owner", "source", "layer", "utype")):
            return (f"UPDATE target {action.get('entry_id')!r} is not a current record shown to the writer, and the "
                    "action lacks owner/source/layer/utype to add it instead"), None
    if target is not None:
        owner, source, layer, utype = target.owner, target.source, target.layer, target.utype
        if near_duplicate(content, target.content, 0.95):
            return f"UPDATE does not change E{target.id}", None
    else:
        if not isinstance(model, Add):
            model, why = validate_action({**action, "op": "ADD"})  # an UPDATE of an unknown entry, added instead
            if not isinstance(model, Add):  # None: the ADD it would be is invalid
                return why, None
        layer, utype = model.layer, model.utype
        resolved = roster.resolve(action.get("owner"))
        if resolved is None:
            return f"owner {action.get('owner')!r} is not in this channel's roster (nor GROUP)", None
        owner = resolved
        if layer in GROUP_LAYERS and owner != GROUP:
            return f"layer {layer} belongs to GROUP, not to {action.get('owner')!r}", None
        if layer in PERSON_LAYERS and owner == GROUP:
            return f"layer {layer} is about one person; GROUP records go in {' or '.join(GROUP_LAYERS)}", None
        resolved = roster.resolve(action.get("source"))
        if resolved is None or resolved == GROUP:
            return f"source {action.get('source')!r} is not a person in this channel's roster", None
        source = resolved

    g = ground(content, texts)
    hint = action.get("msg")
    if isinstance(hint, int) and not isinstance(hint, bool) and 1 <= hint <= len(texts):
        # The model named its message: prefer it when it supports the content as well as any other.
        hinted = ground(content, [texts[hint - 1]])
        if hinted.score >= g.score:
            g = type(g)(hinted.score, hint - 1, hinted.matched, hinted.total)
    if g.message_index is None or g.score < threshold:
        return (f"not grounded in this window's messages: at most {g.matched} of {g.total} content words appear in "
                f"one message (needs {threshold:.0%})"), None
    msg = window[g.message_index]
    if steering[g.message_index]:
        return f"rests on message {msg.msg_id}, and {steering[g.message_index]}", None
    if msg.to_bot or msg.author_id in roster.bots:
        return f"rests on message {msg.msg_id}, which is bot traffic (addressed to the bot or written by it)", None
    if target is None and source != msg.author_id:
        # Attribution must match who actually wrote the supporting message.
        shown = roster.display.get(msg.author_id, msg.author_id)
        return f"source {action.get('source')!r} did not write the supporting message (it was {shown})", None
    if target is not None and owner == GROUP:
        # A revision of a GROUP record is the group's act too, and its new version is sourced to whoever made it.
        filing = check_filing(owner, layer, msg, window, roster.people, roster.display, acts)
        if filing.reason:
            return filing.reason, None
        source = msg.author_id
    if target is not None and owner != GROUP and source != msg.author_id:
        # A revision inherits its record's source: someone else's words cannot revise a person's record.
        shown = roster.display.get(msg.author_id, msg.author_id)
        return (f"UPDATE of E{target.id} would put words of {shown} under {roster.display.get(source, source)}'s "
                "name; add a record sourced to its author instead"), None
    if layer == "group_insight":
        why = insight_says_nothing(content, msg.text)
        if why:
            return f"a group insight {why}", None
    corrections: list[str] = []
    if target is None:
        filing = check_filing(owner, layer, msg, window, roster.people, roster.display, acts)
        if filing.reason:
            return filing.reason, None
        owner, layer, corrections = filing.owner, filing.layer, filing.corrections
    dup_of = current.first(content, skip=target.id if target else None)
    if dup_of is not None:
        return f"duplicates the current record E{dup_of}", None
    verification = {"grounding": round(g.score, 3), "message": msg.msg_id, "matched_words": g.matched,
                    "content_words": g.total, "op": op}
    if corrections:
        verification["corrected"] = corrections
    if isinstance(action.get("proposer"), str):
        verification["proposer"] = action["proposer"]
    if op == "UPDATE" and target is None:
        verification["note"] = "UPDATE target unknown; added as a new record"
    return None, NewRecord(scope_id=scope_id, layer=layer, utype=utype, owner=owner, source=source, content=content,
                           ts=msg.ts, session=msg.session, turn=msg.turn, confidence=round(g.score, 3),
                           message_ids=[msg.id], verification=verification,
                           updates=target.id if target else None)
