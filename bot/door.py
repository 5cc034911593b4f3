"""The one door into memory: every message that reaches the store comes through ``Door.remember``.

Live events, history imports (``backfill``), transcripts (``chorus ingest``) and the console's demo all
pass the same privacy gate (paused workspace, opted-out member, opted-out channel) and the same retry
queue: a write the store refuses for a passing reason (locked, disk full) waits in the queue instead of
being lost. After a write the door wakes the background jobs that follow ingest (vectors, analysis).
Adapters reach the store only through here, so none of them writes SQL or calls the gate itself.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory import privacy
from memory.models import Message, ScopeKey
from memory.store import Cursor, Store
from memory.tally import Tally

from .ingest_queue import IngestQueue

log = logging.getLogger(__name__)


@dataclass
class Remembered(Tally):
    """What one ``remember`` call did with the messages it was given."""

    stored: int = 0
    duplicates: int = 0
    refused: int = 0   # the privacy gate (or the store, for an opted-out channel) said no
    queued: int = 0    # the store refused the write for now: the queue retries them, in order
    embedded: int = 0


class Door:
    """The privacy gate and the retry queue in front of one store."""

    def __init__(self, store: Store, *, default_opt_in: bool = True,
                 on_stored: Callable[[], None] | None = None) -> None:
        self.store = store
        self.default_opt_in = default_opt_in
        self._on_stored = on_stored
        self.queue = IngestQueue(lambda m: store.ingest_one(m, embed=False),
                                 ingest_many=lambda ms: store.ingest(ms, embed=False), on_stored=self._stored)

    def _stored(self) -> None:
        if self._on_stored is not None:
            self._on_stored()

    def admitted(self, messages: Sequence[Message], *, default_opt_in: bool | None = None) -> list[Message]:
        """The messages the privacy settings allow to be remembered, in order."""
        opt_in = self.default_opt_in if default_opt_in is None else default_opt_in
        decided: dict[tuple[str, str, str, str, bool], str | None] = {}
        keep: list[Message] = []
        for m in messages:
            key = (m.platform, m.workspace, m.channel, m.author_id, m.is_dm)
            if key not in decided:  # one answer per author and channel within a call (a bulk import)
                decided[key] = privacy.ingest_refusal(self.store, m, default_opt_in=opt_in)
            if decided[key]:
                log.debug("%s:%s:%s not remembered (%s)", m.platform, m.workspace, m.channel, decided[key])
            else:
                keep.append(m)
        return keep

    def remember(self, messages: Sequence[Message], *, embed: bool = False, batch_size: int = 256,
                 progress: Callable[[int], None] | None = None, default_opt_in: bool | None = None) -> Remembered:
        """Store what the gate admits. A refused write is queued (``queued``), never dropped.

        ``embed`` computes vectors inline (an import with the embedder at hand); otherwise the background
        backlog embeds them. Bad input (a message too long, say) raises and stores nothing of this batch.
        """
        result = Remembered()
        keep = self.admitted(messages, default_opt_in=default_opt_in)
        result.refused = len(messages) - len(keep)
        if not keep:
            return result
        r = self.queue.offer_many(keep, lambda ms: self.store.ingest(ms, embed=embed, batch_size=batch_size,
                                                                      progress=progress))
        if r is None:  # the store refused the write for now: they wait in the queue, in order
            result.queued = len(keep)
            return result
        result.stored, result.duplicates, result.embedded = r.inserted, r.duplicates, r.embedded
        result.refused += r.skipped
        self._stored()
        return result

    # ------------------------------------------------------------------ platform bookkeeping
    def scope(self, key: ScopeKey, *, name: str = "", is_dm: bool = False,
              default_opt_in: bool | None = None) -> int:
        """The scope's id, created on first sight with the configured opt-in default."""
        opt_in = self.default_opt_in if default_opt_in is None else default_opt_in
        return privacy.ensure_scope(self.store, key, default_opt_in=opt_in, name=name, is_dm=is_dm)

    def first_event(self, platform: str, event_id: str) -> bool:
        """True the first time a platform delivers ``event_id`` (its retries are answered once)."""
        return self.store.first_event(platform, event_id)

    def cursor(self, scope_id: int, stream: str) -> Cursor:
        return self.store.backfill_cursor(scope_id, stream)

    def save_cursor(self, scope_id: int, stream: str, cursor: Cursor) -> None:
        self.store.save_backfill_cursor(scope_id, stream, cursor)

    def close(self, timeout_s: float = 5.0) -> int:
        """Store what is queued if the store lets us; returns how many messages were left unstored."""
        return self.queue.close(timeout_s)
