"""Scheduled catch-up digests: one APScheduler job per configured channel, plus retries.

At each run every subscriber of the channel gets a digest by direct message, from where their last
scheduled digest ended (else their last message, else the last week) to the run's time; a member with
nothing new is skipped. Each digest is a row in ``catchup_digests`` (``memory.catchup.subscriptions``):
claimed before anything is built, 'sending' before the platform call, 'sent' after it. So:
- a restart runs the latest run it missed (within ``missed_grace_hours``) and finishes open rows;
- a crash between the send and the 'sent' record leaves 'sending': before sending again the platform is
  asked whether the DM already holds that digest (its marker, ``digest #ID``), so nobody gets it twice;
- a failed delivery is logged with its cause and retried every ``retry_minutes``, up to ``max_attempts``,
  then given up with an error in the log. Nothing is dropped silently.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from memory.catchup import subscriptions
from memory.catchup.digest import last_message_ts
from memory.catchup.subscriptions import DigestRow
from memory.models import ScopeKey

from .app import Bot, parse_scope
from .catchup import Catchup, Window, to_reply
from .replies import Reply

log = logging.getLogger(__name__)


class Deliverer(Protocol):
    """What a platform adapter offers the scheduler: a DM, and a look at what the DM already holds."""

    def deliver_dm(self, workspace: str, user_id: str, reply: Reply) -> None: ...

    def dm_contains(self, workspace: str, user_id: str, marker: str, after_ts: float) -> bool: ...


@dataclass(frozen=True)
class Schedule:
    key: ScopeKey
    cron: str
    tz: tzinfo

    def trigger(self) -> CronTrigger:
        return CronTrigger.from_crontab(self.cron, timezone=self.tz)

    def latest_run(self, now: datetime, grace: timedelta) -> datetime | None:
        """The last time this schedule fired at or before ``now``, if that is within ``grace``."""
        trigger = self.trigger()
        latest, at = None, now - grace
        fire = trigger.get_next_fire_time(None, at)
        while fire is not None and fire <= now:
            latest = fire
            fire = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
        return latest


class DigestScheduler:
    """Sends subscribers their scheduled digests through the platforms' ``Deliverer``s."""

    def __init__(self, bot: Bot, deliverers: dict[str, Deliverer], *, clock=time.time) -> None:
        self.bot = bot
        self.store = bot.store
        self.deliverers = deliverers
        self.catchup = Catchup(bot)
        cfg = bot.settings.catchup
        self.cfg = cfg
        self.clock = clock
        self.schedules = [Schedule(parse_scope(scope), cron, self.catchup.tz(parse_scope(scope)))
                          for scope, cron in cfg.schedules]
        self._scheduler = BackgroundScheduler(daemon=True)
        self._lock = threading.Lock()  # one pass at a time: a scheduled run and a retry never race on a row

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        grace = int(self.cfg.missed_grace_hours * 3600) or None
        for n, sched in enumerate(self.schedules):
            self._scheduler.add_job(self.run_schedule, sched.trigger(), args=[sched], id=f"catchup-{n}",
                                    max_instances=1, coalesce=True, misfire_grace_time=grace)
        self._scheduler.add_job(self.retry_open, "interval", seconds=self.cfg.retry_minutes * 60, id="catchup-retry",
                                max_instances=1, coalesce=True)
        self._scheduler.add_job(self.recover, id="catchup-recover", max_instances=1)  # once, at start
        self._scheduler.start()

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)

    def recover(self) -> int:
        """At start: finish open digests, then run each schedule's latest missed run (idempotent)."""
        done = self.retry_open()
        for sched in self.schedules:
            done += self.run_schedule(sched)
        return done

    # ------------------------------------------------------------------ runs
    def run_schedule(self, sched: Schedule) -> int:
        """One run of a channel's schedule: the latest fire time at or before now is the run's identity."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        run = sched.latest_run(now, timedelta(hours=self.cfg.missed_grace_hours))
        if run is None:
            return 0
        try:
            with self._lock:
                return self._run(sched.key, run)
        except Exception:  # a scheduled job is a boundary
            log.exception("catchup run for %s at %s crashed", sched.key, run)
            return 0

    def _run(self, key: ScopeKey, run: datetime) -> int:
        sid = self.store.scope_id(key)
        if sid is None:
            return 0
        slot, until = run.astimezone(UTC).isoformat(), run.timestamp()
        n = 0
        for person_id, name in subscriptions.subscribers(self.store, sid):
            since = (subscriptions.last_covered(self.store, sid, person_id)
                     or last_message_ts(self.store, self.bot.scope_ids(key), person_id, before=until)
                     or until - self.catchup.config.default_days * 86400)
            row = subscriptions.claim(self.store, sid, person_id, slot, min(since, until), until)
            n += self._process(row, key, name)
        return n

    def retry_open(self) -> int:
        """Every digest not yet sent or skipped: maybe sent before a crash, or failed and due again."""
        with self._lock:
            n = 0
            for row in subscriptions.open_rows(self.store):
                key = next((s.key for s in self.store.scopes() if s.id == row.scope_id), None)
                if key is not None:
                    n += self._process(row, key, "")
            return n

    def _process(self, row: DigestRow, key: ScopeKey, name: str) -> int:
        """Bring one digest row to 'sent', 'skipped', 'failed' or 'gave_up'; 1 when it was sent now."""
        if row.status in subscriptions.DONE or row.status == "gave_up":
            return 0
        deliverer = self.deliverers.get(key.platform)
        if deliverer is None:
            log.error("catchup digest %d for %s in %s: no %s adapter is running to deliver it; kept for later",
                      row.id, row.person_id, key, key.platform)
            subscriptions.mark(self.store, row.id, "failed", error=f"no {key.platform} adapter running")
            return 0
        if row.status == "sending" or (row.status == "failed" and row.attempts > 0):
            # A send may have happened (before a crash, or before an error came back): look before sending again.
            try:
                if deliverer.dm_contains(key.workspace, row.person_id, row.marker, row.created_at - 60):
                    subscriptions.mark(self.store, row.id, "sent")
                    log.info("catchup %s for %s in %s was delivered before a restart; recorded", row.marker,
                             row.person_id, key)
                    return 0
            except Exception as exc:  # cannot tell: do not risk a duplicate now; retry later
                log.warning("catchup %s: could not check whether it was delivered (%s); will retry", row.marker, exc,
                            exc_info=True)
                subscriptions.mark(self.store, row.id, "sending", error=f"delivery check failed: {exc}")
                return 0
        member = self.catchup.member(key, row.person_id, name)
        window = Window(row.since_ts, row.until_ts, "")
        digest = self.catchup.digest(key, member, window)
        if digest.quiet:
            subscriptions.mark(self.store, row.id, "skipped", lines=0)
            log.info("catchup for %s in %s: nothing new, skipped", row.person_id, key)
            return 0
        where = next((f"#{s.name}" for s in self.store.scopes() if s.id == row.scope_id and s.name), "")
        shown = self.catchup.render(key, digest, window, where=where,
                                    footer=f"(Chorus {row.marker} · `/catchup unsubscribe` in the channel to stop)")
        reply = to_reply(shown, digest, self.bot.settings.answer.max_chars)
        subscriptions.mark(self.store, row.id, "sending", lines=len(digest.lines), attempt=True)
        try:
            deliverer.deliver_dm(key.workspace, row.person_id, reply)
        except Exception as exc:  # a delivery failure is retried, never dropped
            attempts = row.attempts + 1
            final = attempts >= self.cfg.max_attempts
            subscriptions.mark(self.store, row.id, "gave_up" if final else "failed", error=str(exc)[:500])
            if final:
                log.error("catchup %s for %s in %s: delivery failed %d times, given up: %s", row.marker,
                          row.person_id, key, attempts, exc, exc_info=True)
            else:
                log.warning("catchup %s for %s in %s: delivery failed (attempt %d of %d), will retry: %s",
                            row.marker, row.person_id, key, attempts, self.cfg.max_attempts, exc, exc_info=True)
            return 0
        subscriptions.mark(self.store, row.id, "sent")
        log.info("catchup %s sent to %s in %s (%d line(s))", row.marker, row.person_id, key, len(digest.lines))
        return 1
