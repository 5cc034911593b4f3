"""Evidence-first replies: what the chat says, quoted and cited, or a plain decline.

A reply leads with a short line, then the best one to three messages (who, when, a
quote) in the learned reranker's order. Whether to answer at all is the learned
decline's call (memory/query/rank_model.py): below its threshold the reply says the
channel's memory does not hold it, shows the closest messages as such, and asserts
nothing. The question analysis (memory/question.py) decides the reply's shape: each
member's own message for "what does each of us think", the roster for "who hasn't",
earlier and latest in time order for "how did it change". Every message shown is a real
message of the asked scopes; nothing here is generated.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..encoder.model import Reading
from ..models import StoredMessage
from ..question import Question, content_stems
from ..store import Person
from ..timefmt import stamp
from .candidates import FEATURES, Candidate
from .discussion import View
from .support import sentences

DECLINE = "This channel's memory doesn't hold that."
EMPTY_CHANNEL = "I don't have any messages from this channel yet, so there's nothing to go on."
NO_TOPIC = ("Ask me about something said in this channel: a plan, a decision, who said what, or what "
            "someone thinks about something.")
QUOTE_CHARS = 240
# A lead sentence longer than this many words is cut to the clause that holds the reader's span.
LEAD_WORDS = 30
# A member "has said something about it" when their best candidate holds this share of the question's
# topic words, or is this close in meaning (cosine): the same floor as search's on-topic test.
MEMBER_COVERAGE = 0.3
MEMBER_COSINE = 0.4
# A short reply ("paid too", "I'm allergic") right after an on-topic message speaks to the same topic.
SHORT_REPLY_CHARS = 40
POINTER = "Here's what the chat says:"  # an answer's lead when the reader gave no words to state
RELATED = "related"  # the label of the quotes beside an answer's lead
_F = {name: i for i, name in enumerate(FEATURES)}


@dataclass
class Quoted:
    """One message shown in a reply, with its citation number."""

    n: int
    message: StoredMessage
    quote: str
    label: str = ""

    def line(self) -> str:
        tag = f"{self.label}: " if self.label else ""
        return f"[{self.n}] {tag}{self.message.author_name} ({stamp(self.message.ts)}): “{self.quote}”"


@dataclass
class ReplyDraft:
    """A reply before rendering: its lead, the quoted evidence and why it took this shape."""

    lead: str
    quoted: list[Quoted]
    declined: bool
    kind: str  # evidence, each, absent, change, decline, empty, unknown-name, no-topic, group
    strength: float = 0.0  # the decline model's probability that the chat answers the question
    extra_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([self.lead, *self.extra_lines, *(q.line() for q in self.quoted)])


@dataclass
class Ranking:
    """The reranked candidates of one question and the decline's verdict."""

    cands: list[Candidate]
    x: np.ndarray  # features, one row per candidate
    scores: np.ndarray
    order: list[int]  # candidate indices, best first
    p_answer: float
    answer: bool
    question_stems: list[str] = field(default_factory=list)
    readings: dict[int, Reading] = field(default_factory=dict)  # the encoder's, for the candidates it read
    floor: float = 0.0  # the P(answers) a message needs to be quoted beside the best one (the decline threshold)

    def best(self, n: int) -> list[StoredMessage]:
        return [self.cands[i].message for i in self.order[:n]]

    def on_topic(self, i: int) -> bool:
        """Whether candidate ``i`` is about the question: by its own words or meaning, or as a short
        answer to an on-topic message just before it."""
        reading = self.readings.get(i)
        if reading is not None and reading.p >= self.floor:
            return True  # the reader says it answers the question
        x = self.x[i]
        if x[_F["cov"]] >= MEMBER_COVERAGE or x[_F["cos"]] >= MEMBER_COSINE:
            return True
        c = self.cands[i]
        wanted = set(self.question_stems)
        # An answer to an on-topic question another member asked a turn or two before ("should we get a cat?").
        for p in c.prev:
            if "?" in p.text and p.author_id != c.message.author_id and wanted & set(content_stems(p.text)):
                return True
        after_topic = x[_F["cov_prev"]] >= MEMBER_COVERAGE or x[_F["cos_prev"]] >= MEMBER_COSINE
        if not after_topic:
            return False
        prev = c.prev[0]
        # It answers the message before it, or is a short reply that shares its words or replies to it.
        linked = bool(set(content_stems(c.message.text)) & set(content_stems(prev.text))) \
            or c.message.reply_to == prev.msg_id
        return bool(x[_F["after_question"]] > 0 or len(c.message.text) <= SHORT_REPLY_CHARS and linked)


