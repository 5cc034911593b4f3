"""Deterministic cues: what a message does for the group, and who it is about.

Two uses. The gate asks whether a message speaks for the group (a decision, plan,
agreement or rule, or the head of a reply thread several members joined) before a
GROUP record may rest on it. And the cue proposer turns clear cases (decisions,
norms, dated plans, changes of plan, responsibilities, stances) into proposals in
the writer's own action format, plus plain first-person self-reports (so every speaker who
says something about themself has a core record) and what one member says to or about one other
member without speaking of themself (that member's profile record), because a tiny model misses
exactly these; the proposals then pass the same verification as the model's.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..models import StoredMessage
from ..people import People
from ..records import GROUP, GROUP_ACT_UTYPES, Record
from .acts import GroupAct
from .grounding import content_terms

# A first-person message with at least this many content words is a self-report worth a core record
# (docs/writer.md has the figures it was chosen on).
SELF_REPORT_MIN_WORDS = 6
# A message to or about one other member needs this many content words (the name included) to be worth a
# profile record: "Marcus how's the knee?" (3) is, a bare "Tobenna. Come on." is not.
ABOUT_MIN_WORDS = 3

_I = r"(?:I|I'll|I will|I'm|I am|I've|I can|I'd|my|me)"
DATE = re.compile(
    r"\b(mon|tues|wednes|thurs|fri|satur|sun)day\b|\b(today|tonight|tomorrow|weekend|next week|next month"
    r"|this week|this evening|morning|afternoon|evening)\b|\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b|\b\d{1,2}:\d\d\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\s+\d{1,2}\b", re.I)
PLAN = re.compile(r"\b(let'?s|plan(?:s|ned|ning)?|going to|gonna|will|'ll|meet(?:ing)?|booked|book|schedul\w*"
                  r"|see you)\b", re.I)
# A person saying their own news changed ("my physio moved to Friday"): the person cues' change words.
CHANGE_WORDS = re.compile(
    r"\b(change of plans?|new plan|scratch that|moved to|moving (?:it )?to|postponed?|reschedul\w*|cancel+(?:ed|ing)?"
    r"|called off|pushed (?:back|to)|no longer|not anymore|instead|switched to|changed (?:my|our) minds?)\b", re.I)
CHANGE = CHANGE_WORDS
RESPONSIBLE_SELF = re.compile(
    r"\bI(?:'ll| will| can| am going to|'m going to|'m| am) (?:book|bring|pick|buy|get|handle|sort|organi[sz]e"
    r"|drive|call|cook|pay|host|make|take care|grab|collect|send|order|set up|reserve|arrange|cover)\w*\b", re.I)
# What follows a member's name when they hold a responsibility ("Leo has the key", "Sam is bringing ...").
HAS_THE_AFTER_NAME = re.compile(r"\s*(?:has|have|got|is bringing|is booking|will bring|will book|'ll bring|'ll book"
                                r"|is (?:in charge|on)|is handling)", re.I)
STANCE = re.compile(
    r"\b(?:I|I'd|I'm|I am|I really|I still|I do(?:n't)?)\s+(?:prefer|vote|think|love|hate|like|don't like|can't stand"
    r"|can't do|can't eat|would rather|'d rather|rather|want|need|am against|am for|am not|believe|feel)\b"
    r"|\b(?:works|fine|okay|ok|good) (?:for|with) me\b|\bI'?m (?:in|out|not)\b|\bcount me (?:in|out)\b", re.I)
FIRST_PERSON = re.compile(r"\b(I|I'm|I'll|I've|I'd|my|mine|myself)\b", re.I)
YOU = re.compile(r"\b(you|your|you're|you've|you'll|you'd|yours|yourself)\b", re.I)
# What follows a member's name when the sentence says something about them ("Jordan used to …", "Priya's job").
ABOUT_NAMED = re.compile(r"(?:'s|’s)\s|\s+(?:is|was|has|had|always|never|would|will|used to|can|can't|does|did"
                         r"|doesn't|didn't|isn't|wasn't)\b", re.I)
WE = re.compile(r"\b(we|we're|we'll|let's|us|everyone|all of us|the group|the team|together)\b", re.I)


@dataclass
class Cue:
    kind: str          # decision | norm | plan | change | responsibility | stance | self | about
    owner: str         # person id or GROUP
    layer: str
    utype: str


def thread_members(msg: StoredMessage, window: Sequence[StoredMessage]) -> int:
    """Distinct authors other than ``msg``'s who replied to it in the window."""
    return len({m.author_id for m in window if m.reply_to == msg.msg_id and m.author_id != msg.author_id})


