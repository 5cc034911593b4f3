"""What a catch-up line may claim: only what the stored group state backs.

A wrong "was -> now" line is worse than a missing one: it tells a member that a plan changed when it did not.
So a change is shown against the version it replaced only when the analysis pass linked the two confidently
and the two messages are plainly about the same thing with a different value: they share their topic, and a
kind of value both state (a time, an amount, a place, a person, an owner) differs between them. Otherwise the
change is shown alone. Decisions, plans and rules are listed only when the act model filed their message
confidently, and a message that only reacts to one (a bare "👍", "same") is never quoted beside it.

The thresholds are chosen on the training chats' catch-up cases (docs/catchup.md), never on the blind sets.
"""
from __future__ import annotations

import re

from ..analysis.types import Analysis
from ..ftsquery import stem
from ..models import StoredMessage

LINK_CONFIDENT = 0.5   # the "changes" link's probability a was -> now line needs
ACT_CONFIDENT = 0.5    # the act's probability a decision, plan or rule line needs
VALUE_KINDS = ("time", "amount", "place", "person", "org")
_WORD = re.compile(r"[^\W\d_]{2,}")
# Chat forms of a time the small NER model misses ("moved to the 21st", "now wed at 8"): ordinals, weekday and
# month names, clock times. English calendar words, not facts about any chat.
_TIME = re.compile(r"\b(\d{1,2}(st|nd|rd|th)|\d{1,2}[:.]\d\d|\d{1,2}\s?(am|pm)|"
                   r"(mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)(day)?|jan(uary)?|feb(ruary)?|march|april|may|june|july|aug(ust)?|sept?(ember)?|oct(ober)?|"
                   r"nov(ember)?|dec(ember)?|tonight|tomorrow|weekend)\b", re.I)
_AMOUNT = re.compile(r"[£$€]\s?\d[\d,.]*|\b\d[\d,.]*\s?(quid|euros?|dollars?|pounds?|k)\b", re.I)


def _topic_words(a: Analysis) -> set[str]:
    return {stem(w) for w in _WORD.findall(a.act.topic.casefold().replace("-", " ").replace("_", " "))}


def _values(a: Analysis, text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pattern, kind in ((_TIME, "time"), (_AMOUNT, "amount")):
        found = {m.group(0).casefold() for m in pattern.finditer(text)}
        if found:
            out.setdefault(kind, set()).update(found)
    for e in a.parsed.entities:
        if e.kind in VALUE_KINDS:
            out.setdefault(e.kind, set()).add(" ".join(e.text.casefold().split()))
    if a.act.owner:
        out.setdefault("owner", set()).add(a.act.owner)
    return out


def backs_change(new: Analysis | None, old: Analysis | None, old_message: int | None, new_text: str,
                 old_text: str, *, verified_chain: bool = False) -> bool:
    """Whether a "was -> now" line may pair ``new`` with the version it replaced: a confident changes link to
    that version's message, a shared topic, and a kind of value both state with a different value.

    ``verified_chain``: the chain was made by the writer's verified UPDATE (EGMemory's gate checked that the
    new message revises the old record), not by the analysis pass's link, so only the value must differ."""
    if new is None or old is None:
        return False
    if not verified_chain:
        if new.link is None or new.link.kind != "changes" or new.link.score < LINK_CONFIDENT:
            return False
        if old_message is not None and new.link.target != old_message:
            return False
        if not _topic_words(new) & _topic_words(old):
            return False
    nv, ov = _values(new, new_text), _values(old, old_text)
    return any(nv[k] != ov[k] for k in nv.keys() & ov.keys())


def confident(a: Analysis | None) -> bool:
    """Whether the act model filed the message with the probability a Decisions/Plans/Rules line needs."""
    return a is not None and a.act.score >= ACT_CONFIDENT


def substantive(m: StoredMessage, a: Analysis | None) -> bool:
    """A message worth quoting beside a line's main one: not a bare reaction ("👍", "same", "🙋‍♀️")."""
    words = _WORD.findall(m.text)
    if not words and not re.search(r"\d", m.text):
        return False
    return not (a is not None and a.act.kind == "chatter" and len(words) < 4)
