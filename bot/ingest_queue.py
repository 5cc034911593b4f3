"""Messages the store could not take right now wait here and are retried, in order.

A live chat event is delivered once: if the store refuses the write for a passing
reason (another process holds the lock past the busy timeout, the disk is full),
dropping the message would lose it for good. ``IngestQueue.offer`` stores the
message at once when it can; otherwise the message joins a queue that a background
thread retries with backoff until the store accepts it again. While anything is
queued, new messages queue behind it, so they are stored in the order they came.

The queue lives in memory (a spool file would sit on the same full disk). A process
that dies with messages queued logs how many were left; ``chorus backfill`` fetches
them from the platform again (the store drops the duplicates).
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from memory.errors import StoreError
from memory.models import Message

log = logging.getLogger(__name__)

MAX_QUEUED = 200_000
R = TypeVar("R")


class IngestQueue:
    """Stores messages through ``ingest``; queues and retries them while the store refuses writes."""

    def __init__(self, ingest: Callable[[Message], object], *, on_stored: Callable[[], None] | None = None,
                 ingest_many: Callable[[list[Message]], object] | None = None, batch_size: int = 256,
                 first_delay_s: float = 0.2, max_delay_s: float = 10.0, max_queued: int = MAX_QUEUED) -> None:
        self._ingest = ingest
        # Retries store many messages per transaction: faster after an outage, and far less WAL on a full disk.
        self._ingest_many = ingest_many
        self.batch_size = batch_size
        self._on_stored = on_stored
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.max_queued = max_queued
        self._queue: deque[Message] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.retried = 0  # messages stored by a retry (they would have been lost without the queue)
        self.dropped = 0  # only when more than max_queued wait: logged as errors, never silent

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def offer(self, msg: Message) -> bool:
        """Store ``msg`` now (True) or queue it for retry (False). Other errors (bad input) propagate."""
        return self.offer_many([msg], lambda ms: self._ingest(ms[0])) is not None

    def offer_many(self, msgs: list[Message], ingest: Callable[[list[Message]], R]) -> R | None:
        """Store ``msgs`` now through ``ingest`` and return its result, or queue them all in order (None).

        While anything is queued, new messages go behind it. Errors other than ``StoreError`` (bad input)
        propagate and nothing is queued.
        """
        with self._lock:
            if not self._queue:
                try:
                    return ingest(msgs)
                except StoreError as exc:
                    self.last_error = str(exc)
                    log.error("could not store %d message(s) now, queued for retry: %s", len(msgs), exc)
            for msg in msgs:
                if len(self._queue) >= self.max_queued:
                    dropped = self._queue.popleft()
                    self.dropped += 1
                    log.error("ingest queue full (%d messages); dropped %s:%s:%s/%s, which `chorus backfill` can "
                              "fetch again", self.max_queued, dropped.platform, dropped.workspace, dropped.channel,
                              dropped.msg_id)
                self._queue.append(msg)
            self._start()
            self._wake.notify_all()
        return None

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="chorus-ingest-retry", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        delay = self.first_delay_s
        while True:
            with self._lock:
                while not self._queue and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                stored = 0
                one_by_one = self._ingest_many is None
                try:
                    while self._queue:
                        if one_by_one:
                            self._ingest(self._queue[0])
                            self._queue.popleft()
                            stored += 1
                            continue
                        batch = list(itertools.islice(self._queue, self.batch_size))
                        try:
                            self._ingest_many(batch)  # type: ignore[misc]
                        except StoreError:
                            raise
                        except Exception:  # one bad message in the batch: find it one by one
                            one_by_one = True
                            continue
                        for _ in batch:
                            self._queue.popleft()
                        stored += len(batch)
                except StoreError as exc:
                    self.last_error = str(exc)
                except Exception:  # bad input slipped in: never block the queue behind it
                    bad = self._queue.popleft()
                    log.exception("queued message %s/%s could not be stored and was dropped", bad.channel,
                                  bad.msg_id)
                self.retried += stored
                left = len(self._queue)
            if stored and self._on_stored is not None:
                self._on_stored()
            if left == 0:
                log.info("store accepts writes again: %d queued message(s) stored", stored)
                delay = self.first_delay_s
                continue
            if stored:
                delay = self.first_delay_s
            with self._lock:
                if self._stop:
                    return
                self._wake.wait(timeout=delay)
            delay = min(self.max_delay_s, delay * 2)

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait until nothing is queued (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.pending:
                return True
            with self._lock:
                self._wake.notify_all()
            time.sleep(0.02)
        return not self.pending

    def close(self, timeout_s: float = 5.0) -> int:
        """Try to store what is queued, stop the thread; returns how many messages were left unstored."""
        if self.pending:
            self.drain(timeout_s)
        with self._lock:
            self._stop = True
            self._wake.notify_all()
            left = len(self._queue)
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        if left:
            log.error("stopping with %d message(s) the store never accepted (last error: %s); run "
                      "`chorus backfill` to fetch them from the platform again", left, self.last_error)
        return left