def speaks_for_group(msg: StoredMessage, window: Sequence[StoredMessage],
                     acts: Mapping[int, GroupAct | None]) -> str | None:
    """Why a message speaks for the group (the classifier's group act, or a thread several joined), or None."""
    act = acts.get(msg.id)
    if act is not None:
        return f"a group {act.kind} (classifier score {act.score:.2f})"
    if thread_members(msg, window) >= 2:
        return "a reply thread of several members"
    return None


def classify(msg: StoredMessage, window: Sequence[StoredMessage], people: People,
             act: GroupAct | None = None) -> Cue | None:
    """The one cue a message carries, the group act first; None when it carries none."""
    text = msg.text
    if act is not None:
        return Cue(act.kind, GROUP, "group_interaction", act.kind if act.kind in GROUP_ACT_UTYPES else act.fallback)
    others = people.referenced(msg, window)
    for pid in people.named(text):
        if pid != msg.author_id and people.followed_by(text, pid, HAS_THE_AFTER_NAME):
            return Cue("responsibility", pid, "per_speaker_profile", "task")
    if RESPONSIBLE_SELF.search(text):
        return Cue("responsibility", msg.author_id, "per_speaker_core", "task")
    if CHANGE.search(text) and re.search(r"\b" + _I + r"\b", text, re.I):
        return Cue("change", msg.author_id, "per_speaker_core", "fact")
    if DATE.search(text) and PLAN.search(text) and re.search(r"\b" + _I + r"\b", text, re.I):
        return Cue("plan", msg.author_id, "per_speaker_core", "plan")
    about = about_member(msg, window, people)
    if about is not None:
        return Cue("about", about, "per_speaker_profile", "observation")
    if STANCE.search(text) and not others:
        return Cue("stance", msg.author_id, "per_speaker_core", "stance")
    if (not text.rstrip().endswith("?") and len(content_terms(text)) >= SELF_REPORT_MIN_WORDS
            and (FIRST_PERSON.search(text) or (not others and people.non_members(text)))):
        # The author's own news, or news of someone in their life who is not a member ("Anna got the job"):
        # a person outside the roster has no records of their own, so it is the author's core record.
        return Cue("self", msg.author_id, "per_speaker_core", "fact")
    return None


def about_member(msg: StoredMessage, window: Sequence[StoredMessage], people: People) -> str | None:
    """The one other member a message speaks to or about: SpeakerMem-R1 files what A says about or to B
    under B's profile.

    Who is named comes from ``People`` (roster names, first names, aliases, ids, @mentions; the author of
    the message replied to when none is named) and spaCy NER (a person who is not a member). Only the
    clear form counts: exactly one person, a member other than the author, and either addressed in the
    second person at least as often as the author speaks of themself ("Marcus I saw you limping, the knee
    has been bothering you") or the subject of a statement without first person ("Jordan used to …",
    "Priya's job …"). A message that mostly speaks of its author stays theirs.
    """
    text = msg.text
    if len(content_terms(text)) < ABOUT_MIN_WORDS:
        return None
    named = [p for p in people.named(text) if p != msg.author_id]
    if not named and YOU.search(text):
        named = [p for p in people.referenced(msg, window) if p != msg.author_id]
    if len(named) != 1 or people.non_members(text):
        return None
    me, you = len(FIRST_PERSON.findall(text)), len(YOU.findall(text))
    if you and you >= me:
        return named[0]
    if not me and people.followed_by(text, named[0], ABOUT_NAMED):
        return named[0]
    return None


