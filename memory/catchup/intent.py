"""Whether a question to the bot asks for a catch-up ("what did I miss?", "catch me up since Monday").

Returns the time words the request carries ("since Monday" -> "Monday"), '' when it carries none, and
None when the text is not a catch-up request (it is then an ordinary question).
"""
from __future__ import annotations

import re

_ASK = re.compile(
    r"\b(?:what(?:'s| has| have| did)? (?:i|we) (?:miss(?:ed)?|been missing)|what have i missed"
    r"|catch me up|catch (?:me )?up on|fill me in|bring me up to (?:speed|date)|get me up to speed"
    r"|(?:give me|send me) (?:a |my )?(?:catch[- ]?up|digest|recap)|anything (?:new|i missed|i should know)"
    r"|what(?:'s| is) new(?! york)|what happened while i was (?:away|out|gone|off))\b", re.I)
_SINCE = re.compile(r"\b(?:since|from|after)\s+(?P<t>.+?)\s*[?.!]*$"
                    r"|\b(?:in|over|during|for) the (?:last|past)\s+(?P<d>.+?)\s*[?.!]*$", re.I)


def catchup_request(text: str) -> str | None:
    """The requested start ('' for the default), or None when ``text`` is not a catch-up request."""
    flat = " ".join(text.replace("’", "'").split())
    if not _ASK.search(flat):
        return None
    m = _SINCE.search(flat)
    if m is None:
        return ""
    return m.group("t") or ("last " + m.group("d"))
