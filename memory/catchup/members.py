"""Whether a message names, addresses or replies to one member, from the roster only.

A member is named by a roster name or alias (as a whole word; "Sam's" counts, "Samuel" does not), by an
@mention of a name, or by a platform mention of their id (Discord keeps ``<@123>`` in the text). A name
that is also an ordinary word ("Will", "May") counts only when written with its capital or after @,
so "I will" never names Will. Nothing else is a name: no capitalised word is guessed to be one.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ..ftsquery import STOPWORDS

_COMMON = STOPWORDS | frozenset("""bill mark rose grace june april august hope joy faith amber summer autumn
dawn ray ken art guy jack sky sunny penny pat sue rob chase hunter""".split())


def _name_patterns(name: str) -> list[re.Pattern[str]]:
    name = " ".join(name.split())
    if len(name) < 2:
        return []
    body = re.escape(name)
    if name.casefold() in _COMMON:
        cap = re.escape(name[:1].upper()) + re.escape(name[1:])
        return [re.compile(r"(?<![\w@])" + cap + r"(?![\w])"), re.compile(r"@" + body + r"(?![\w])", re.I)]
    return [re.compile(r"(?<![\w])@?" + body + r"(?![\w])", re.I)]


class Member:
    """One member as the digest looks for them: their id and the names the channel knows them by."""

    def __init__(self, person_id: str, names: Iterable[str]) -> None:
        self.person_id = person_id
        self.names = sorted({n.strip() for n in names if n and n.strip()}, key=str.casefold)
        self._patterns = [p for n in self.names for p in _name_patterns(n)]
        ident = re.escape(person_id)
        self._patterns.append(re.compile(r"<@!?" + ident + r"(?:\|[^>]*)?>|(?<![\w])@" + ident + r"(?![\w])"))

    def named_in(self, text: str) -> bool:
        """Whether ``text`` names or @mentions this member."""
        return any(p.search(text) for p in self._patterns)

    def addressed_first(self, text: str) -> bool:
        """Whether ``text`` opens by naming the member ("Sam, are you in?", "@sam can you ...")."""
        head = text.lstrip()[:60]
        return any((m := p.search(head)) is not None and m.start() <= 1 for p in self._patterns)
