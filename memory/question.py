"""The question analysis: one typed `Question` from the question text, the roster and the asking time.

This is the one place that reads a question. Search (its chat signals), the evidence
composer, the reranker, the decline and the reply's shape all read the `Question` it
returns; none of them pattern-matches the question text again.

What it finds, and with what:
- people: roster members named, aliased or @mentioned (memory/people.py); names spaCy's
  NER tags as a person that are not members are "mentioned" when the visible scopes use
  the word, and "unknown" when they never do. A capitalised word alone is never a person.
- the kind of answer wanted (person, time, amount, place, reason, yes/no, stance, thing)
  from the question's wh-word and its head noun, read off spaCy's tags;
- time pins: spaCy's DATE entities resolved by dateparser against the asking time;
- the tense (current state or history) and the each-member / who-hasn't / who-said forms.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Literal

from . import nlp
from .catchup.intent import catchup_request
from .ftsquery import stem, terms
from .indirect import indirect
from .models import GROUP
from .people import People
from .store import Person

ALL = "ALL"
Kind = Literal["person", "time", "amount", "place", "reason", "yesno", "stance", "thing"]
KINDS: tuple[str, ...] = ("person", "time", "amount", "place", "reason", "yesno", "stance", "thing")

# The words below are the question forms this module recognises. They are question grammar (which
# member, which row, which tense), not facts about any chat, and no library tags them.
_EACH = re.compile(r"\b(each|every(one|body)(?!\s+agreed)|all of (us|them|you)|both|every member|each member|"
                   r"each person|the others)\b", re.I)
_ALL_WORDS = re.compile(r"\b(each|every(one|body)?|all of (us|them|you)|who never|who (has|have|had)n'?t|nobody|"
                        r"no one|anyone|anybody|which (members?|people|person)|members?|both|who else|"
                        r"the others|all the)\b", re.I)
_GROUP_WORDS = re.compile(r"\b(decid(e|ed|ing)|decision|agree(d|ment)?|consensus|settle(d)?|plan(ned|s)?|norms?|"
                          r"rules?|polic(y|ies)|the group|the team|as a group|together|we|us|our|everyone agreed|"
                          r"convention|expected to|supposed to|usually do)\b", re.I)
# Questions whose answer is spread over the members: search keeps one hit per member in view.
_SPREAD = re.compile(r"\b(each|every(one|body)?|all (of )?(us|them|you|the (members|people))|who never|nobody|"
                     r"no one|which (members?|people|person)|both)\b", re.I)
# Words that say what kind of answer is wanted, not what it is about: left out of the embedded question.
_ASKING = frozenset("""what who whom whose when where why how which did does do is are was were has have had
tell say said mention mentioned remember recall ever the a an""".split())
_GROUP_ASK = re.compile(r"\b(decid\w*|decision\w*|agree\w*|plans?|planned|rules?|settled|norms?)\b", re.I)
_VIEW = re.compile(r"\b(think|thinks|thought|feel|feels|felt|view|views|opinion|opinions|prefer|prefers|stance|"
                   r"position|like|likes|liked|want|wants|wanted|stand)\b", re.I)
_CHANGE = re.compile(r"\b(used to|originally|at first|initially|chang(e|ed|es)|previously|switch(ed)?|no longer|"
                     r"before (it|the|that|we|they)|previous|earlier|old plan|moved|instead of|what was the)\b", re.I)
_FULL = re.compile(r"\b(used to|originally|at first|initially|chang(e|ed|es|ing)|previously|switch(ed)?|"
                   r"no longer|before|earlier|at the time|back (in|then|when)|any ?more|evolv(e|ed)|over time|"
                   r"history|first time|instead|still|when did|how long)\b", re.I)
# Which end of a plan's history the question wants: the first version ("what was the original date?",
# "where was it going to be?", "before it moved") or the whole story ("how did it change?"); otherwise what
# holds now.
_EARLIER = re.compile(r"\b(original(ly)?|at first|first (date|time|plan|place|venue|day|version|idea)|initial(ly)?|"
                      r"used to|(was|were) (\w+ ){0,3}(going|supposed|meant|planned) to|"
                      r"before (it|the|that|they|we) (got |was |were )?(moved|changed|switched|postponed|"
                      r"rescheduled|cancel+ed)|old (date|time|plan|place|venue|day|one)|previous(ly)?|"
                      r"in the first place)\b", re.I)
_HISTORY = re.compile(r"\b(how (did|has|have) .{0,40}chang\w*|history of|what changed|every change|all the changes|"
                      r"how many times)\b", re.I)
# Words that ask which version of something holds: what it is now, or what it came to. With _EARLIER and
# _HISTORY they say a question is about a plan's versions, which is what a state reply reads (docs/replies.md).
_NOW_VERSION = re.compile(r"\b(now|currently|current|still|any ?more|latest|these days|at the moment|in the end|"
                          r"ended up|final(ly)?)\b", re.I)
_ABSENT = re.compile(r"\bwho\s+(hasn'?t|has not|haven'?t|have not|didn'?t|did not|never|isn'?t|is not|"
                     r"won'?t|will not|can'?t|cannot)\b\s*(?P<what>.*)", re.I)
_ATTRIBUTION = re.compile(r"\b(who|which of (them|the two|us|you|these))\b.{0,40}?\b(said|says|say|mentioned|"
                          r"suggested|proposed|asked|wrote|gave|claimed|brought up|pointed out|complained|"
                          r"admitted|offered|came up with|told|insisted|argued|joked|called|pushed back|objected|"
                          r"voiced|raised|cited|expressed)\b", re.I)
_WHO = re.compile(r"(^|[.?!]\s+)(who|whose)\b", re.I)
_FIRST_PERSON = re.compile(r"\b(I|me|my|mine|myself)\b")
# "what/which <noun>": the noun says the kind. WordNet would give a noun's category, but its corpus is a
# download; these are the nouns questions about group chats use for a time, an amount and a place.
_TIME_NOUNS = frozenset("time day date year month week hour night evening morning deadline".split())
_AMOUNT_NOUNS = frozenset("price cost amount number fee total budget rent bill score count size percentage "
                          "length duration".split())
_PLACE_NOUNS = frozenset("place venue address location spot restaurant bar pub cafe room city town hall "
                         "station meeting point where".split())
# Words that frame a question rather than say what it is about.
QUESTION_FRAMING = frozenset("""
said says say saying mention mentioned mentions told tell tells think thinks thought feel feels felt wrote
write asked ask answer answered reply replied chat channel group message messages memory remember
according yes no also still now earlier later latest current currently previously before after then
decided decide agreed agree plan planned wants want wanted likes like prefers prefer prefered preferred
person people someone everyone everybody members member they them their he she his her it its
tell know find remember happen happened anything something going gonna
hi hello hey hiya yo thanks thank cheers ok okay please chorus bot test testing much many
hasn haven hadn yet what who whom whose when where why how which did does do is are was were
""".split())
# dateparser knows no holidays; the ones group chats plan around, as (month, day).
_HOLIDAYS = {"christmas eve": (12, 24), "christmas day": (12, 25), "christmas": (12, 25), "boxing day": (12, 26),
             "new year's eve": (12, 31), "new years eve": (12, 31), "new year's day": (1, 1),
             "new years day": (1, 1), "halloween": (10, 31), "valentine's day": (2, 14), "valentines day": (2, 14)}


@dataclass(frozen=True)
class Pin:
    """A period the question names, as [start, end) timestamps (UTC), with its words."""

    text: str
    start: float
    end: float


@dataclass
class Question:
    """Everything downstream needs to know about a question."""

    text: str
    asked_at: float
    people: list[str] = field(default_factory=list)  # roster person ids named (and the asker for "I/me")
    named: list[str] = field(default_factory=list)  # roster person ids the text itself names
    names_found: list[str] = field(default_factory=list)  # the words that named them
    reader_text: str = ""  # the text as the reader reads it: a member called by a nick stem under their nick
    mentioned: list[str] = field(default_factory=list)  # non-member person names the visible chat uses
    unknown: list[str] = field(default_factory=list)  # names (NER) the visible chat never uses
    unknown_people: list[str] = field(default_factory=list)  # those of them NER takes for people
    kind: str = "thing"  # one of KINDS
    pins: list[Pin] = field(default_factory=list)
    tense: str = "head"  # "head" (current state) or "full" (history)
    each: bool = False  # what does each member think / say
    absent: bool = False  # who hasn't ...
    attribution: bool = False  # who said ...: the verbatim message, not the person's records
    change: bool = False  # how did it change: earlier and latest, in order
    era: str = "now"  # which end of a plan's history: "now" (what holds), "earlier" (the first), "history" (all)
    asks_version: bool = False  # it names a version: what holds now, the first one, or how it changed
    group_ask: bool = False  # what did we decide / plan / rule
    spread: bool = False  # the answer is spread over the members (search keeps each member in view)
    rows: list[str] = field(default_factory=list)  # person ids, ALL, GROUP (ALL is expanded by the composer)
    stems: list[str] = field(default_factory=list)  # what the question is about: content stems, no names
    issue: str = ""  # the topic words as text (records search)
    dense_text: str = ""  # the question without names, for closeness in meaning
    catchup: str | None = None  # a catch-up request ("what did I miss?"): its start ('' = default), else None
    missing: str | None = None  # the question as a clause a decline can name ("how much dinner cost"), if it reads

    reasons: list[str] = field(default_factory=list)

    @property
    def periods(self) -> list[tuple[float, float]]:
        return [(p.start, p.end) for p in self.pins]

    @property
    def reads_chain(self) -> bool:
        """Whether a plan's chain of versions can answer it: it asks for a value a plan holds (a time, a place,
        an owner), or names a version (now, the first, how it changed) of anything but a reason or a view, which
        no version holds."""
        return self.kind in ("time", "place", "person") or self.asks_version and self.kind not in ("reason", "stance")

    @property
    def wants_members(self) -> bool:
        """Whether the reply lists members one by one."""
        return self.absent or self.each


def content_stems(text: str, *, drop: Iterable[str] = ()) -> list[str]:
    """Stems of the content words of ``text`` (stopwords and ``drop`` left out), in order, unique."""
    dropped = set(drop)
    out: dict[str, None] = {}
    for w in terms(text):
        if w in dropped or len(w) < 2 and not w.isdigit():
            continue
        out[stem(w) if w.isalpha() else w] = None
    return list(out)


def dense_query(question: str) -> str:
    """The question without its asking words, for embedding ("When did Mel paint?" -> "Mel paint")."""
    kept = [w for w in re.findall(r"\S+", question) if not set(terms(w, keep_stopwords=True)) <= _ASKING]
    return " ".join(kept) or question


def _day_ts(d: date) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


@lru_cache(maxsize=1)
def _date_parser():
    import dateparser  # loaded on first use: importing it costs about 0.3 s

    return dateparser.DateDataParser(languages=["en"], settings={"PREFER_DATES_FROM": "past"})


def resolve_period(text: str, at: float) -> tuple[float, float] | None:
    """The [start, end) timestamps ``text`` ("next Thursday", "in May", "Christmas Eve") means, said at ``at``."""
    words = " ".join(text.casefold().replace("’", "'").split())
    now = datetime.fromtimestamp(at, tz=UTC)
    for name, (month, day) in _HOLIDAYS.items():
        if name in words:
            year = now.year - ((month, day) > (now.month, now.day) and "next" not in words)
            d = date(year, month, day)
            return _day_ts(d), _day_ts(d + timedelta(days=1))
    words = re.sub(r"^(in|on|during|since|by|for|over|until|till|before|after|around|at)\s+", "", words)
    parser = _date_parser()
    parser._settings.RELATIVE_BASE = now.replace(tzinfo=None)  # dateparser reads the base from its settings
    data = parser.get_date_data(words)
    if data is None or data.date_obj is None:
        return None
    d = data.date_obj.date()
    period = data.period or "day"
    if period == "year":
        return _day_ts(date(d.year, 1, 1)), _day_ts(date(d.year + 1, 1, 1))
    if period == "month":
        first = date(d.year, d.month, 1)
        nxt = date(d.year + d.month // 12, d.month % 12 + 1, 1)
        return _day_ts(first), _day_ts(nxt)
    if period == "week":
        monday = d - timedelta(days=d.weekday())
        return _day_ts(monday), _day_ts(monday + timedelta(days=7))
    return _day_ts(d), _day_ts(d + timedelta(days=1))


def _kind(doc, text: str) -> str:
    """The kind of answer from the first wh-word (or a leading auxiliary) and the noun it asks about."""
    toks = [t for t in doc if not t.is_punct]
    for i, t in enumerate(toks):
        low = t.lower_
        nxt = toks[i + 1].lower_ if i + 1 < len(toks) else ""
        if low in ("who", "whom", "whose"):
            return "person"
        if low == "when":
            return "time"
        if low == "where":
            return "place"
        if low == "why":
            return "reason"
        if low == "how":
            if nxt in ("much", "many", "long", "old", "far", "often", "big", "tall", "heavy", "soon"):
                return "time" if nxt == "soon" else "amount"
            return "stance" if _VIEW.search(text) else "thing"
        if low in ("what", "which"):
            # The noun the wh-word asks about: the root of the first noun phrase from the wh-word on
            # ("what time", "what's the Airbnb check-in time", "which day").
            chunk = next((c for c in doc.noun_chunks if c.end > t.i and c.root.i != t.i), None)
            noun = chunk.root.lower_ if chunk is not None and chunk.start <= t.i + 4 else ""
            if noun in _TIME_NOUNS:
                return "time"
            if noun in _AMOUNT_NOUNS:
                return "amount"
            if noun in _PLACE_NOUNS:
                return "place"
            if noun in ("member", "members", "person", "people", "one") and low == "which":
                return "person"
            return "stance" if _VIEW.search(text) else "thing"
    return _no_wh_kind(toks, text)


def _no_wh_kind(toks, text: str) -> str:
    first = toks[0] if toks else None
    if first is not None and first.pos_ in ("AUX", "VERB") and first.tag_ in ("VBZ", "VBD", "VBP", "MD", "VB"):
        return "stance" if _VIEW.search(text) else "yesno"
    return "stance" if _VIEW.search(text) else "thing"


# A question is read up to this many characters: enough for any real question, and a pasted megabyte is
# not parsed word by word (spaCy takes minutes on a million characters; search still sees the whole text).
MAX_QUESTION_CHARS = 2000


def _as_the_chat_names(text: str, people: People) -> str:
    """``text`` with each member it calls by a nick stem ("Tess") written as the chat shows them ("Tess_R").

    The reader reads a candidate as "Tess_R: ..." and was trained on questions that name members as their
    messages do; a stem alone leaves it unsure the question is about that author.
    """
    shown = {p.person_id: p.display_name for p in people.roster}
    out, last = [], 0
    for pid, words, a, b in people.found(text):
        at = "@" if words.startswith("@") else ""
        name, tail = words[len(at):], ""
        if name.lower().endswith(("'s", "’s")):
            name, tail = name[:-2], name[-2:]
        if people.stems.get(name.casefold()) == pid:
            out += [text[last:a], at + shown[pid] + tail]
            last = b
    return "".join(out) + text[last:]


def analyse(text: str, roster: Sequence[Person], *, asked_at: float, asker_id: str | None = None,
            known: Callable[[list[str]], set[str]] | None = None) -> Question:
    """The typed analysis of ``text`` asked in a channel with ``roster`` at ``asked_at``.

    ``known`` takes lower-cased words and returns those the visible scopes' messages use; it decides
    whether a name the question gives that is no member's is someone the chat mentions or a stranger.
    """
    text = text[:MAX_QUESTION_CHARS]
    q = Question(text=text, asked_at=asked_at, catchup=catchup_request(text))
    people = People(roster)
    q.reader_text = _as_the_chat_names(text, people)
    doc = nlp.doc(text)
    # A name inside a longer date ("8 May, 2023") is the date, not the member called May.
    dates = [(e.start_char, e.end_char) for e in doc.ents if e.label_ == "DATE"]
    spans: list[tuple[int, int]] = []
    for pid, said, a, b in people.found(text):
        if any(da <= a and b <= db and (db - da) > (b - a) for da, db in dates):
            continue
        spans.append((a, b))
        if pid not in q.named:
            q.named.append(pid)
        q.names_found.append(said)
    q.people = list(q.named)
    if asker_id and _FIRST_PERSON.search(text) and asker_id not in q.people \
            and any(p.person_id == asker_id for p in roster):
        q.people.append(asker_id)
        q.reasons.append("first person -> the asker")
    member_words = people.name_words()
    # Names NER finds that are not members: the chat either mentions them (a topic) or never does.
    outside = [e.text for e in doc.ents if e.label_ in ("PERSON", "ORG", "PRODUCT", "GPE", "WORK_OF_ART", "FAC",
                                                        "EVENT", "NORP", "LOC")
               and not set(terms(e.text, keep_stopwords=True)) <= member_words]
    outside += [t.text for t in doc if t.pos_ == "PROPN" and t.ent_type_ == "" and t.i > 0
                and t.lower_ not in member_words and len(t.text) > 2]
    if outside:
        words = sorted({w for n in outside for w in terms(n)})
        used = known(words) if known is not None else set(words)
        for name in dict.fromkeys(outside):
            own = [w for w in terms(name) if w not in member_words]
            if own and not any(w in used for w in own):
                q.unknown.append(name)
                if any(e.text == name and e.label_ == "PERSON" for e in doc.ents):
                    q.unknown_people.append(name)
            elif any(e.text == name and e.label_ == "PERSON" for e in doc.ents):
                q.mentioned.append(name)
    q.kind = _kind(doc, text)
    q.missing = indirect(doc)
    for ent in doc.ents:
        if any(a < ent.end_char and ent.start_char < b for a, b in spans):
            continue  # a member's name ("May") is no date
        if ent.label_ in ("DATE", "EVENT") or ent.label_ == "TIME" and not re.search(r"\d", ent.text):
            period = resolve_period(ent.text, asked_at)
            if period is not None:
                q.pins.append(Pin(ent.text, *period))
    absent = _ABSENT.search(text)
    q.absent = bool(absent)
    q.spread = bool(_SPREAD.search(text))
    q.each = bool(_EACH.search(text) or len(q.people) >= 2 and _VIEW.search(text))
    q.attribution = bool(_ATTRIBUTION.search(text) or len(q.people) >= 2 and _WHO.search(text))
    q.change = bool(_CHANGE.search(text))
    q.era = "earlier" if _EARLIER.search(text) else "history" if _HISTORY.search(text) else "now"
    q.asks_version = q.era != "now" or bool(_NOW_VERSION.search(text))
    q.tense = "full" if (_FULL.search(text) or q.pins) else "head"
    stance_each = q.each and q.kind == "stance"
    q.rows = list(q.people)
    wants_all = bool(_ALL_WORDS.search(text))
    if wants_all or not q.people:
        q.rows = [ALL]
        q.reasons.append("every member" if wants_all else "no one named -> every member")
    else:
        q.reasons.append("named: " + ", ".join(q.names_found))
    if (_GROUP_WORDS.search(text) or q.rows == [ALL]) and not stance_each:
        q.rows.append(GROUP)
    drop = {t for n in q.names_found for t in terms(n, keep_stopwords=True)} | member_words
    q.stems = content_stems(text, drop=drop | QUESTION_FRAMING)
    q.group_ask = bool(_GROUP_ASK.search(text)) and not q.stems and not q.people
    issue_terms = [t for t in terms(text) if t not in drop and t not in QUESTION_FRAMING]
    q.issue = " ".join(issue_terms) or text.strip()
    q.dense_text = people.strip(text)
    q.reasons.append(f"answer kind: {q.kind}")
    if q.tense == "full":
        q.reasons.append("history wanted (change words or a pinned date)")
    return q
