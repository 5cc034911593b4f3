"""Serialise calls to one shared model, interactive callers first.

Chorus loads a single model instance for both the background memory writer and
the interactive answer path: two copies would double memory, and llama.cpp
contexts are not safe to use from two threads at once. The gate makes the calls
take turns. A waiting interactive call is always admitted before any waiting
background call, so a person asking a question waits behind at most the one
call already running, never behind a backlog of writer jobs. Within one
priority, callers are admitted in arrival order.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import ModelError
from .base import BACKGROUND, INTERACTIVE, check_priority


class ModelGate:
    """A priority lock: one holder at a time, interactive waiters before background."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[object]] = {INTERACTIVE: deque(), BACKGROUND: deque()}
        self._holder: int | None = None  # thread id of the current holder
        self._holder_priority: str | None = None
        self.admitted: dict[str, int] = {INTERACTIVE: 0, BACKGROUND: 0}
        self.waited_seconds: dict[str, float] = {INTERACTIVE: 0.0, BACKGROUND: 0.0}

    def _next_ticket(self) -> object | None:
        for priority in (INTERACTIVE, BACKGROUND):
            if self._queues[priority]:
                return self._queues[priority][0]
        return None

    def acquire(self, priority: str = BACKGROUND, timeout: float | None = None) -> bool:
        """Wait for our turn; False if ``timeout`` seconds pass first."""
        check_priority(priority)
        me = threading.get_ident()
        ticket = object()
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        with self._cond:
            if self._holder == me:
                # Waiting on ourselves would hang forever; say so instead.
                raise ModelError(
                    "the model was called again from inside a model call on the same thread; "
                    "finish the first call before starting another"
                )
            queue = self._queues[priority]
            queue.append(ticket)
            try:
                while self._holder is not None or self._next_ticket() is not ticket:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        queue.remove(ticket)
                        self._cond.notify_all()  # we may have been blocking the line
                        return False
                    self._cond.wait(remaining)
            except BaseException:
                if ticket in queue:
                    queue.remove(ticket)
                    self._cond.notify_all()
                raise
            queue.popleft()
            self._holder = me
            self._holder_priority = priority
            self.admitted[priority] += 1
            self.waited_seconds[priority] += time.monotonic() - started
            return True

    def release(self) -> None:
        """Hand the model to the next waiter (interactive first)."""
        with self._cond:
            if self._holder is None:
                raise RuntimeError("ModelGate.release() called while nobody holds the gate")
            self._holder = None
            self._holder_priority = None
            self._cond.notify_all()

    @contextmanager
    def hold(self, priority: str = BACKGROUND, timeout: float | None = None) -> Iterator[None]:
        """``with gate.hold("interactive"): ...`` — raises ModelError on timeout."""
        if not self.acquire(priority, timeout):
            raise ModelError(
                f"the model stayed busy for {timeout:g}s; a {priority} call gave up waiting"
            )
        try:
            yield
        finally:
            self.release()

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._holder is not None

    def waiting(self) -> dict[str, int]:
        """How many callers of each priority are queued (not counting the holder)."""
        with self._cond:
            return {p: len(q) for p, q in self._queues.items()}
