"""Who a text names: roster members by name, alias, id or @mention, and people the chat mentions.

The one implementation of people-finding: the question analysis (memory/query/question.py) and
the writer's attribution (memory/writer/) both use it, so a reply and a stored record agree on
who "Jordan" or "@sam" is. A person is a roster member, or a name that spaCy's NER tags as a
PERSON *and* that the scope's own messages use; a capitalised word alone is never a person.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache

from .models import StoredMessage
from .store.rows import Person

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _warn_once() -> None:
    log.warning("spaCy unavailable: people the chat names who are not members are not found")


_MENTION = re.compile(r"<@!?([A-Za-z0-9_.-]+)>|(?<![\w])@([\w.-]+)")


def name_pattern(name: str) -> re.Pattern[str] | None:
    """A case-insensitive whole-word pattern for one name, with an optional @ and possessive 's."""
    name = " ".join(name.split())
    if len(name) < 2:
        return None
    return re.compile(r"(?<![\w@])@?" + re.escape(name) + r"(?:'s|’s)?(?![\w])", re.I)


# A nick's decorations: "kenji|work", "Tess_R", "Nkechi.O", "jpb-away". People call such a member by the part
# before the first separator ("kenji: try nomodeset"), as IRC, Matrix and Discord users do.
_NICK_STEM = re.compile(r"([^\W_]{3,})[|_.\-]\S*")


def nick_stem(name: str) -> str | None:
    """The name people call a one-word nick by ("kenji" for "kenji|work"), or None when it has no decoration."""
    name = name.strip()
    m = _NICK_STEM.fullmatch(name) if " " not in name else None
    return m.group(1) if m else None


def member_names(p: Person) -> list[str]:
    """Every name a member goes by: display name, its first word, aliases, and the platform id."""
    names = [p.display_name, *p.aliases, p.person_id]
    first = p.display_name.split()[0] if p.display_name.split() else ""
    if first:
        names.append(first)
    return [n for n in dict.fromkeys(" ".join(n.split()) for n in names) if len(n) >= 2]


def nick_stems(roster: Sequence[Person]) -> dict[str, str]:
    """Person id for each nick stem that names one member only and is no other member's name."""
    taken = {n.casefold() for p in roster for n in member_names(p)}
    owners: dict[str, set[str]] = {}
    for p in roster:
        for n in (p.display_name, *p.aliases):
            stem = nick_stem(n)
            if stem:
                owners.setdefault(stem.casefold(), set()).add(p.person_id)
    return {stem: next(iter(ids)) for stem, ids in owners.items() if len(ids) == 1 and stem not in taken}


