"""What a channel holds about a topic: the records and messages that are about it, and what the writer has read.

``/timeline <topic>`` lists these in time order. Before the writer has read a channel there are no
records yet, so the messages are the answer, marked as such; once records exist they are, with the
messages the writer has not reached yet listed after them.

A text is about the topic when it shares one of the topic's content words (stemmed, as grounding
compares words) or when its MiniLM cosine to the topic is above the floor at which the replies
treat as on topic (``memory.query.candidates.TOPICAL_COSINE``, the reply's own on-topic test).
Search alone always returns its nearest neighbours, related or not; this is the bar that keeps
"/timeline spaceship" from listing the dinner plans.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .models import StoredMessage
from .query.candidates import TOPICAL_COSINE
from .records import INSIGHT_LAYER, Record, Records
from .search import Searcher
from .store import Store
from .writer.grounding import content_terms

CANDIDATES = 24  # search results weighed per kind; a timeline shows at most this many of each


@dataclass
class TopicMaterial:
    """Records and messages about one topic, oldest first, and how far the writer has read."""

    chains: list[list[Record]] = field(default_factory=list)  # each chain's active versions, oldest first
    messages: list[StoredMessage] = field(default_factory=list)  # about the topic, not yet read by the writer
    read_messages: list[StoredMessage] = field(default_factory=list)  # about the topic, read, no record on it
    waiting: int = 0  # messages of these channels the writer has not read yet (any topic)
    records_total: int = 0  # current records in these channels (any topic)


def about(store: Store, topic: str, texts: Sequence[str]) -> list[bool]:
    """For each text: is it about ``topic`` (a shared content word, or close in meaning)?"""
    wanted = content_terms(topic)
    out = [bool(wanted & content_terms(t)) for t in texts]
    embedder = store.embedder
    rest = [i for i, ok in enumerate(out) if not ok]
    if embedder is not None and rest and topic.strip():
        vecs = embedder.embed([topic] + [texts[i] for i in rest])
        sims = np.asarray(vecs[1:], dtype=np.float32) @ np.asarray(vecs[0], dtype=np.float32)
        for i, sim in zip(rest, sims):
            out[i] = float(sim) >= TOPICAL_COSINE
    return out


def watermarks(store: Store, scope_ids: Sequence[int]) -> dict[int, int]:
    """The writer's watermark per scope (messages with a higher id are not read yet)."""
    with store.read() as conn:
        rows = dict(conn.execute(f"SELECT scope_id, watermark FROM writer_state WHERE scope_id IN "
                                 f"({','.join('?' * len(scope_ids))})", list(scope_ids)).fetchall()) \
            if scope_ids else {}
    return {sid: int(rows.get(sid, 0) or 0) for sid in scope_ids}


def waiting_count(store: Store, marks: dict[int, int], author_id: str | None = None) -> int:
    """Chat messages (not bot traffic) past the watermarks, optionally one author's."""
    total = 0
    with store.read() as conn:
        for sid, mark in marks.items():
            sql = "SELECT count(*) FROM messages WHERE scope_id = ? AND id > ? AND deleted = 0 AND bot_traffic = 0"
            args: list = [sid, mark]
            if author_id is not None:
                sql += " AND author_id = ?"
                args.append(author_id)
            total += conn.execute(sql, args).fetchone()[0]
    return total


def topic_material(store: Store, searcher: Searcher, records: Records, scope_ids: list[int],
                   topic: str) -> TopicMaterial:
    """The records about ``topic`` (every version of their chains' search hits) and the messages about it."""
    out = TopicMaterial()
    if not scope_ids or not topic.strip():
        return out
    marks = watermarks(store, scope_ids)
    out.waiting = waiting_count(store, marks)
    out.records_total = sum(records.count(sid, heads_only=True) for sid in scope_ids)
    if out.records_total:
        found = [r for r, _ in records.search(scope_ids, topic, limit=CANDIDATES, heads_only=False)
                 if r.layer != INSIGHT_LAYER]  # the bot's own reading is not something the chat said
        chains: dict[int, list[Record]] = {}
        for rec, ok in zip(found, about(store, topic, [r.content for r in found])):
            if ok and rec.chain_id not in chains:
                versions = [r for r in records.chain(rec.id) if r.status == "active"]
                chains[rec.chain_id] = records.get([r.id for r in versions], with_sources=True)
        out.chains = sorted((c for c in chains.values() if c), key=lambda c: (c[0].ts, c[0].id))
    hits = [h.message for h in searcher.search(scope_ids, topic, k=CANDIDATES) if not h.message.to_bot]
    relevant = [m for m, ok in zip(hits, about(store, topic, [m.text for m in hits])) if ok]
    relevant.sort(key=lambda m: (m.ts, m.id))
    on_record = {mid for chain in out.chains for r in chain for mid in r.sources}
    out.messages = [m for m in relevant if m.id > marks.get(m.scope_id, 0)]
    out.read_messages = [m for m in relevant if m.id <= marks.get(m.scope_id, 0) and m.id not in on_record]
    return out
