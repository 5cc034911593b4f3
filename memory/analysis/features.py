"""What the act and link models read: a message's words, parse, vector, and what came before it.

One rolling ``Context`` per scope holds the earlier turns a new message is read against (the last
``RECENT`` turns and the last ``ACTS`` state acts, each with its analysis). Both models read it; the
trainer (evaluation/acts_train.py) builds the very same features by pushing a chat through a Context
turn by turn, so what is learned is what runs. Nothing here looks at a later message.

Three kinds of features:
- words: unigrams and bigrams of the message (members' names and numbers replaced by a class, so no
  feature is a particular person or date), its clause shape from spaCy's parse and its entity labels;
  the model file holds the vocabulary it learned (tokens seen in several training chats);
- dense: counts and closeness measures named in ``ACT_FEATURES`` / ``PAIR_FEATURES``;
- the message's unit MiniLM vector itself.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..ftsquery import STOPWORDS, stem
from ..people import People
from .types import ACT_KINDS, STATE_ACTS, Act, History, Link, Turn

RECENT = 24   # earlier turns a message is read against (what it replies to, answers or agrees to)
ACTS = 80     # earlier state acts a change is matched against (a change can name a plan set weeks before)
ANSWER_WINDOW = 12  # turns back a message may answer or confirm (gold: 95% within 5 and 24 turns)
SLOTS = ("time", "amount", "place", "person", "org", "thing")  # memory.nlp.LABEL_KINDS' kinds of value

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_DIGIT = re.compile(r"\d")


@dataclass
class Seen:
    """One earlier turn as the models remember it: the turn, its analysis, its content words."""

    turn: Turn
    act: Act | None
    link: Link | None
    words: frozenset[str]
    index: int  # position in the context's stream (turn gaps are differences of these)


@lru_cache(maxsize=65536)
def content_words(text: str) -> frozenset[str]:
    """Stemmed content words (no stopwords, no numbers): what two messages on one topic share."""
    return frozenset(stem(w) for w in _WORD.findall(text.casefold().replace("’", "'"))
                     if w not in STOPWORDS and not _DIGIT.search(w) and len(w) > 1)


def _emoji(text: str) -> bool:
    return any(unicodedata.category(c) == "So" for c in text)


def tokens(turn: Turn, people: People) -> list[str]:
    """The word features of a message: uni- and bigrams with names as <person> and numbers as <num>,
    its clause shape (``s:``) and entity labels (``e:``)."""
    text = turn.message.text
    spans = [(a, b) for _, _, a, b in people.found(text)]
    if spans:
        parts, last = [], 0
        for a, b in spans:
            parts.append(text[last:a])
            parts.append(" zzperson ")
            last = b
        parts.append(text[last:])
        text = "".join(parts)
    words = ["<num>" if _DIGIT.search(w) else ("<person>" if w == "zzperson" else w)
             for w in _WORD.findall(text.casefold().replace("’", "'"))]
    out = set(words)
    seq = ["<s>", *words]
    out.update(f"{a} {b}" for a, b in zip(seq, seq[1:]))
    out.update(f"s:{m}" for m in turn.parsed.shape)
    out.update(f"e:{e.label}" for e in turn.parsed.entities)
    if text.rstrip().endswith("?"):
        out.add("<q>")
    if _emoji(text):
        out.add("<emoji>")
    if not words:
        out.add("<nowords>")
    return sorted(out)


def slot_values(turn: Turn) -> dict[str, set[str]]:
    """The entity values a message states, by kind of value (a day, a time, an amount, a place...)."""
    out: dict[str, set[str]] = {}
    for e in turn.parsed.entities:
        if e.kind in SLOTS:
            out.setdefault(e.kind, set()).add(e.text.casefold())
    return out


@dataclass
class Context:
    """The earlier turns of one scope, as both models read them, updated turn by turn."""

    people: People
    recent: deque[Seen] = field(default_factory=lambda: deque(maxlen=RECENT))
    acts: deque[Seen] = field(default_factory=lambda: deque(maxlen=ACTS))
    changed: set[int] = field(default_factory=set)  # store ids of acts a later message changed
    count: int = 0

    @classmethod
    def of(cls, history: History, people: People) -> Context:
        """A context holding ``history`` (its acts first, then its recent turns, each in order)."""
        ctx = cls(people)
        recent_ids = {t.message.id for t in history.recent}
        for t in history.acts:
            if t.message.id not in recent_ids:
                ctx.push(t, *_analysed(t), recent=False)
        for t in history.recent:
            ctx.push(t, *_analysed(t))
        return ctx

    def push(self, turn: Turn, act: Act | None, link: Link | None, *, recent: bool = True) -> Seen:
        seen = Seen(turn, act, link, content_words(turn.message.text), self.count)
        self.count += 1
        if recent:
            self.recent.append(seen)
        if act is not None and act.is_state:
            self.acts.append(seen)
        if link is not None and link.kind == "changes":
            self.changed.add(link.target)
        return seen

    def gap(self, seen: Seen) -> int:
        """Turns from ``seen`` to the next message, counted up to ``RECENT`` (beyond the recent turns a
        scope's history does not say how many turns lie between)."""
        return min(self.count - seen.index, RECENT)

    def parent(self, turn: Turn) -> Seen | None:
        """The turn this one replies to when it is in the context, else the turn before it."""
        reply = turn.message.reply_to
        if reply:
            for s in reversed(self.recent):
                if s.turn.message.msg_id == reply:
                    return s
            for s in reversed(self.acts):
                if s.turn.message.msg_id == reply:
                    return s
        return self.recent[-1] if self.recent else None

    def document_frequency(self) -> tuple[Counter[str], int]:
        """How many of the context's turns hold each content word (rarity is read against the scope's own
        recent talk, not a corpus)."""
        df: Counter[str] = Counter()
        ids: set[int] = set()
        for s in (*self.recent, *self.acts):
            if s.turn.message.id not in ids:
                ids.add(s.turn.message.id)
                df.update(s.words)
        return df, len(ids)


def _analysed(t: Turn) -> tuple[Act | None, Link | None]:
    return (t.analysis.act, t.analysis.link) if t.analysis is not None else (None, None)


def cos(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None:
        return 0.0
    return float(np.dot(a, b))


def _asks(text: str) -> bool:
    return text.rstrip().rstrip(")").rstrip().endswith("?")


def _kind_of(s: Seen | None) -> str:
    """An earlier turn's act kind ("" when it has none)."""
    return s.act.kind if s is not None and s.act is not None else ""


# ---- the act model's dense features --------------------------------------------------------------------

ACT_FEATURES = (
    "words", "no_words", "asks", "has_question_mark", "exclaims", "digits", "emoji",
    *(f"slot_{k}" for k in SLOTS),
    "named_others", "mention", "addressed", "reply", "reply_found",
    "parent_asks", "parent_question", "parent_state", "parent_same_author", "parent_cos",
    "previous_cos", "recent_cos_max", "gap_previous", "first_in_session", "session_position", "authors_recent",
    "asked_me", "question_to_me_recent", "recent_state", "recent_question",
    "act_cos_max", "act_words", "act_slot_shared", "act_slot_new", "act_gap", "acts_known",
    "author_acts_share", "author_asked_recent", "recent_value_shared", "recent_words_max",
    *(f"act_best_{k}" for k in STATE_ACTS),
    *(f"previous_{k}" for k in ACT_KINDS),
)


def act_features(turn: Turn, ctx: Context) -> np.ndarray:
    """The dense features of ``turn`` read against ``ctx`` (which does not hold it yet)."""
    m = turn.message
    text = m.text
    people = ctx.people
    f: dict[str, float] = {}
    n_words = len(_WORD.findall(text))
    f["words"] = math.log1p(n_words)
    f["no_words"] = float(n_words == 0)
    f["asks"] = float(_asks(text))
    f["has_question_mark"] = float("?" in text)
    f["exclaims"] = float("!" in text)
    f["digits"] = float(bool(_DIGIT.search(text)))
    f["emoji"] = float(_emoji(text))
    slots = slot_values(turn)
    for k in SLOTS:
        f[f"slot_{k}"] = float(min(2, len(slots.get(k, ()))))
    found = people.found(text)
    others = [pid for pid, *_ in found if pid != m.author_id]
    f["named_others"] = float(min(2, len(set(others))))
    f["mention"] = float("@" in text or "<@" in text)
    f["addressed"] = float(bool(found) and found[0][2] <= 1 and found[0][0] != m.author_id)
    parent = ctx.parent(turn)
    previous = ctx.recent[-1] if ctx.recent else None
    f["reply"] = float(bool(m.reply_to))
    f["reply_found"] = float(bool(m.reply_to) and parent is not None and parent.turn.message.msg_id == m.reply_to)
    if parent is not None:
        f["parent_asks"] = float(_asks(parent.turn.message.text))
        f["parent_question"] = float(_kind_of(parent) == "question")
        f["parent_state"] = float(_kind_of(parent) in STATE_ACTS)
        f["parent_same_author"] = float(parent.turn.message.author_id == m.author_id)
        f["parent_cos"] = cos(turn.vector, parent.turn.vector)
    if previous is not None:
        pm = previous.turn.message
        f["previous_cos"] = cos(turn.vector, previous.turn.vector)
        f["gap_previous"] = math.log1p(max(0.0, m.ts - pm.ts) / 60.0)
        f["first_in_session"] = float(pm.session != m.session)
        f[f"previous_{_kind_of(previous) or 'chatter'}"] = 1.0
    else:
        f["first_in_session"] = 1.0
    recent = list(ctx.recent)[-8:]
    f["recent_cos_max"] = max((cos(turn.vector, s.turn.vector) for s in recent), default=0.0)
    same = 0
    for s in reversed(ctx.recent):
        if s.turn.message.session != m.session:
            break
        same += 1
    f["session_position"] = math.log1p(same)
    f["authors_recent"] = float(len({s.turn.message.author_id for s in recent}))
    asked = [s for s in recent[-6:] if s.turn.message.author_id != m.author_id and _kind_of(s) == "question"]
    f["recent_question"] = float(bool(asked))
    f["recent_state"] = float(any(_kind_of(s) in STATE_ACTS for s in recent[-5:]))
    f["asked_me"] = float(parent is not None and parent.act is not None and parent.act.owner == m.author_id)
    f["question_to_me_recent"] = float(any(s.act is not None and s.act.owner == m.author_id for s in asked))
    if ctx.acts and turn.vector is not None:
        sims = np.asarray([cos(turn.vector, s.turn.vector) for s in ctx.acts], dtype=np.float32)
        if sims.size:
            j = int(np.argmax(sims))
            best = ctx.acts[j]
            f["act_cos_max"] = float(sims[j])
            words = content_words(text)
            f["act_words"] = len(words & best.words) / math.sqrt(1 + len(words))
            theirs = slot_values(best.turn)
            shared = [k for k in ("time", "amount", "place") if k in slots and k in theirs]
            f["act_slot_shared"] = float(len(shared))
            f["act_slot_new"] = float(any(slots[k] - theirs[k] for k in shared))
            f["act_gap"] = math.log1p(ctx.gap(best))
            if best.act is not None:
                f[f"act_best_{best.act.kind}"] = 1.0
        f["acts_known"] = math.log1p(len(ctx.acts))
        # Who states the group's acts: an organiser's word settles things, a newcomer's rarely does.
        f["author_acts_share"] = sum(1 for s in ctx.acts if s.turn.message.author_id == m.author_id) / len(ctx.acts)
    f["author_asked_recent"] = float(sum(1 for s in ctx.recent if _kind_of(s) == "question"
                                         and s.act is not None and s.act.owner == m.author_id))
    words = content_words(text)
    mine = {v for vs in slots.values() for v in vs}
    f["recent_value_shared"] = float(any(mine & {v for vs in slot_values(s.turn).values() for v in vs}
                                         for s in recent if s.turn.message.author_id != m.author_id))
    f["recent_words_max"] = max((len(words & s.words) for s in recent if s.turn.message.author_id != m.author_id),
                                default=0) / math.sqrt(1 + len(words))
    return np.asarray([f.get(k, 0.0) for k in ACT_FEATURES], dtype=np.float32)


# ---- the link model's pair features --------------------------------------------------------------------

PAIR_FEATURES = (
    "cos", "cos_rank", "cos_below_best", "words", "words_share", "chunks", "topic_same",
    *(f"both_{k}" for k in ("time", "amount", "place", "person")), "value_shared", "value_new",
    "reply", "same_author", "names_their_author", "names_my_author", "owner_is_me", "they_ask",
    "turn_gap", "hours_gap", "acts_since", "changed_already", "newer_close", "their_score",
    *(f"their_{k}" for k in ACT_KINDS), *(f"my_{k}" for k in ACT_KINDS),
)


def candidates(ctx: Context, window: int = ANSWER_WINDOW) -> list[Seen]:
    """The earlier turns a message may link to: the last ``window`` turns, then the earlier state acts."""
    out = list(ctx.recent)[-window:]
    ids = {s.turn.message.id for s in out}
    out += [s for s in ctx.acts if s.turn.message.id not in ids]
    return out


def pair_features(turn: Turn, act: Act, cands: Sequence[Seen], ctx: Context) -> np.ndarray:
    """One row of ``PAIR_FEATURES`` per candidate: how ``turn`` (with its act) relates to each."""
    if not cands:
        return np.zeros((0, len(PAIR_FEATURES)), dtype=np.float32)
    m = turn.message
    sims = np.asarray([cos(turn.vector, s.turn.vector) for s in cands], dtype=np.float32)
    order = np.argsort(-sims)
    rank = np.empty(len(cands), dtype=np.int64)
    rank[order] = np.arange(len(cands))
    best = float(sims.max())
    df, n = ctx.document_frequency()
    mine = content_words(m.text)
    weight = {w: math.log((n + 1) / (df.get(w, 0) + 0.5)) for w in mine}
    total = sum(weight.values()) or 1.0
    my_slots = slot_values(turn)
    my_chunks = {w for c in turn.parsed.chunks for w in c.split()} - STOPWORDS
    named = set(ctx.people.named(m.text))
    act_ids = [s.turn.message.id for s in ctx.acts]
    # A change replaces the latest version of what it changes: how many later candidates are about as close.
    state = [(s.turn.message.id, float(sims[i])) for i, s in enumerate(cands) if s.act is not None and s.act.is_state]
    rows = []
    for i, s in enumerate(cands):
        t = s.turn.message
        f: dict[str, float] = {"cos": float(sims[i]), "cos_rank": 1.0 / (1 + rank[i]),
                               "cos_below_best": best - float(sims[i])}
        shared = mine & s.words
        f["words"] = sum(weight[w] for w in shared)
        f["words_share"] = f["words"] / total
        theirs_chunks = {w for c in s.turn.parsed.chunks for w in c.split()} - STOPWORDS
        f["chunks"] = float(len(my_chunks & theirs_chunks))
        f["topic_same"] = float(bool(act.topic) and s.act is not None and s.act.topic == act.topic)
        theirs = slot_values(s.turn)
        both = [k for k in ("time", "amount", "place", "person") if k in my_slots and k in theirs]
        for k in both:
            f[f"both_{k}"] = 1.0
        f["value_shared"] = float(any(my_slots[k] & theirs[k] for k in both))
        f["value_new"] = float(any(my_slots[k] - theirs[k] for k in both))
        f["reply"] = float(bool(m.reply_to) and m.reply_to == t.msg_id)
        f["same_author"] = float(t.author_id == m.author_id)
        f["names_their_author"] = float(t.author_id in named)
        f["names_my_author"] = float(m.author_id in ctx.people.named(t.text))
        f["owner_is_me"] = float(s.act is not None and s.act.owner == m.author_id)
        f["they_ask"] = float(_asks(t.text))
        f["turn_gap"] = math.log1p(ctx.gap(s))
        f["hours_gap"] = math.log1p(max(0.0, m.ts - t.ts) / 3600.0)
        f["acts_since"] = math.log1p(sum(1 for a in act_ids if a > t.id)) if s.act is not None and s.act.is_state \
            else 0.0
        f["changed_already"] = float(t.id in ctx.changed)
        f["newer_close"] = math.log1p(sum(1 for j, c in state if j > t.id and c >= sims[i] - 0.05))
        f["their_score"] = s.act.score if s.act is not None else 0.0
        if s.act is not None:
            f[f"their_{s.act.kind}"] = 1.0
        f[f"my_{act.kind}"] = 1.0
        rows.append([f.get(k, 0.0) for k in PAIR_FEATURES])
    return np.asarray(rows, dtype=np.float32)


def vocabulary_rows(toks: Iterable[str], vocab: dict[str, int]) -> list[int]:
    """The vocabulary indexes of the tokens the model knows."""
    return [vocab[t] for t in toks if t in vocab]
