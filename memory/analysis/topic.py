"""An act's topic: a short noun phrase naming what it is about ("quiz night", "setlist").

A message that is close to an earlier state act (its MiniLM vector, or the content words they share)
keeps that act's topic, so a plan and the changes to it form one topic; otherwise the topic is the
message's first noun phrase (spaCy's noun chunks, memory.nlp.Parsed.chunks) that is not a value (a
date, an amount, a person: those are what a topic's slots hold, not its name).
"""
from __future__ import annotations

from ..ftsquery import STOPWORDS
from .features import Context, content_words, cos
from .types import Turn

SAME_TOPIC_COSINE = 0.55  # a state act this close is on the same topic
MAX_WORDS = 3


def _name(turn: Turn, ctx: Context) -> str:
    values = {e.text.casefold() for e in turn.parsed.entities if e.kind in ("time", "amount", "person")}
    names = ctx.people.name_words()
    for chunk in turn.parsed.chunks:
        words = [w for w in chunk.split() if w not in STOPWORDS and w not in names and w.isalpha()]
        if not words or chunk in values or any(chunk in v or v in chunk for v in values):
            continue
        return " ".join(words[-MAX_WORDS:])
    return ""


def topic_of(turn: Turn, ctx: Context) -> str:
    """The topic of a state act, a question or news stated by ``turn`` (read before it joins ``ctx``)."""
    best, score = None, 0.0
    mine = content_words(turn.message.text)
    for s in ctx.acts:
        if s.act is None or not s.act.topic:
            continue
        c = cos(turn.vector, s.turn.vector) + 0.1 * len(mine & s.words)
        if c > score:
            best, score = s, c
    if best is not None and best.act is not None and score >= SAME_TOPIC_COSINE:
        return best.act.topic
    return _name(turn, ctx)

