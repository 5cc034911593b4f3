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


def handed_to(text: str, members: list[Member]) -> str | None:
    """The member a job is handed to by name, if the text does that to one of ``members``."""
    for m in members:
        for name in m.names:
            for hit in re.finditer(r"(?<![\w])@?" + re.escape(name) + r"(?![\w])", text, re.I):
                if _HANDED.match(text, hit.end()):
                    return m.person_id
    return None