def quote_of(text: str, question_stems: Sequence[str], limit: int = QUOTE_CHARS) -> str:
    """The message, or for a long one the sentences that best match the question, within ``limit``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    parts = sentences(flat) or [flat]
    wanted = set(question_stems)
    best = max(range(len(parts)), key=lambda i: (len(wanted & set(content_stems(parts[i]))), -i))
    lo = hi = best  # grow a contiguous run of sentences around the best one while it fits
    size = len(parts[best])
    grew = True
    while grew:
        grew = False
        for i in (hi + 1, lo - 1):
            if 0 <= i < len(parts) and size + len(parts[i]) + 1 <= limit:
                size += len(parts[i]) + 1
                lo, hi = min(lo, i), max(hi, i)
                grew = True
    chosen = list(range(lo, hi + 1))
    out = " ".join(parts[i] for i in chosen)
    if len(out) > limit:
        out = out[: limit - 1].rsplit(" ", 1)[0] + "…"
    prefix = "… " if chosen[0] > 0 else ""
    suffix = " …" if chosen[-1] < len(parts) - 1 and not out.endswith("…") else ""
    return prefix + out + suffix


class ReplyBuilder:
    """Turns a reranked candidate list into an evidence-first reply (no model involved)."""

    def __init__(self, *, max_quotes: int = 3) -> None:
        self.max_quotes = max_quotes

    def quotes(self, msgs: Sequence[StoredMessage], stems: Sequence[str], start: int = 1) -> list[Quoted]:
        """The messages as numbered quotes, long ones cut to the sentences that match ``stems``."""
        return [Quoted(start + i, m, quote_of(m.text, stems)) for i, m in enumerate(msgs)]

    def preliminary(self, q: Question, roster: Sequence[Person], has_messages: bool) -> ReplyDraft | None:
        """A reply decided by the question alone: an empty channel, a stranger's name, no topic."""
        members = [p for p in roster if not p.is_bot]
        if not has_messages:
            return ReplyDraft(EMPTY_CHANNEL if not members else DECLINE, [], True,
                              "empty" if not members else "decline")
        strangers = q.unknown_people
        if strangers and not q.named:
            return ReplyDraft(f"Nobody in this channel has mentioned {' or '.join(strangers[:3])}, so I can't "
                              "answer that.", [], True, "unknown-name")
        if not q.stems and not q.people and not q.mentioned:
            return ReplyDraft(NO_TOPIC, [], True, "no-topic")
        return None

    def build(self, q: Question, ranking: Ranking, roster: Sequence[Person],
              views: Sequence[View] | None = None) -> ReplyDraft:
        """The reply for ``q`` from its reranked candidates; ``views``: each member's part in the discussion
        (memory/query/discussion.py), which "each" and "who hasn't" questions read."""
        members = [p for p in roster if not p.is_bot]
        if q.absent and members and views is not None:
            return self._absent(q, ranking, members, views)
        if q.each and members and views is not None:
            each = self._each(q, ranking, members, views)
            if each is not None:
                return each
        best = ranking.best(self.max_quotes)
        if not ranking.answer or not best:
            quoted = self.quotes(best, q.stems)
            lead = decline_lead(q) + (" The closest I found:" if quoted else "")
            return ReplyDraft(lead, quoted, True, "decline", ranking.p_answer)
        if q.change and len(best) > 1:
            shown = sorted(best, key=lambda m: (m.ts, m.id))
            quoted = self.quotes(shown, q.stems)
            quoted[0].label, quoted[-1].label = "earlier", "latest"
            return ReplyDraft("Here's how it went in the chat, oldest first:", quoted, False, "change",
                              ranking.p_answer)
        shown = self.supported(ranking)
        quoted = self.quotes(shown, q.stems)
        stated = answer_lead(ranking, quoted[0])
        if stated is None:
            return ReplyDraft(POINTER, quoted, False, "evidence", ranking.p_answer)
        for extra in quoted[1:]:  # the lead rests on the first quote; the reader cannot tell whether the others
            extra.label = RELATED  # restate it or only talk around it (docs/reader.md), so they say so
        return ReplyDraft(stated, quoted, False, "evidence", ranking.p_answer)

    def supported(self, ranking: Ranking) -> list[StoredMessage]:
        """The messages an answer quotes: the best, then those the reader also finds answering (all of the best
        three when nothing was read)."""
        if not ranking.readings:
            return ranking.best(self.max_quotes)
        first, *rest = ranking.order
        keep = [first] + [i for i in rest if i in ranking.readings and ranking.readings[i].p >= ranking.floor]
        return [ranking.cands[i].message for i in keep[:self.max_quotes]]

    def _each(self, q: Question, ranking: Ranking, members: list[Person], views: Sequence[View]
              ) -> ReplyDraft | None:
        """Every member who spoke on it, their best message each; "Nothing from X" only for members none of
        whose messages in the discussion is about it."""
        names = {p.person_id: p.display_name for p in members}
        spoke = sorted((v for v in views if v.message is not None),
                       key=lambda v: (-v.score, v.message.ts if v.message else 0.0))
        if not spoke:
            return None  # no member speaks to it: the reply falls back to what the chat says
        silent = [names.get(v.person_id, v.person_id) for v in views if v.message is None]
        quoted = self.quotes([v.message for v in spoke if v.message is not None], q.stems)
        extra = [f"Nothing from {_join(silent)} on this."] if silent else []
        return ReplyDraft("Here's what each person said about it:", quoted, False, "each", ranking.p_answer,
                          extra_lines=extra)

    def _absent(self, q: Question, ranking: Ranking, members: list[Person], views: Sequence[View]) -> ReplyDraft:
        names = {p.person_id: p.display_name for p in members}
        did = [v for v in views if v.message is not None]
        not_yet = [names.get(v.person_id, v.person_id) for v in views if v.message is None]
        quoted = self.quotes([v.message for v in did if v.message is not None], q.stems)
        if not not_yet:
            return ReplyDraft("Everyone here has said something about it:", quoted, False, "absent",
                              ranking.p_answer)
        lead = (f"From what's in this channel, {_join(not_yet)} "
                f"{'has' if len(not_yet) == 1 else 'have'}n't said anything about it.")
        if quoted:
            lead += " These members have:"
        return ReplyDraft(lead, quoted, False, "absent", ranking.p_answer)


