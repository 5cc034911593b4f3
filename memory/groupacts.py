"""What a message does for the group: a decision, plan, norm, task or a change of one of them.

STAND-IN. This module is the interface the catch-up digest (``memory.catchup``) codes against; issue 24
replaces the body with a learned classifier. Until then a few clear deterministic cues (the writer's
own cue patterns in ``memory.writer.cues``) decide, with fixed scores per cue. Nothing outside this
module may depend on which cue fired or on the exact scores.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .models import StoredMessage
from .writer.cues import CHANGE, DATE, DECISION, LETS, NORM, PLAN, RESPONSIBLE_SELF, WE

KINDS = ("decision", "plan", "norm", "task", "change")


@dataclass(frozen=True)
class GroupAct:
    """The group act one message performs, with the classifier's confidence in it (0..1)."""

    kind: str  # "decision" | "plan" | "norm" | "task" | "change"
    score: float


def classify_group_acts(messages: Sequence[StoredMessage],
                        context: Mapping[int, Sequence[StoredMessage]] | None = None) -> list[GroupAct | None]:
    """One ``GroupAct`` (or None) per message, in order. ``context`` (message id -> nearby messages) is
    accepted for the learned classifier; the stand-in reads each message alone."""
    return [_one(m.text) for m in messages]


def _one(text: str) -> GroupAct | None:
    if NORM.search(text):
        return GroupAct("norm", 0.9)
    if CHANGE.search(text) and (DECISION.search(text) or PLAN.search(text) or DATE.search(text)):
        return GroupAct("change", 0.8)
    if DECISION.search(text):
        return GroupAct("decision", 0.9)
    if DATE.search(text) and LETS.search(text):
        return GroupAct("plan", 0.7)
    if RESPONSIBLE_SELF.search(text):
        return GroupAct("task", 0.7)
    if DATE.search(text) and PLAN.search(text) and WE.search(text):
        return GroupAct("plan", 0.5)
    return None
