"""Reply candidates with their conversational context, and the features the reranker scores.

A candidate is a message together with what a reader sees around it: the turns just before
it in its session, the message it replies to, the turn after it, its author. The answer to a
question often does not repeat the question's words while its neighbours do ("Who is giving
Ana lifts?" is answered by "I can do the morning" right after Ana asked), so each candidate's
features describe its context as well as itself. The same function builds the features at
reply time and for training (evaluation/rerank_data.py), so the model sees one definition.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..models import SearchHit, StoredMessage
from ..nlp import Parsed, parse_many
from ..people import People
from ..question import KINDS, Question, content_stems
from ..store import Person, Store
from ..store.rows import select_messages

NOTHING_PARSED = Parsed((), False, False)
POOL = 30  # search hits reranked
TOPICAL_COSINE = 0.4  # a candidate this close in meaning is on topic even without a topic word
FOLLOW_ANCHORS = 5  # the top hits whose next turns join the pool
FOLLOW_TURNS = 2

# Chat forms the small NER model misses, by kind: a clock time without am/pm ("shipped at 4") and
# weekday abbreviations ("moved to wed 9pm") are times; a bare number is an amount only as CARDINAL.
_CLOCK = re.compile(r"\b(at|by|from|until|till|around|after|before) \d{1,2}(:\d\d)?\b|\b\d{1,2}:\d\d\b|"
                    r"\b(mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)\b", re.I)
_FIRST_PERSON = re.compile(r"\b(I|I'm|I'll|I've|I'd|Im|Ill|my|me)\b")
_KIND_LABELS = {
    "time": {"DATE", "TIME"},
    "amount": {"MONEY", "QUANTITY", "CARDINAL", "PERCENT"},
    "place": {"GPE", "LOC", "FAC", "ORG"},
    "person": {"PERSON"},
}

FEATURES: tuple[str, ...] = (
    "rank", "from_search", "bm25_rank", "dense_rank", "cos", "cos_gap", "cos_prev", "cos_prev2", "cos_next",
    "cos_parent", "cov", "cov_gap", "cov_prev", "cov_next", "n_match", "author_named", "names_named",
    "kind_match", "kind_prev", "first_person", "is_question", "after_question", "log_chars", "pin_match",
    "recency", "same_session_top", "replies_top", "last_on_topic", "later_on_topic", "q_full", "q_stems",
    "q_named", "q_each",
    *(f"q_{k}" for k in KINDS),
)


@dataclass
class Candidate:
    message: StoredMessage
    rank: int  # position in the search order (followers get the pool size + 1)
    hit: SearchHit | None
    prev: list[StoredMessage] = field(default_factory=list)  # up to three turns just before, nearest first
    next: StoredMessage | None = None
    parent: StoredMessage | None = None
    score: float = 0.0  # the reranker's


def states_kind(kind: str, parsed: Parsed, text: str, names: People | None = None) -> bool:
    """Whether a message states an answer of ``kind`` (from its named entities)."""
    labels = {e.label for e in parsed.entities}
    if kind == "time":
        return bool(labels & _KIND_LABELS["time"]) or bool(_CLOCK.search(text))
    if kind == "reason":
        return parsed.has_reason
    if kind == "place":
        return bool(labels & _KIND_LABELS["place"]) or parsed.has_place
    if kind == "person":
        return bool(labels & _KIND_LABELS["person"]) or bool(names and names.named(text))
    wanted = _KIND_LABELS.get(kind)
    return bool(wanted and labels & wanted)


def coverage(stems: Sequence[str], weights: dict[str, float], have: set[str]) -> float:
    """IDF-weighted share of the question's topic stems that a text with stems ``have`` holds."""
    if not stems:
        return 0.0
    total = sum(weights.get(s, 1.0) for s in stems)
    return sum(weights.get(s, 1.0) for s in stems if s in have) / total if total else 0.0


def gather(store: Store, hits: Sequence[SearchHit], *, exclude: frozenset[int] = frozenset(),
           extra: Sequence[StoredMessage] = ()) -> list[Candidate]:
    """The candidate pool: the search hits, the next turns after the best few, and ``extra`` messages,
    each with its context (previous two turns, the next turn, the message it replies to)."""
    cands: dict[int, Candidate] = {}
    for r, h in enumerate(hits[:POOL], 1):
        m = h.message
        if m.id not in exclude and not m.to_bot and m.id not in cands:
            cands[m.id] = Candidate(m, r, h)
    windows: dict[int, list[StoredMessage]] = {}
    for c in list(cands.values()):
        windows[c.message.id] = store.neighbours(c.message, before=3, after=FOLLOW_TURNS)
    anchors = [c for c in cands.values()][:FOLLOW_ANCHORS]
    for a in anchors:
        for m in windows[a.message.id]:
            if m.turn > a.message.turn and m.id not in cands and m.id not in exclude and not m.to_bot:
                cands[m.id] = Candidate(m, POOL + 1, None)
                windows[m.id] = store.neighbours(m, before=3, after=1)
    for m in extra:
        if m.id not in cands and m.id not in exclude and not m.to_bot:
            cands[m.id] = Candidate(m, POOL + 1, None)
            windows[m.id] = store.neighbours(m, before=3, after=1)
    parents = _parents(store, [c.message for c in cands.values()])
    for c in cands.values():
        around = [m for m in windows.get(c.message.id, []) if m.id not in exclude and not m.to_bot]
        c.prev = sorted((m for m in around if m.turn < c.message.turn), key=lambda m: -m.turn)[:3]
        c.next = next((m for m in sorted(around, key=lambda m: m.turn) if m.turn > c.message.turn), None)
        p = parents.get((c.message.scope_id, c.message.reply_to or ""))
        c.parent = p if p is not None and p.id not in exclude else None
    return list(cands.values())


