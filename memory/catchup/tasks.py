"""Who took on what, read deterministically from what people typed.

Two forms: a member volunteering ("I'll book the table", "I can bring the speakers") and a member being
handed a job by name ("Lena can do it", "Sam will bring the cups", "Priya is on snacks"). Both use the
writer's own cue patterns, so the digest and the writer agree on what a responsibility looks like.
"""
from __future__ import annotations

import re

from ..writer.cues import RESPONSIBLE_SELF
from .members import Member

_HANDED = re.compile(r"\s+(?:can|could|will|'ll|is going to|is gonna|has got|is (?:on|in charge of|handling|"
                     r"bringing|booking|doing|sorting|organi[sz]ing|taking care of))\s+(?:do|handle|take|book|"
                     r"bring|get|grab|sort|buy|pick|drive|host|cook|pay|order|reserve|arrange|cover|organi[sz]e|"
                     r"the|it|that|this|\w+ing)\b", re.I)


def volunteers(text: str) -> bool:
    """The author takes something on ("I'll book", "I can bring")."""
    return bool(RESPONSIBLE_SELF.search(text))


class Handed:
    """Finds the member a job is handed to by name ("Lena can do it"); one pattern for the whole roster."""

    def __init__(self, members: list[Member]) -> None:
        self._who = {n.casefold(): m.person_id for m in members for n in m.names if len(n) >= 2}
        names = sorted(self._who, key=len, reverse=True)
        self._pattern = (re.compile(r"(?<![\w])@?(" + "|".join(re.escape(n) for n in names) + r")(?![\w])", re.I)
                         if names else None)

    def __call__(self, text: str) -> str | None:
        if self._pattern is None:
            return None
        for hit in self._pattern.finditer(text):
            if _HANDED.match(text, hit.end()):
                return self._who.get(hit.group(1).casefold())
        return None
