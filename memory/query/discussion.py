"""Each member's view of a topic, read from the whole discussion, not only search's best candidates.

"What did everyone think about the roof?" is answered by a discussion: the run of turns of a session around
the messages about the roof, and the threads replying to them. A member has spoken on it when one of their
messages there is about it by its words or meaning, or by the discussion's structure: it replies to a message
about it, the analysis pass linked it as answering or agreeing to one, or it answers an on-topic question
another member asked just before ("whatever is cheapest honestly" after "what are we doing about the roof?").
A member with none of that is one the reply may say nothing came from, and only then.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..models import StoredMessage
from ..store import Store
from ..store.rows import select_messages
from .candidates import TOPICAL_COSINE

BEFORE = 4          # turns before the first message about the topic in a session that belong to its discussion
AFTER = 6           # turns after the last one
MAX_TURNS = 160     # a discussion read for one question (a chat reply lists members, it does not read a log)
DIRECT_COVERAGE = 0.3  # the reply's on-topic floor for words (reply.MEMBER_COVERAGE) ...
DIRECT_COSINE = TOPICAL_COSINE  # ... and for meaning (the replies' and /timeline's)
SHORT_ANSWER_CHARS = 80  # an answer in the run after an on-topic question may not repeat its words
ANSWER_TURNS = 4     # ... within this many turns of the question, in the same session, no off-topic turn between
STRUCTURE = 0.6      # how sure a reply to, or a stored answer or agreement link to, an on-topic message is
ANSWER = 0.5         # how sure a short answer in an on-topic run is
DIRECT = 1.0         # added to a message's own on-topic score, so its own words rank above STRUCTURE and ANSWER


@dataclass
class View:
    """One member's part in a discussion: their best message on the topic (None when none is), and whether
    they wrote in the discussion at all."""

    person_id: str
    message: StoredMessage | None
    score: float
    wrote: bool


def discussion(store: Store, anchors: Sequence[StoredMessage], *, exclude: frozenset[int] = frozenset()
               ) -> list[StoredMessage]:
    """The turns around the ``anchors`` (messages about the topic), session by session, with the replies to them,
    oldest first."""
    spans: dict[tuple[int, int], list[int]] = {}
    for m in anchors:
        lo_hi = spans.setdefault((m.scope_id, m.session), [m.turn, m.turn])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], m.turn), max(lo_hi[1], m.turn)
    found: dict[int, StoredMessage] = {}
    with store.read() as conn:
        for (sid, session), (lo, hi) in spans.items():
            for m in select_messages(conn, "WHERE m.scope_id = ? AND m.session = ? AND m.turn BETWEEN ? AND ? AND "
                                     "m.deleted = 0 AND m.bot_traffic = 0 ORDER BY m.turn LIMIT ?",
                                     (sid, session, lo - BEFORE, hi + AFTER, MAX_TURNS)):
                found[m.id] = m
        for m in anchors:  # replies in a thread may come days later
            for r in select_messages(conn, "WHERE m.scope_id = ? AND m.reply_to = ? AND m.deleted = 0 AND "
                                     "m.bot_traffic = 0 LIMIT 20", (m.scope_id, m.msg_id)):
                found[r.id] = r
    msgs = [m for m in found.values() if m.id not in exclude and not m.to_bot]
    return sorted(msgs, key=lambda m: (m.ts, m.id))[:MAX_TURNS]


def on_topic(msgs: Sequence[StoredMessage], direct: Callable[[StoredMessage], float],
             links: dict[int, int]) -> dict[int, float]:
    """Message id -> how surely it is about the topic (0 when it is not).

    ``direct`` scores a message by its own words and meaning (above 0 only at or over the floors; such a message
    scores ``DIRECT`` + that, above every structural score); ``links``
    maps a message id to the earlier message the analysis pass says it answers or confirms. Structure carries
    the topic forward in time order: a reply to, an answer to or an agreement with an on-topic message is on
    it, and so is a short answer in an unbroken run of on-topic turns after an on-topic question.
    """
    by_msg_id = {(m.scope_id, m.msg_id): m for m in msgs}
    score: dict[int, float] = {}
    run: dict[tuple[int, int], StoredMessage | None] = {}  # per session: the open on-topic question, if any
    for m in msgs:
        where = (m.scope_id, m.session)
        own = direct(m)
        s = DIRECT + own if own > 0 else 0.0  # a message on the topic in its own words beats any structural guess
        parent = by_msg_id.get((m.scope_id, m.reply_to or ""))
        if parent is not None and score.get(parent.id, 0.0) > 0:
            s = max(s, STRUCTURE)
        target = links.get(m.id)
        if target is not None and score.get(target, 0.0) > 0:
            s = max(s, STRUCTURE)
        asked = run.get(where)
        if asked is not None and asked.author_id != m.author_id and m.turn - asked.turn <= ANSWER_TURNS \
                and len(m.text) <= SHORT_ANSWER_CHARS and "?" not in m.text:
            s = max(s, ANSWER)
        score[m.id] = s
        if s > 0 and "?" in m.text:
            run[where] = m        # an on-topic question opens a run of answers
        elif s == 0:
            run[where] = None     # an off-topic turn ends it
    return score


def views(msgs: Sequence[StoredMessage], scores: dict[int, float], members: Sequence[str]) -> list[View]:
    """Each member's best on-topic message of the discussion (by score, then latest), in ``members`` order."""
    out: list[View] = []
    for pid in members:
        theirs = [m for m in msgs if m.author_id == pid]
        best = max(theirs, key=lambda m: (scores.get(m.id, 0.0), m.ts), default=None)
        s = scores.get(best.id, 0.0) if best is not None else 0.0
        out.append(View(pid, best if s > 0 else None, s, bool(theirs)))
    return out