def _parents(store: Store, msgs: Sequence[StoredMessage]) -> dict[tuple[int, str], StoredMessage]:
    want = {(m.scope_id, m.reply_to) for m in msgs if m.reply_to}
    out: dict[tuple[int, str], StoredMessage] = {}
    if not want:
        return out
    with store.read() as conn:
        for sid, mid in want:
            for p in select_messages(conn, "WHERE m.scope_id = ? AND m.msg_id = ? AND m.deleted = 0", (sid, mid)):
                out[(sid, mid)] = p
    return out


def parses(cands: Sequence[Candidate], stored: Mapping[int, Parsed] | None) -> dict[str, Parsed]:
    """Each candidate's and its previous turn's parse, by text: the analysis pass's stored one (no NER at
    question time); a message it has not read yet counts as naming nothing. Without ``stored`` (offline
    training over fresh stores) spaCy parses them here."""
    msgs = [c.message for c in cands] + [c.prev[0] for c in cands if c.prev]
    if stored is None:
        texts = [m.text for m in msgs]
        return dict(zip(texts, parse_many(texts)))
    return {m.text: stored.get(m.id, NOTHING_PARSED) for m in msgs}


def features(q: Question, cands: Sequence[Candidate], roster: Sequence[Person], weights: dict[str, float],
             sims: dict[int, float], stored: Mapping[int, Parsed] | None = None) -> np.ndarray:
    """One row of FEATURES per candidate (``sims``: the question's cosine to each message id; ``stored``: the
    analysis pass's parses by message id)."""
    if not cands:
        return np.zeros((0, len(FEATURES)), dtype=np.float32)
    people = People(roster)
    parsed = parses(cands, stored)
    stems = q.stems
    top = cands[0].message
    times = sorted(c.message.ts for c in cands)
    cos = [sims.get(c.message.id, 0.0) for c in cands]
    covs = [coverage(stems, weights, set(content_stems(c.message.text))) for c in cands]
    max_cos, max_cov = max(cos), max(covs)
    # Where a candidate stands in its discussion: the last on-topic message of a session often settles what
    # the earlier ones raised ("we need to pick a place" ... "Decision: pizza by the river").
    topical = [cv > 0 or cs >= TOPICAL_COSINE for cs, cv in zip(cos, covs)]
    later: dict[int, int] = {}
    for c, t in zip(cands, topical):
        if t:
            for d, u in zip(cands, topical):
                if u and d.message.session == c.message.session and d.message.scope_id == c.message.scope_id \
                        and d.message.ts > c.message.ts:
                    later[c.message.id] = later.get(c.message.id, 0) + 1
    kind_flags = [1.0 if q.kind == k else 0.0 for k in KINDS]
    rows = []
    for c, cs, cv, t in zip(cands, cos, covs, topical):
        m = c.message
        have = set(content_stems(m.text))
        prev_text = " ".join(p.text for p in c.prev[:1])
        p0 = parsed.get(c.prev[0].text) if c.prev else None
        named_in = people.named(m.text)
        rows.append([
            math.log1p(c.rank), 1.0 if c.hit is not None else 0.0,
            math.log1p(c.hit.bm25_rank) if c.hit and c.hit.bm25_rank else 0.0,
            math.log1p(c.hit.vector_rank) if c.hit and c.hit.vector_rank else 0.0,
            cs, max_cos - cs,
            max((sims.get(p.id, 0.0) for p in c.prev[:1]), default=0.0),
            max((sims.get(p.id, 0.0) for p in c.prev[1:2]), default=0.0),
            sims.get(c.next.id, 0.0) if c.next else 0.0,
            sims.get(c.parent.id, 0.0) if c.parent else 0.0,
            cv, max_cov - cv,
            coverage(stems, weights, set(content_stems(prev_text))) if prev_text else 0.0,
            coverage(stems, weights, set(content_stems(c.next.text))) if c.next else 0.0,
            float(len(set(stems) & have)),
            1.0 if m.author_id in q.named else 0.0,
            1.0 if set(named_in) & set(q.named) else 0.0,
            1.0 if states_kind(q.kind, parsed[m.text], m.text, people) else 0.0,
            1.0 if p0 is not None and c.prev and states_kind(q.kind, p0, c.prev[0].text, people) else 0.0,
            1.0 if _FIRST_PERSON.search(m.text) else 0.0,
            1.0 if "?" in m.text else 0.0,
            1.0 if c.prev and "?" in c.prev[0].text and c.prev[0].author_id != m.author_id else 0.0,
            math.log1p(len(m.text)),
            1.0 if any(p.start <= m.ts < p.end for p in q.pins) else 0.0,
            times.index(m.ts) / max(1, len(times) - 1),
            1.0 if m.session == top.session and m.scope_id == top.scope_id else 0.0,
            1.0 if m.reply_to and m.reply_to == top.msg_id or top.reply_to and top.reply_to == m.msg_id else 0.0,
            1.0 if t and later.get(m.id, 0) == 0 else 0.0, math.log1p(later.get(m.id, 0)),
            1.0 if q.tense == "full" else 0.0, float(len(stems)), float(len(q.named)),
            1.0 if q.wants_members else 0.0,
            *kind_flags,
        ])
    return np.asarray(rows, dtype=np.float32)
