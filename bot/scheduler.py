"""Background writer scheduling with APScheduler.

One job runs pending writer windows at an interval (and once at startup to catch
up). The job is a boundary: any failure is logged with its traceback and the
next run tries again. Only one run is active at a time.
"""
from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from memory.errors import ChorusError
from memory.writer.writer import Writer

log = logging.getLogger(__name__)


class WriterScheduler:
    """Runs ``writer.run_pending`` in the background every ``interval_s`` seconds."""

    def __init__(self, writer_factory, interval_s: int, *, max_windows_per_run: int = 20) -> None:
        self._writer_factory = writer_factory
        self.interval_s = interval_s
        self.max_windows = max_windows_per_run
        self._scheduler = BackgroundScheduler(daemon=True)
        self._stop = threading.Event()
        self.runs = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._scheduler.add_job(self.run_once, "interval", seconds=self.interval_s, id="writer",
                                max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        self._scheduler.start()

    def run_once(self) -> int:
        try:
            writer: Writer | None = self._writer_factory()
            if writer is None:
                return 0
            results = writer.run_pending(max_windows=self.max_windows, should_stop=self._stop.is_set)
            self.runs += 1
            if results:
                ok = sum(r.status == "committed" for r in results)
                log.info("writer: %d window(s) committed, %d failed", ok, len(results) - ok)
            self.last_error = None
            return len(results)
        except ChorusError as exc:
            self.last_error = str(exc)
            log.error("writer run failed: %s", exc, exc_info=True)
        except Exception as exc:  # a scheduled job is a boundary
            self.last_error = repr(exc)
            log.exception("writer run crashed")
        return 0

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
