"""History backfill: import a channel's past messages oldest first, resumably, at a polite pace.

Each platform supplies a ``HistoryStream`` (Discord and Slack fetchers live in their
adapter modules) that returns pages strictly after a platform id, oldest first. The
cursor table remembers the newest id fetched per scope and stream, so an interrupted
run resumes where it stopped; the store's unique (scope, message id) keeps a page
fetched twice from being stored twice. Pages are stored through the bot's one door (``bot.door``),
so history passes the same privacy gate and retry queue as live messages.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

from memory.errors import StoreError
from memory.models import Message, ScopeKey
from memory.store import Cursor
from memory.tally import Tally

from .door import Door

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 100


@dataclass
class Page:
    """One fetched page: the messages to consider (oldest first) and where the next page starts."""

    messages: list[Message]
    newest_id: str | None
    more: bool
    fetched: int = 0  # raw items returned by the platform, including ones not turned into messages


class HistoryStream(Protocol):
    """One ordered message history: a channel, a thread of it, or a DM."""

    key: ScopeKey
    stream: str  # '' for the channel itself, else the thread id
    label: str
    channel_name: str
    is_dm: bool

    async def fetch_after(self, after: str | None, limit: int) -> Page: ...


@dataclass
class BackfillResult(Tally):
    streams: int = 0
    pages: int = 0
    fetched: int = 0
    imported: int = 0
    duplicates: int = 0
    refused: int = 0
    queued: int = 0  # the store refused the write for now: the door's queue stores them when it can
    older: int = 0  # older than the import's limit (``since``), fetched but not stored
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.streams} stream(s), {self.pages} page(s), {self.fetched} fetched, {self.imported} imported, "
                f"{self.duplicates} already stored, {self.refused} not remembered (privacy)"
                + (f", {self.older} older than the limit" if self.older else "")
                + (f", {len(self.errors)} error(s)" if self.errors else ""))


Progress = Callable[[str, BackfillResult], None]


def log_progress(label: str, result: BackfillResult) -> None:
    """Default progress report: one log line per page."""
    log.info("backfill %s: %d fetched, %d imported so far", label, result.fetched, result.imported)


class Backfiller:
    """Runs history streams into the store, one page at a time, oldest first."""

    def __init__(self, door: Door, *, default_opt_in: bool | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                 min_interval_s: float = 0.0, embed: bool | None = None, executor: Executor | None = None,
                 progress: Progress | None = log_progress,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 accept: Callable[[Message], bool] | None = None, since: float | None = None) -> None:
        self.door = door
        self.since = since  # epoch seconds: older messages are read past but not stored (None: all history)
        self.default_opt_in = default_opt_in
        self.page_size = page_size
        self.min_interval_s = min_interval_s
        self.embed = door.store.embedder is not None if embed is None else embed
        self.executor = executor
        self.progress = progress
        self._sleep = sleep
        self._accept = accept
        self._last_fetch = 0.0

    async def run(self, streams: Iterable[HistoryStream], *, max_pages: int | None = None) -> BackfillResult:
        """Backfill several streams; one failing stream is logged and the rest still run."""
        total = BackfillResult()
        for stream in streams:
            try:
                total.add(await self.run_stream(stream, max_pages=max_pages))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a boundary: one unreadable channel must not stop the others
                log.exception("backfill of %s failed", stream.label)
                total.errors.append(f"{stream.label}: {exc}")
        return total

    async def run_stream(self, stream: HistoryStream, *, max_pages: int | None = None) -> BackfillResult:
        """Import one stream from its cursor onwards; returns what this run did."""
        loop = asyncio.get_running_loop()
        result = BackfillResult(streams=1)
        sid = await loop.run_in_executor(self.executor, lambda: self.door.scope(
            stream.key, default_opt_in=self.default_opt_in, name=stream.channel_name, is_dm=stream.is_dm))
        cursor = await loop.run_in_executor(self.executor, self.door.cursor, sid, stream.stream)
        while max_pages is None or result.pages < max_pages:
            await self._pace()
            page = await stream.fetch_after(cursor.newest_id, self.page_size)
            result.pages += 1
            result.fetched += page.fetched or len(page.messages)
            await loop.run_in_executor(self.executor, self._import, sid, stream, cursor, page, result)
            if self.progress:
                self.progress(stream.label, result)
            if not page.more or page.newest_id is None:
                break
        return result

    async def _pace(self) -> None:
        if self.min_interval_s > 0:
            wait = self._last_fetch + self.min_interval_s - time.monotonic()
            if wait > 0:
                await self._sleep(wait)
        self._last_fetch = time.monotonic()

    def _import(self, sid: int, stream: HistoryStream, cursor: Cursor, page: Page, result: BackfillResult) -> None:
        """Store one page and then move the cursor (runs in a worker thread, never cancelled half-way)."""
        keep: list[Message] = []
        for m in sorted(page.messages, key=lambda m: m.ts):
            if self.since is not None and m.ts < self.since:
                result.older += 1
            elif self._accept is not None and not self._accept(m):
                result.refused += 1
            else:
                keep.append(m)
        if keep:
            r = self.door.remember(keep, embed=self.embed, batch_size=len(keep), default_opt_in=self.default_opt_in)
            result.imported += r.stored
            result.duplicates += r.duplicates
            result.refused += r.refused
            result.queued += r.queued
            if r.queued:  # the cursor stays before this page, so a later run fetches it again (duplicates drop)
                raise StoreError(f"the store refused writes while importing {stream.label}; {r.queued} messages "
                                 "wait in the retry queue and the import resumes from this page next time")
        if page.messages and cursor.oldest_id is None:
            cursor.oldest_id = min(page.messages, key=lambda m: m.ts).msg_id
        if page.newest_id is not None:
            cursor.newest_id = page.newest_id
        cursor.fetched += page.fetched or len(page.messages)
        cursor.done = cursor.done or not page.more
        self.door.save_cursor(sid, stream.stream, cursor)
