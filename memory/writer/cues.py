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
from collections.abc import Sequence
from dataclasses import dataclass

from ..models import StoredMessage
from ..people import People
from ..records import GROUP
from .grounding import content_terms

# A first-person message with at least this many content words is a self-report worth a core record.
# Flat on SocialMemBench dev (owner accuracy 77.2 / 77.3 / 76.5% at 4 / 6 / 8); see docs/writer.md.
SELF_REPORT_MIN_WORDS = 6
# A message to or about one other member needs this many content words (the name included) to be worth a
# profile record: "Marcus how's the knee?" (3) is, a bare "Tobenna. Come on." is not.
ABOUT_MIN_WORDS = 3

_I = r"(?:I|I'll|I will|I'm|I am|I've|I can|I'd|my|me)"
DECISION = re.compile(
    r"\b(decision|decided|agreed|agree(?:d)? on|it'?s settled|settled on|final (?:answer|plan|call)|done deal"
    r"|we'?re going with|locked in|that'?s the plan|it'?s a plan|(?:is|are|all) (?:confirmed|booked)|confirmed for"
    r"|booked for)\b|\b\w+ it is\b[.!]?", re.I)
NORM = re.compile(
    r"\b(rules? ?(?:for|of|is|are|:)|(?:house|ground|new|one|golden|the|our) rules?|from now on"
    r"|(?:anyone|whoever|whoever's|the first one) (?:who )?\w* ?"
    r"(?:buys|pays|owes|has to|must|gets|loses|brings)|no one (?:is allowed|gets)|nobody (?:is allowed|gets|talks"
    r"|brings)|everyone (?:has to|must|needs to)|we always|we never|tradition"
    r"|no (?:talking|phones|work talk|shop talk|plus[- ]ones|cancelling|cancellations|excuses))\b", re.I)
DATE = re.compile(
    r"\b(mon|tues|wednes|thurs|fri|satur|sun)day\b|\b(today|tonight|tomorrow|weekend|next week|next month"
    r"|this week|this evening|morning|afternoon|evening)\b|\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b|\b\d{1,2}:\d\d\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\s+\d{1,2}\b", re.I)
PLAN = re.compile(r"\b(let'?s|plan(?:s|ned|ning)?|going to|gonna|will|'ll|meet(?:ing)?|booked|book|schedul\w*"
                  r"|see you)\b", re.I)
CHANGE = re.compile(r"\b(change of plans?|moved to|moving to|postponed?|reschedul\w*|cancel+(?:ed|ing)?|called off"
                    r"|pushed (?:back|to)|no longer|not anymore|instead|switched to|changed my mind)\b", re.I)
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
AGREE = re.compile(r"\b(works for me|sounds good|I'?m in|count me in|deal|agreed|same here|fine by me|(?:okay|ok|fine) "
                   r"with me|see you there)\b", re.I)
LETS = re.compile(r"\blet'?s\b|\bshall we\b|\bsee (?:you|everyone) (?:all|there)\b", re.I)
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


def speaks_for_group(msg: StoredMessage, window: Sequence[StoredMessage]) -> str | None:
    """Why a message speaks for the group (decision, plan, agreement, rule, thread), or None."""
    text = msg.text
    if NORM.search(text):
        return "a rule or norm"
    if DECISION.search(text):
        return "a decision or agreement"
    if DATE.search(text) and LETS.search(text):
        return "a dated group plan"
    if AGREE.search(text) and DATE.search(text):
        return "an agreement to a dated plan"
    if thread_members(msg, window) >= 2:
        return "a reply thread of several members"
    return None


def classify(msg: StoredMessage, window: Sequence[StoredMessage], people: People) -> Cue | None:
    """The one cue a message carries, most group-relevant first; None when it carries none."""
    text = msg.text
    if NORM.search(text):
        return Cue("norm", GROUP, "group_insight", "decision")
    if DECISION.search(text):
        return Cue("decision", GROUP, "group_interaction", "decision")
    if DATE.search(text) and LETS.search(text):
        return Cue("plan", GROUP, "group_interaction", "decision")
    others = people.referenced(msg, window)
    for pid in people.named(text):
        if pid != msg.author_id and people.followed_by(text, pid, HAS_THE_AFTER_NAME):
            return Cue("responsibility", pid, "per_speaker_profile", "fact")
    if RESPONSIBLE_SELF.search(text):
        return Cue("responsibility", msg.author_id, "per_speaker_core", "fact")
    if CHANGE.search(text) and re.search(r"\b" + _I + r"\b", text, re.I):
        return Cue("change", msg.author_id, "per_speaker_core", "fact")
    if DATE.search(text) and PLAN.search(text) and re.search(r"\b" + _I + r"\b", text, re.I):
        return Cue("plan", msg.author_id, "per_speaker_core", "fact")
    if STANCE.search(text) and not others:
        return Cue("stance", msg.author_id, "per_speaker_core", "stance")
    if (FIRST_PERSON.search(text) and not text.rstrip().endswith("?")
            and len(content_terms(text)) >= SELF_REPORT_MIN_WORDS):
        return Cue("self", msg.author_id, "per_speaker_core", "fact")
    about = about_member(msg, people)
    if about is not None:
        return Cue("about", about, "per_speaker_profile", "observation")
    return None


def about_member(msg: StoredMessage, people: People) -> str | None:
    """The one other member a message speaks to or about, when its author says nothing of themself.

    SpeakerMem-R1 files "A says something about B" under B's profile. Only the clear form counts: exactly
    one other member named, no first person, and the member addressed ("you", "your") or the subject of a
    statement ("Jordan used to …", "Priya's job …"). A message that also speaks of its author stays theirs.
    """
    text = msg.text
    if FIRST_PERSON.search(text) or len(content_terms(text)) < ABOUT_MIN_WORDS:
        return None
    named = [p for p in people.named(text) if p != msg.author_id]
    if len(named) != 1:
        return None
    if YOU.search(text) or people.followed_by(text, named[0], ABOUT_NAMED):
        return named[0]
    return None


def propose(window: Sequence[StoredMessage], people: People, names: dict[str, str]) -> list[dict]:
    """Cue proposals in the extractive action format (``msg`` is 1-based), one per cued message."""
    out: list[dict] = []
    for n, msg in enumerate(window, 1):
        if msg.to_bot:
            continue
        cue = classify(msg, window, people)
        if cue is None:
            continue
        owner = GROUP if cue.owner == GROUP else names.get(cue.owner, cue.owner)
        out.append({"op": "ADD", "msg": n, "owner": owner, "layer": cue.layer, "utype": cue.utype,
                    "proposer": f"cues:{cue.kind}"})
    return out
