"""What kind of fact a question demands, and whether a message states one.

"How much does the café charge for coffee?" is not answered by messages about the
café that name no price, and "what's the campsite called?" not by ones that never
name it. When a question asks for a price, a length of time, a name, a colour, a date still
to come, or pins a month, and none of the on-topic messages holds that kind of
fact, the honest reply is a decline that shows what the chat does say. Likewise
"what did we think of the ending of the last book?" is not answered by messages
about the book that never mention an ending: a question that asks a view of one
named part of a thing ("think of the <part> of the <thing>") needs a message
that names the part. The checks
are deliberately narrow (a question must ask for the kind explicitly), because a
wrong decline hides evidence the user wanted.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence

from ..ftsquery import stem, terms
from .support import TIME_WORDS, content_stems

_NUM_WORDS = (r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|"
              r"fifty|sixty|hundred|thousand|a|an|half|a couple of|a few|several|couple")
_QUESTIONS = {
    # a price, a cost or a sum owed: "how much does X cost / charge", "what's the rent"
    # and "how much is the pizza" (a price unless said otherwise; "how much of the book" asks a share)
    "money": re.compile(r"\bhow much\b.*\b(cost|costs|charge|charges|price|pay|paid|owe|owes|owed|spend|spent|"
                        r"bill|fee|rent|worth|deposit|budget)\b|\b(what|how much) (is|was|'s) the (price|cost|"
                        r"fee|rent|bill)\b|\bhow much (is|are|was|were|'s) (the|a|an|one|each) \w+\W*$", re.I),
    # a length of time the chat must state: "how long is the drive", "how long does it take"; not "how long
    # did it take" or "how long has she", which a timeline of several messages answers
    "duration": re.compile(r"\bhow long (is|are|will|does|do|'s)\b", re.I),
    # a name: "what is the name of the campsite", "what's the café called"
    "name": re.compile(r"\b(what|which)('s| is| was| are)? (the )?names? of\b|\bwhat('s| is| was) (it|the \w+|"
                       r"\w+'s \w+) called\b|\bwhat('s| is| was) \w+'s (\S+ )?name\b", re.I),
    # a colour: "what colour are we painting the living room"
    "colour": re.compile(r"\b(what|which) colou?rs?\b", re.I),
    # a date or time that the chat must state: "when is the inspection", "when's Omar's birthday"
    # ("when does Joey get upset" asks for a moment in a story, which a clause answers)
    "date": re.compile(r"\bwhen(?:'s| is| are| will)\b(?! it that)", re.I),
}
_MONEY = re.compile(r"[$€£¥]\s?\d|\d\s?(k\b|%|[$€£¥])|\b\d[\d,.]*\s+[a-z]+\s+(euros?|dollars?|bucks|pounds?|quid)\b"
                    r"|\b\d[\d,.]*\s*(euros?|dollars?|bucks|pounds?|quid|"
                    r"usd|eur|gbp|each|per|a head|apiece|total|cents?|p\b)|\b(" + _NUM_WORDS + r")\s+(euros?|"
                    r"dollars?|bucks|pounds?|quid|grand)\b|\b(free|nothing|cost|costs|paid|pay|owe|owes|is|was|"
                    r"were|be|for|about|around|only|just)\s+\d[\d,.]*(?!\s*(am|pm|st|nd|rd|th|:|\.\d|o'?clock))\b",
                    re.I)
_DURATION = re.compile(r"\b(\d[\d,.]*|" + _NUM_WORDS + r")[\s-]*(sec(ond)?s?|min(ute)?s?|h(ou)?rs?|hours?|days?|"
                       r"nights?|weeks?|months?|years?|decades?)\b|\b(since|for ages|all day|all night|overnight)\b",
                       re.I)
# A stated date: the reply check's time words, short day and month names, and "12/5" (not "2 days ago").
_DATE = re.compile(r"\b(" + TIME_WORDS + r"|mon|tue|tues|wed|thu|thurs|fri|sat|sun|jan|feb|mar|apr|jun|jul|aug|"
                   r"sep|sept|oct|nov|dec|\d{1,2}/\d{1,2})\b", re.I)
_COLOUR = re.compile(r"\b(red|orange|yellow|green|blue|purple|violet|pink|brown|black|white|grey|gray|beige|"
                     r"cream|navy|teal|turquoise|gold|golden|silver|maroon|lilac|lavender|magenta|cyan|olive|"
                     r"mint|peach|coral|ivory|charcoal|sage|mustard|terracotta|burgundy|colou?red)\b", re.I)
_CAPITALISED = re.compile(r"(?<![\w'’])([A-Z][\w'’&-]*)")
_QUOTED = re.compile(r"[\"“][^\"”]{2,40}[\"”]")
_NOT_NAMES = frozenset("""i i'm i'd i'll i've im ok okay yes no hi hey lol omg the a an and but so if we you it
this that my our your his her their they he she monday tuesday wednesday thursday friday saturday sunday
january february march april may june july august september october november december""".split())
_MONTH_PIN = re.compile(r"\b(?:in|during|since|by|for|over|through|until|till|before|after) (January|February|"
                        r"March|April|May|June|July|August|September|October|November|December)\b")
_MONTH_NO = {m: i + 1 for i, m in enumerate(["January", "February", "March", "April", "May", "June", "July",
                                              "August", "September", "October", "November", "December"])}
# "what did we think of the ending of the book", "how was the food at the wedding": a view asked of one part
# of a thing. Only views: "what was the purpose of the trip" is answered by a message that never says
# "purpose", but an opinion of an ending needs a message about the ending. The head is not a time frame
# word or one that names no part ("the rest of the group").
_ASPECT = re.compile(r"\b(?:(?:think|thought|feel|felt|say|said|make|made|like|liked|love|loved|hate|hated) "
                     r"(?:of|about)|how (?:was|is|were|are|did)) the (\w+) (?:of|at|in|on) "
                     r"(?:the|our|their|his|her|my|your|this|that|its|a|an|\w+['’]s) ([\w' -]+)", re.I)
_NOT_ASPECTS = frozenset("""name names rest kind kinds type types sort sorts part parts number numbers most some
one ones all top bottom middle course lot lots bunch half first last same best worst other others each any
both few many none whole idea news thing things""".split())
NEED_NAMES = {"money": "price or amount", "colour": "colour", "duration": "length of time", "name": "name",
              "date": "date or time", "month": "mention of that month"}


def need_of(question: str) -> str | None:
    """The kind of fact ``question`` explicitly asks for (money, duration, name, colour, date), if any."""
    for kind, pattern in _QUESTIONS.items():
        if pattern.search(question):
            return kind
    return None


def aspect_of(question: str) -> tuple[str, str] | None:
    """The part a question asks a view of and the thing it belongs to ("think of the ending of the
    previous book" -> ("ending", "book")), if it asks one."""
    m = _ASPECT.search(question)
    if m is None:
        return None
    head = m.group(1).casefold()
    thing = terms(re.split(r"\b(?:and|or|but|when|after|before|that|which)\b", m.group(2))[0])
    if head in _NOT_ASPECTS or len(head) < 3 or not thing:
        return None
    return head, thing[-1]


def mentions(word: str, stems: Iterable[str]) -> bool:
    """Whether a text with these content stems names ``word`` ("ending" is named by "the end" or "it ended")."""
    want = stem(word)
    return any(s == want or s.startswith(want) or want.startswith(s) and len(s) >= 3 for s in stems)


def aspect_unmentioned(question: str, texts: Sequence[str]) -> str | None:
    """The part the question asks a view of, when no message names it or none names the thing at all
    (then a mention of the part, "the end of the season", is about something else)."""
    asked = aspect_of(question)
    if asked is None:
        return None
    part, thing = asked
    stems = [content_stems(t) for t in texts]
    if any(mentions(part, s) for s in stems) and any(mentions(thing, s) for s in stems):
        return None
    return part


def month_pin(question: str) -> int | None:
    """The month (1-12) a question pins with "in May", "during March", ..., if it pins one."""
    m = _MONTH_PIN.search(question)
    return _MONTH_NO[m.group(1)] if m else None


def _has_name(text: str, name_words: set[str]) -> bool:
    if _QUOTED.search(text):
        return True
    for sentence in re.split(r"(?<=[.!?:;])\s+|\n", text):
        words = _CAPITALISED.findall(sentence)
        first = re.match(r"\W*([\w'’&-]+)", sentence)
        for w in words:
            if first and w == first.group(1):
                continue  # a sentence's first word is capitalised anyway
            low = w.casefold().rstrip("'’s")
            if low not in _NOT_NAMES and low not in name_words and w.casefold() not in _NOT_NAMES:
                return True
    return False


def holds(kind: str, text: str, *, name_words: Iterable[str] = ()) -> bool:
    """Whether ``text`` states a fact of ``kind`` (the members' own names do not count as names)."""
    if kind == "money":
        return bool(_MONEY.search(text))
    if kind == "duration":
        return bool(_DURATION.search(text))
    if kind == "date":
        return bool(_DATE.search(text))
    if kind == "colour":
        return bool(_COLOUR.search(text))
    if kind == "name":
        return _has_name(text, {w.casefold() for w in name_words})
    raise ValueError(f"unknown kind of fact: {kind}")


def in_month(month: int, texts_and_times: Sequence[tuple[str, float]]) -> bool:
    """Whether any message was written in ``month`` or names it (by its full or short name)."""
    names = [k for k, v in _MONTH_NO.items() if v == month]
    word = re.compile(r"\b(" + names[0] + "|" + names[0][:3] + r")\b")
    for text, ts in texts_and_times:
        if time.gmtime(ts).tm_mon == month or word.search(text):
            return True
    return False
