"""Whether a message names one member, through the one people-finding module (``memory.people``).

``memory.people.People`` finds roster names and aliases as whole words (possessives included), first
names, @mentions and platform mentions of the member's id. One rule is added for a digest, which reads
every message of a busy channel: a name that is also an ordinary word ("Will", "May", "Bill") counts only
with its capital or after @, so "I will" never names Will. No capitalised word is ever guessed to be a name.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..ftsquery import STOPWORDS
from ..people import People, member_names
from ..store import Person

COMMON_WORDS = STOPWORDS | frozenset("""bill mark rose grace june april august hope joy faith amber summer autumn
dawn ray ken art guy jack sky sunny penny pat sue rob chase hunter""".split())


class Member:
    """One member as the digest looks for them: their id and the names the channel knows them by."""

    def __init__(self, person_id: str, names: Iterable[str]) -> None:
        given = list(dict.fromkeys(" ".join(n.split()) for n in names if n and n.strip()))  # display name first
        self.person_id = person_id
        person = Person(0, person_id, given[0] if given else person_id, given[1:], 0, 0.0, 0.0)
        self.names = [n for n in member_names(person) if n != person_id]
        self._people = People([person])

    def named_in(self, text: str) -> bool:
        """Whether ``text`` names or @mentions this member."""
        return any(self._counts(words) for _, words, _, _ in self._people.found(text))

    @staticmethod
    def _counts(words: str) -> bool:
        if words.startswith("@") or words.startswith("<@"):
            return True
        bare = words.removesuffix("'s").removesuffix("’s")
        return bare.casefold() not in COMMON_WORDS or bare[:1].isupper()
