"""Project a question onto rows (people, ALL, GROUP), an issue phrase and a tense.

Deterministic rules first: names, aliases and @mentions pick people; words like
"each", "everyone", "who never" ask for every member; decisions, norms and "we"
ask for the GROUP row; "used to", "originally", "changed" or a pinned date ask for
the full update history instead of the current state.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ftsquery import terms
from ..records import GROUP
from ..store import Person
from .dates import DateRef, find_dates

ALL = "ALL"

_ALL_WORDS = re.compile(r"\b(each|every(one|body)?|all of (us|them|you)|who never|who (has|have|had)n'?t|nobody|"
                        r"no one|anyone|anybody|which (members?|people|person)|members?|both|who else|"
                        r"the others|all the)\b", re.I)
_GROUP_WORDS = re.compile(r"\b(decid(e|ed|ing)|decision|agree(d|ment)?|consensus|settle(d)?|plan(ned|s)?|norms?|"
                          r"rules?|polic(y|ies)|the group|the team|as a group|together|we|us|our|everyone agreed|"
                          r"convention|expected to|supposed to|usually do)\b", re.I)
# Words shared with the reply (memory/query/reply.py): an opinion asked for, and a change over time.
VIEW_WORDS = r"think|thinks|feel|feels|view|opinion|prefer|prefers|want|wants|stand"
CHANGE_WORDS = r"used to|originally|at first|initially|chang(e|ed|es)|previously|switch(ed)?|no longer"
_STANCE_EACH = re.compile(rf"\b(each|every(one|body)?)\b.*\b({VIEW_WORDS}|stance|position)\b", re.I)
_FULL_WORDS = re.compile(rf"\b({CHANGE_WORDS}|changing|before|earlier|at the time|back (in|then|when)|any ?more|"
                         r"anymore|evolv(e|ed)|over time|history|first time|instead|still|when did|how long)\b", re.I)
# "Who said / suggested / gave X as the reason?": the answer is a verbatim message, and its author.
_ATTRIBUTION = re.compile(r"\b(who|which of (them|the two|us|you|these))\b.{0,40}?\b(said|says|say|mentioned|"
                          r"suggested|proposed|asked|wrote|gave|claimed|brought up|pointed out|complained|"
                          r"admitted|offered|came up with|told|insisted|argued|joked|called|pushed back|objected|"
                          r"voiced|raised|cited|expressed)\b", re.I)
_WHO_OF = re.compile(r"(^|[.?!]\s+)(who|whose)\b", re.I)  # a sentence that asks which person
_MENTION = re.compile(r"<@!?([A-Za-z0-9_.-]+)>|@([\w.-]+)")
_QUESTION_WORDS = {"what", "who", "whom", "whose", "when", "where", "why", "how", "which", "did", "does", "do",
                   "is", "are", "was", "were", "say", "said", "tell", "think", "thinks"}


@dataclass
class Projection:
    rows: list[str]  # person ids, ALL, GROUP (ALL is expanded by the caller)
    issue: str
    tense: str  # "head" or "full"
    people: list[str] = field(default_factory=list)  # person ids named in the question
    dates: list[DateRef] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    attribution: bool = False  # "who said X?": person rows must not crowd out the verbatim message


def _name_pattern(name: str) -> re.Pattern | None:
    name = " ".join(name.split())
    if len(name) < 2:
        return None
    return re.compile(r"(?<![\w])" + re.escape(name) + r"(?:'s|’s)?(?![\w])", re.I)


def project(question: str, roster: Sequence[Person], *, asked_at: float | None = None,
            asker_id: str | None = None) -> Projection:
    """Rows, issue and tense for ``question`` given the channel's roster."""
    reasons: list[str] = []
    named: list[str] = []
    names_found: list[str] = []
    for person in roster:
        for name in {person.person_id, *person.names(), person.display_name.split()[0]}:
            pat = _name_pattern(name)
            if pat and pat.search(question):
                if person.person_id not in named:
                    named.append(person.person_id)
                names_found.append(name)
                break
    for m in _MENTION.finditer(question):
        ident = (m.group(1) or m.group(2) or "").casefold()
        for person in roster:
            if ident in (person.person_id.casefold(), person.display_name.casefold()) and person.person_id not in named:
                named.append(person.person_id)
                names_found.append(m.group(0))
    if asker_id and re.search(r"\b(I|me|my|mine|myself)\b", question) and asker_id not in named:
        if any(p.person_id == asker_id for p in roster):
            named.append(asker_id)
            reasons.append("first person -> the asker")

    rows: list[str] = list(named)
    wants_all = bool(_ALL_WORDS.search(question))
    if wants_all or not named:
        rows = [ALL]
        reasons.append("every member" if wants_all else "no one named -> every member (a wide slice loses nothing)")
    elif named:
        reasons.append("named: " + ", ".join(names_found))
    if _GROUP_WORDS.search(question) and not _STANCE_EACH.search(question):
        rows.append(GROUP)
        reasons.append("group decision/norm words -> GROUP row")
    elif rows == [ALL] and not _STANCE_EACH.search(question):
        rows.append(GROUP)
    dates = find_dates(question, asked_at) if asked_at else []
    tense = "full" if (_FULL_WORDS.search(question) or dates) else "head"
    if tense == "full":
        reasons.append("history wanted (change words or a pinned date)")

    drop = {t for n in names_found for t in terms(n, keep_stopwords=True)} | _QUESTION_WORDS
    issue_terms = [t for t in terms(question) if t not in drop]
    issue = " ".join(issue_terms) or question.strip()
    # Also "Both A and B ... Who ...?": telling two named people apart by what each of them said.
    attribution = bool(_ATTRIBUTION.search(question) or len(named) >= 2 and _WHO_OF.search(question))
    if attribution:
        reasons.append("who said it -> verbatim messages first")
    return Projection(rows, issue, tense, named, dates, reasons, attribution)