# Entity kinds whose value a change replaces (spaCy NER, memory/nlp.py): the day or hour, the place, the amount.
CHANGED_KINDS = ("time", "place", "amount")


def changes(text: str, old: str) -> bool:
    """Whether ``text`` changes what ``old`` says, rather than repeating or confirming it: it says so in words
    ("moved to", "scratch that", "instead": CHANGE_WORDS), or it gives a day, hour, place or amount where
    ``old`` gives a different one. "Booking is confirmed for 7pm" does not change "... at 7pm"."""
    if CHANGE_WORDS.search(text):
        return True
    try:
        from ..nlp import parse_many

        new, was = parse_many([text, old])
    except Exception:  # noqa: BLE001 - without spaCy only the words can say it is a change
        return False
    before: dict[str, set[str]] = {}
    for e in was.entities:
        before.setdefault(e.kind, set()).add(e.text.casefold())
    return any(e.kind in CHANGED_KINDS and e.kind in before and e.text.casefold() not in before[e.kind]
               for e in new.entities)


def changed_record(msg: StoredMessage, heads: Sequence[Record], owner: str = GROUP,
                   layer: str = "group_interaction", min_shared: int = 1) -> Record | None:
    """The current record of ``owner`` in ``layer`` that ``msg`` revises: of those on its topic (sharing at
    least ``min_shared`` content words that are not a day or an hour) and that it changes (``changes``), the
    one sharing most words, the latest on a tie; None when it changes none."""
    words = content_terms(msg.text)
    when = content_terms(" ".join(m.group(0) for m in DATE.finditer(msg.text)))
    best: tuple[int, float, Record] | None = None
    for h in heads:
        if h.owner != owner or h.layer != layer or h.ts > msg.ts:
            continue
        common = words & content_terms(h.content)
        shared = len(common)
        # The topic is what, not when: sharing only a day or an hour ("Friday") is not the same plan.
        on_topic = len(common - when) >= min_shared
        if on_topic and (best is None or (shared, h.ts) > best[:2]) and changes(msg.text, h.content):
            best = (shared, h.ts, h)
    return best[2] if best else None


# A person's own record is revised by their later word on the same thing ("the budget held, two records" after
# "four records"): two topic words, since one person says many things that share one word.
PERSON_TOPIC_WORDS = 2


def propose(window: Sequence[StoredMessage], people: People, names: dict[str, str],
            acts: Mapping[int, GroupAct | None] | None = None, heads: Sequence[Record] = ()) -> list[dict]:
    """Cue proposals in the extractive action format (``msg`` is 1-based), one per cued message.

    A message the analysis pass read as a group act (``acts``) is the group state's: the pass files it as a
    GROUP record with its update chain (memory/groupstate.py), so the cues leave it alone. The rest are the
    person cues: a self-report, what is said about a member, a stance, a responsibility taken on."""
    acts = acts or {}
    out: list[dict] = []
    for n, msg in enumerate(window, 1):
        if msg.to_bot or acts.get(msg.id) is not None:
            continue
        cue = classify(msg, window, people)
        if cue is None:
            continue
        if cue.layer == "per_speaker_core" and cue.owner == msg.author_id:
            target = changed_record(msg, heads, msg.author_id, "per_speaker_core", PERSON_TOPIC_WORDS)
            if target is not None and target.session != msg.session:
                out.append({"op": "UPDATE", "msg": n, "entry_id": f"E{target.id}", "proposer": f"cues:{cue.kind}"})
                continue
        owner = GROUP if cue.owner == GROUP else names.get(cue.owner, cue.owner)
        out.append({"op": "ADD", "msg": n, "owner": owner, "layer": cue.layer, "utype": cue.utype,
                    "proposer": f"cues:{cue.kind}"})
    return out