def decline_lead(q: Question) -> str:
    """What a decline says first: what the chat does not say, when the question reads as a clause."""
    return f"The chat doesn't say {q.missing}." if q.missing else DECLINE


def span_sentence(text: str, span: str) -> str:
    """The sentence of ``text`` that holds the reader's ``span``, cut to its clause when long.

    The reader finds the right words but not always their edges (held-out exact match is under half, see
    docs/replies.md), so the lead shows the author's whole sentence around them rather than a fragment
    that could read as a different answer."""
    flat, span = " ".join(text.split()), " ".join(span.split())
    at = flat.casefold().find(span.casefold())
    if at < 0:
        return span
    start = 0
    for sentence in sentences(flat):
        begin = flat.find(sentence, start)
        end = begin + len(sentence)
        start = end
        if begin <= at < end:
            if len(sentence.split()) <= LEAD_WORDS:
                return sentence
            left = max(flat.rfind(p, begin, at) for p in ",;:") + 1 or begin
            right = min((i for p in ",;:" if (i := flat.find(p, at + len(span), end)) >= 0), default=end)
            return flat[max(left, begin):right].strip()
    return span


def answer_lead(ranking: Ranking, first: Quoted) -> str | None:
    """The answer in the best message's own words, with its citation; None when the reader gave no words (the
    reply then points to the quotes, `POINTER`)."""
    reading = ranking.readings.get(ranking.order[0]) if ranking.order else None
    span = " ".join(reading.span.split()) if reading is not None else ""
    if not any(ch.isalnum() for ch in span):
        return None
    author = first.message.author_name
    if span.casefold() == author.casefold():
        return f"{author} [{first.n}]."
    lead = span_sentence(first.message.text, span)
    lead = lead[0].upper() + lead[1:] if lead[0].islower() else lead
    return f"{lead.rstrip('.')} ({author} [{first.n}])."


def _join(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]
