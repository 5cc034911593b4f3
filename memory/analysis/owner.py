"""Whom an act binds: the group, the member who does a task, the member a question is put to.

Read from the act's kind, the roster members the message names (memory.people) and the subject of its
main clause (spaCy's parse, memory.nlp.Parsed.shape): "Sam, can you book it?" binds Sam, "I'll book
it" its author, "we're going with the van" the group. A question to nobody in particular is the
group's; a question that replies to a member's message is put to that member.
"""
from __future__ import annotations

from ..models import GROUP
from .features import Context
from .types import Turn

_GROUP_KINDS = frozenset({"decision", "plan", "rule"})
_FIRST_PERSON = frozenset({"nsubj:i", "nsubj:me"})


def owner_of(kind: str, turn: Turn, ctx: Context) -> str | None:
    """The owner an act of ``kind`` stated by ``turn`` has (None for chatter)."""
    m = turn.message
    if kind == "chatter":
        return None
    if kind == "news":
        return m.author_id
    if kind in _GROUP_KINDS:
        return GROUP
    found = ctx.people.found(m.text)
    others = [pid for pid, *_ in found if pid != m.author_id]
    shape = set(turn.parsed.shape)
    if kind == "question":
        if others:
            return others[0]
        parent = ctx.parent(turn) if m.reply_to else None
        if parent is not None and parent.turn.message.author_id != m.author_id:
            return parent.turn.message.author_id
        return GROUP
    if kind == "task":
        if others and not shape & _FIRST_PERSON:
            return others[0]
        return m.author_id
    # A change: the group's, unless its author takes something on ("I'll do the keys instead").
    if shape & _FIRST_PERSON and "nsubj:we" not in shape:
        return m.author_id
    return GROUP