class People:
    """Finds the roster members a text names, aliases, @mentions or replies to."""

    def __init__(self, roster: Sequence[Person], *, include_bots: bool = False) -> None:
        self.roster = [p for p in roster if include_bots or not p.is_bot]
        self.patterns: list[tuple[str, str, re.Pattern[str]]] = []  # (person id, name, pattern)
        seen: set[tuple[str, str]] = set()
        self.stems = nick_stems(self.roster)  # nick stem -> person id ("kenji" -> the id of kenji|work)
        stems_of: dict[str, list[str]] = {}
        for stem, pid in self.stems.items():
            stems_of.setdefault(pid, []).append(stem)
        for p in self.roster:
            for name in [*member_names(p), *stems_of.get(p.person_id, [])]:
                pat = name_pattern(name)
                if pat is not None and (p.person_id, name.casefold()) not in seen:
                    seen.add((p.person_id, name.casefold()))
                    self.patterns.append((p.person_id, name, pat))
        self.patterns.sort(key=lambda t: -len(t[1]))  # longer names first: "Mary Ann" before "Mary"
        self._needles = [name.lower() if name.isascii() else None for _, name, _ in self.patterns]
        self._found: dict[str, list[tuple[str, str, int, int]]] = {}  # text -> mentions (one roster's lookups)
        self._ids = {p.person_id.casefold(): p.person_id for p in self.roster}
        self._display = {p.display_name.casefold(): p.person_id for p in self.roster}

    def found(self, text: str) -> list[tuple[str, str, int, int]]:
        """(person id, the words that named them, start, end) for each mention, in text order."""
        cached = self._found.get(text)
        if cached is None:
            if len(self._found) >= 4096:
                self._found.clear()
            cached = self._found[text] = self._find(text)
        return list(cached)

    def _find(self, text: str) -> list[tuple[str, str, int, int]]:
        hits: list[tuple[int, int, str, str]] = []
        taken: list[tuple[int, int]] = []
        # An ASCII name can only match an ASCII text where its lower-cased words occur: a substring test
        # skips most of a large roster's patterns at C speed (re.I folds more than lower() outside ASCII).
        lowered = text.lower() if text.isascii() else None
        for (pid, _name, pat), needle in zip(self.patterns, self._needles):
            if lowered is not None and needle is not None and needle not in lowered:
                continue
            for m in pat.finditer(text):
                if any(a < m.end() and m.start() < b for a, b in taken):
                    continue  # inside a longer name already found
                taken.append((m.start(), m.end()))
                hits.append((m.start(), m.end(), pid, m.group(0)))
        for m in _MENTION.finditer(text):
            ident = (m.group(1) or m.group(2) or "").casefold()
            found = self._ids.get(ident) or self._display.get(ident)
            if found and not any(a <= m.start() < b for a, b in taken):
                hits.append((m.start(), m.end(), found, m.group(0)))
        return [(pid, words, a, b) for a, b, pid, words in sorted(hits)]

    def named(self, text: str) -> list[str]:
        """Person ids named in ``text``, in order of first appearance."""
        return list(dict.fromkeys(pid for pid, *_ in self.found(text)))

    def name_words(self) -> set[str]:
        """Every word of the members' names, aliases and ids, lower-cased."""
        return {w for _, name, _ in self.patterns for w in re.findall(r"\w+", name.casefold())}

    def followed_by(self, text: str, pid: str, after: re.Pattern[str]) -> bool:
        """Whether a mention of ``pid`` under any of their names continues with ``after``."""
        for who, _name, pat in self.patterns:
            if who == pid:
                for m in pat.finditer(text):
                    if after.match(text, m.end()):
                        return True
        return False

    def referenced(self, msg: StoredMessage, window: Sequence[StoredMessage]) -> list[str]:
        """Named in the text, or the author of the message this one replies to (the author excluded)."""
        out = [p for p in self.named(msg.text) if p != msg.author_id]
        if msg.reply_to:
            parent = next((m for m in window if m.msg_id == msg.reply_to), None)
            if parent is not None and parent.author_id != msg.author_id and parent.author_id not in out:
                out.append(parent.author_id)
        return out

    def non_members(self, text: str) -> list[str]:
        """People ``text`` names who are not members: spaCy NER PERSON entities none of whose words is a
        member's name word ("my sister Anna", "Dr Okafor"). Empty without the pipeline (logged once)."""
        from .nlp import NlpUnavailable, parse

        try:
            parsed = parse(text)
        except NlpUnavailable:
            _warn_once()
            return []
        if not hasattr(self, "_words"):
            self._words = self.name_words()
        members = self._words
        out: list[str] = []
        for e in parsed.entities:
            words = set(re.findall(r"\w+", e.text.casefold()))
            if e.label == "PERSON" and words and not words & members and e.text not in out:
                out.append(e.text)
        return out

    def strip(self, text: str) -> str:
        """``text`` with every member's name taken out (closeness in meaning should be about the topic)."""
        spans = [(a, b) for _, _, a, b in self.found(text)]
        if not spans:
            return text
        out, last = [], 0
        for a, b in spans:
            out.append(text[last:a])
            last = b
        out.append(text[last:])
        return " ".join("".join(out).split()) or text
