"""What a chat question says beyond its words: who it names, which period it pins, whether it asks
about each member. Search turns these into boosts (see memory/fusion.py); each is measured on
its own in docs/retrieval.md.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC

from .ftsquery import terms

_EACH = re.compile(r"\b(each|every(one|body)?|all (of )?(us|them|you|the (members|people))|who never|nobody|no one|"
                   r"which (members?|people|person)|both)\b", re.I)
# Words that say what kind of answer is wanted, not what it is about: left out of the text embedded
# for the question when `rewrite` is on.
_ASKING = frozenset("""what who whom whose when where why how which did does do is are was were has have had
tell say said mention mentioned remember recall ever the a an""".split())


_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
# "in March", "during May 2023", "early June": a month after a preposition (so "may I" is no date).
_MONTH = re.compile(r"\b(?:in|during|since|before|after|of|early|late|mid|last|this)\s+"
                    r"(?P<month>(?:Jan|Febr)uary|March|April|May|June|July|August|(?:Sept|Octo|Nov|Dec)ember|"
                    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\b(?:,?\s+(?P<year>(?:19|20)\d\d))?", re.I)
_YEAR = re.compile(r"\b(?:in|during|since|of)\s+((?:19|20)\d\d)\b(?!\s*-)", re.I)


@dataclass
class QuestionSignals:
    authors: list[str] = field(default_factory=list)  # author ids the question names
    periods: list[tuple[float, float]] = field(default_factory=list)  # [start, end) timestamps
    each: bool = False


def _pattern(name: str) -> re.Pattern | None:
    name = " ".join(name.split())
    if len(name) < 2:
        return None
    return re.compile(r"(?<![\w])" + re.escape(name) + r"(?:'s|’s)?(?![\w])", re.I)


def named_authors(question: str, people: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Ids of the people (id, names) whose id, a name, or a name's first word occurs in ``question``."""
    found: list[str] = []
    for pid, names in people:
        options = {pid, *names, *(n.split()[0] for n in names if n.split())}
        if any((pat := _pattern(n)) is not None and pat.search(question) for n in options):
            found.append(pid)
    return found


def asks_each(question: str) -> bool:
    """True for questions about every member ("what does each of us think", "who never ...")."""
    return bool(_EACH.search(question))


def pinned_periods(question: str, asked_at: float | None) -> list[tuple[float, float]]:
    """The [start, end) periods, as timestamps, of the dates the question names."""
    if asked_at is None:
        return []
    from datetime import date, datetime, time

    from .query.dates import find_dates  # a leaf module: no cycle through the query package's users

    def stamp(d) -> float:
        return datetime.combine(d, time(), tzinfo=UTC).timestamp()

    out = [(stamp(ref.start), stamp(ref.end)) for ref in find_dates(question, asked_at)]
    today = datetime.fromtimestamp(asked_at, tz=UTC).date()
    for m in _MONTH.finditer(question):
        month = _MONTHS.index(m.group("month")[:3].lower()) + 1
        year = int(m.group("year")) if m.group("year") else today.year - (month > today.month)
        out.append((stamp(date(year, month, 1)), stamp(date(year + month // 12, month % 12 + 1, 1))))
    for m in _YEAR.finditer(question):
        year = int(m.group(1))
        out.append((stamp(date(year, 1, 1)), stamp(date(year + 1, 1, 1))))
    return out


def read_question(question: str, people: Sequence[tuple[str, Sequence[str]]],
                  asked_at: float | None) -> QuestionSignals:
    return QuestionSignals(named_authors(question, people), pinned_periods(question, asked_at),
                           asks_each(question))


def dense_query(question: str) -> str:
    """The question without its asking words, for embedding ("When did Mel paint?" -> "Mel paint")."""
    kept = [w for w in re.findall(r"\S+", question) if not set(terms(w, keep_stopwords=True)) <= _ASKING]
    return " ".join(kept) or question
