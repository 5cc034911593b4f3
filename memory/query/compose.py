"""Compose one evidence pack: raw excerpts (Track 1) plus the memory slice by row (Track 2).

Rows stay separate: one per person asked about (or every member for ALL) and one
for GROUP. Each row holds that person's matching records (current node, or the
whole chain when history is wanted), a group record they voiced, or, failing
that, their best raw message, or an explicit "(no record)". Every item cites the
message it rests on, and the pack stays under a token budget.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..models import SearchHit, StoredMessage
from ..question import ALL, Question
from ..records import GROUP, INSIGHT_LAYER, Record, Records
from ..search import Searcher
from ..store import Person, Store
from ..timefmt import stamp
from .dates import annotate

# Reciprocal-rank constant for fusing Track 2 provenance with Track 1 hits in `EvidencePack.message_ids`.
_FUSION_K = 10
# Track 2 provenance counts half as much as a verbatim hit: a record is a summary of a message, so it points
# at evidence rather than being it. How it was chosen, with figures: docs/writer.md.
TRACK2_WEIGHT = 0.5


@dataclass
class Budgets:
    recall_pool: int = 160  # = memory.search.HYBRID.pool (tuned leave-one-dataset-out)
    top_k: int = 10
    rerank_k: int = 30  # search hits the reply's reranker sees (memory/query/candidates.py)
    neighbours: int = 1
    expand_hits: int = 3
    row_k: int = 2
    source_k: int = 1
    token_budget: int = 1500
    max_rows: int = 30


@dataclass
class Cite:
    """A numbered citation: the message an evidence item rests on."""

    n: int
    message: StoredMessage


@dataclass
class RowItem:
    record: Record
    history: list[Record]
    cite: Cite | None
    via: str  # "owner", "voiced", "insight-fact"


@dataclass
class Row:
    key: str  # person id or GROUP
    name: str
    items: list[RowItem] = field(default_factory=list)
    fallback: Cite | None = None

    @property
    def empty(self) -> bool:
        return not self.items and self.fallback is None


@dataclass
class EvidencePack:
    question: Question
    excerpts: list[Cite]
    rows: list[Row]
    cites: list[Cite]
    hits: list[SearchHit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    per_author: dict[str, StoredMessage] | None = None  # each member's best message, when rows needed it
    roster: list[Person] | None = None  # the asked scopes' roster, read once per question

    def message_ids(self, k: int, *, track1: bool = True, track2: bool = True,
                    person_rows: bool = True, group_rows: bool = True) -> list[str]:
        """Evidence messages (platform msg ids) under an item budget of ``k``, for retrieval scoring.

        The two tracks are fused by reciprocal rank (k = 10, Track 2 at half weight): Track 2's
        provenance in row order (every row's best item, then every row's second), and
        Track 1's hits. A message both tracks found rises; neither track can push the
        other's best items out of a small budget.
        """
        return [m.msg_id for m in self.ranked(k, track1=track1, track2=track2, person_rows=person_rows,
                                              group_rows=group_rows)]

    def ranked(self, k: int, *, track1: bool = True, track2: bool = True, person_rows: bool = True,
               group_rows: bool = True) -> list[StoredMessage]:
        """The evidence messages best first (see `message_ids`): what a reply quotes."""
        provenance: list[StoredMessage] = []
        # A "who said it" question is answered by the verbatim message: each named person's records
        # would push it out of a small budget (docs/writer.md), so person rows add no provenance then.
        person_rows = person_rows and not self.question.attribution
        if track2:
            rows = [r for r in self.rows
                    if not ((r.key == GROUP and not group_rows) or (r.key != GROUP and not person_rows))]
            for level in range(max((len(r.items) for r in rows), default=0)):
                for row in rows:
                    cite = row.items[level].cite if level < len(row.items) else None
                    if cite:
                        m = cite.message
                        if all(p.id != m.id for p in provenance):
                            provenance.append(m)
        hits = [h.message for h in self.hits] if track1 else []
        score: dict[int, float] = {}
        by_id: dict[int, StoredMessage] = {}
        for ranked, weight in ((hits, 1.0), (provenance, TRACK2_WEIGHT)):  # a tie goes to the verbatim hit
            for rank, m in enumerate(ranked, 1):
                by_id.setdefault(m.id, m)
                score[m.id] = score.get(m.id, 0.0) + weight / (_FUSION_K + rank)
        return [by_id[i] for i in sorted(score, key=lambda i: -score[i])[:k]]

    def render(self, names: dict[str, str]) -> str:
        """The evidence text handed to the answer model."""
        lines = ["[RAW EXCERPTS]"]
        for c in self.excerpts:
            lines.append(_line(c))
        # A row item that only repeats an excerpt's words points at it instead: the prompt is
        # the answer's main cost on a small CPU, and the model reads the excerpt anyway.
        shown = {c.message.id for c in self.excerpts}
        if self.rows:
            lines.append("[MEMORY BY PERSON]")
            for row in self.rows:
                if row.empty:
                    lines.append(f"{row.name}: (no record)")
                    continue
                for item in row.items:
                    tag = f" [{item.cite.n}]" if item.cite else ""
                    if item.cite and item.cite.message.id in shown and _same(item.record.content,
                                                                             item.cite.message.text):
                        lines.append(f"{row.name}: now: as quoted in [{item.cite.n}]")
                    else:
                        lines.append(f"{row.name}: now: {item.record.content}{tag}")
                    for old in item.history:
                        lines.append(f"{row.name}: earlier ({stamp(old.ts)[:10]}): {old.content}")
                if not row.items and row.fallback:
                    if row.fallback.message.id in shown:
                        lines.append(f"{row.name}: said [{row.fallback.n}]")
                    else:
                        lines.append(f"{row.name}: said: {_flat(row.fallback.message.text, 200)} [{row.fallback.n}]")
        return "\n".join(lines)


def _same(a: str, b: str) -> bool:
    """Whether two texts say the same words (case and spacing aside)."""
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def _flat(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _line(c: Cite) -> str:
    m = c.message
    return f"[{c.n}] {m.author_name} ({stamp(m.ts)}): {annotate(_flat(m.text, 400), m.ts)}"


def _tokens(text: str) -> int:
    return len(text) // 4 + 1


class Composer:
    """Builds evidence packs for questions within one set of scopes."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, budgets: Budgets | None = None) -> None:
        self.store = store
        self.searcher = searcher
        self.records = records
        self.budgets = budgets or Budgets()

    def compose(self, scope_ids: list[int], question: Question, roster: list[Person], *,
                exclude: frozenset[int] = frozenset(), use_track1: bool = True, use_track2: bool = True,
                person_rows: bool = True, group_rows: bool = True) -> EvidencePack:
        b = self.budgets
        projection = question
        timings: dict[str, float] = {}
        t = time.perf_counter()
        hits = self.searcher.search(scope_ids, question, k=max(b.top_k, b.rerank_k), pool=b.recall_pool,
                                    exclude=exclude) \
            if use_track1 else []
        timings["track1"] = (time.perf_counter() - t) * 1000
        cites: dict[int, Cite] = {}

        def cite(m: StoredMessage) -> Cite:
            if m.id not in cites:
                cites[m.id] = Cite(len(cites) + 1, m)
            return cites[m.id]

        used = 0
        excerpts: list[Cite] = []
        expanded: list[StoredMessage] = []
        for n, h in enumerate(hits[: b.top_k]):
            group = self.searcher.expand([h.message], before=b.neighbours, after=b.neighbours) \
                if n < b.expand_hits and b.neighbours else [h.message]
            for m in group:
                if m.id in exclude or any(e.id == m.id for e in expanded):
                    continue
                cost = _tokens(_flat(m.text, 400)) + 12
                if used + cost > b.token_budget * 0.6:
                    break
                used += cost
                expanded.append(m)
        for m in sorted(expanded, key=lambda m: (m.ts, m.id)):
            excerpts.append(cite(m))

        t = time.perf_counter()
        rows: list[Row] = []
        if use_track2:
            names = {p.person_id: p.display_name for p in roster}
            keys: list[str] = []
            for r in projection.rows:
                if r == ALL:
                    keys += [p.person_id for p in roster if not p.is_bot and p.person_id not in keys]
                elif r not in keys:
                    keys.append(r)
            keys = [k for k in keys if (k == GROUP and group_rows) or (k != GROUP and person_rows)][: b.max_rows]
            qv = self.searcher.vector_or_none(projection.issue) if self.store.embedder is not None else None
            words_only = qv is None  # no embedder, or it failed: records are searched by words alone
            group_matches = [r for r, _ in self.records.search(scope_ids, projection.issue, owners=[GROUP], limit=8,
                                                               heads_only=True, query_vec=qv,
                                                               lexical_only=words_only)] if b.source_k else []
            fallback_cache: dict[str, StoredMessage] | None = None

            def fallback(person: str) -> StoredMessage | None:
                nonlocal fallback_cache
                if fallback_cache is None:  # computed once, for every person row that needs it
                    people = [k for k in keys if k != GROUP]
                    fallback_cache = self.searcher.best_by_authors(scope_ids, projection.issue, people)
                m = fallback_cache.get(person)
                return m if m is not None and m.id not in exclude else None

            for key in keys:
                row = self._row(scope_ids, key, names.get(key, key), projection, exclude, cite, group_matches, qv,
                                fallback)
                cost = sum(_tokens(i.record.content) + 10 + sum(_tokens(h.content) for h in i.history)
                           for i in row.items) + (40 if row.fallback else 8)
                if used + cost > b.token_budget and rows:
                    row.items, row.fallback = [], None  # keep the row visible, drop its content
                else:
                    used += cost
                rows.append(row)
        timings["track2"] = (time.perf_counter() - t) * 1000
        pack = EvidencePack(question, excerpts, rows, sorted(cites.values(), key=lambda c: c.n), hits, timings)
        if use_track2:
            pack.per_author = fallback_cache
        return pack

    def _row(self, scope_ids: list[int], key: str, name: str, projection: Question,
             exclude: frozenset[int], cite, group_matches: list[Record], qv, fallback) -> Row:
        b = self.budgets
        row = Row(key, "GROUP" if key == GROUP else name)
        heads_only = projection.tense == "head"
        found = self.records.search(scope_ids, projection.issue, owners=[key],
                                    limit=b.row_k + (1 if key == GROUP else 0), heads_only=heads_only, query_vec=qv,
                                    lexical_only=qv is None)
        seen_chains: set[int] = set()
        for rec, _ in found:
            if rec.chain_id in seen_chains:
                continue
            seen_chains.add(rec.chain_id)
            self._add(row, rec, projection, cite, "owner")
            if rec.layer == INSIGHT_LAYER:
                for fact in self.records.cited_facts(rec.id):
                    self._add(row, fact, projection, cite, "insight-fact")
        if key != GROUP and b.source_k:
            for rec in [r for r in group_matches if r.source == key][: b.source_k]:
                self._add(row, rec, projection, cite, "voiced")
        if not row.items and key != GROUP:
            best = fallback(key)
            if best is not None:
                row.fallback = cite(best)
        return row

    def _add(self, row: Row, rec: Record, projection: Question, cite, via: str) -> None:
        history: list[Record] = []
        if projection.tense == "full":
            chain = [r for r in self.records.chain(rec.id) if r.status == "active"]
            heads = [r for r in chain if r.superseded_by is None]
            rec = heads[-1] if heads else rec
            history = [r for r in chain if r.id != rec.id]
        if not rec.sources:
            rec = self.records.get([rec.id], with_sources=True)[0]
        msgs = self.store.messages(rec.sources[:1])
        row.items.append(RowItem(rec, history, cite(msgs[0]) if msgs else None, via))
