"""Scheduled digests: sent once per run, skipped when quiet, retried when delivery fails, and safe across
restarts, including a crash between the platform call and the record of it."""
from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from bot.app import Bot
from bot.catchup_scheduler import DigestScheduler
from bot.config import Settings
from bot.replies import Reply
from memory.catchup import subscriptions
from memory.models import Message, ScopeKey
from tests._fakes import KeywordActs

KEY = ScopeKey("slack", "T1", "C1")
RUN = datetime(2026, 1, 7, 9, 0, tzinfo=UTC).timestamp()  # a Wednesday, 09:00 UTC


class Crash(BaseException):
    """The process dying mid-call: nothing after it runs (not an Exception, so no handler catches it)."""


class Platform:
    """The platform's DMs, which outlive the bot process; ``Deliverer`` is one process's view of them."""

    def __init__(self) -> None:
        self.dms: list[tuple[str, str]] = []  # (user, text)


class FakeDeliverer:
    def __init__(self, platform: Platform, *, fail: int = 0, crash_after_send: bool = False,
                 crash_before_send: bool = False) -> None:
        self.platform, self.fail = platform, fail
        self.crash_after_send, self.crash_before_send = crash_after_send, crash_before_send
        self.attempts = 0

    def deliver_dm(self, workspace: str, user_id: str, reply: Reply) -> None:
        self.attempts += 1
        if self.crash_before_send:
            raise Crash()
        if self.fail:
            self.fail -= 1
            raise ConnectionError("slack is down (503)")
        self.platform.dms.append((user_id, reply.text))
        if self.crash_after_send:
            raise Crash()

    def dm_contains(self, workspace: str, user_id: str, marker: str, after_ts: float) -> bool:
        return any(u == user_id and marker in text for u, text in self.platform.dms)


def settings(tmp_path, **catchup) -> Settings:
    return Settings.model_validate({"store": {"path": str(tmp_path / "c.db")},
                                    "catchup": {"schedules": [["slack:T1:C1", "0 9 * * mon-fri"]], **catchup}})


def seed(bot: Bot) -> int:
    msgs = [Message("slack", "T1", "C1", f"{i}", a, a.capitalize(), t, RUN - 7200 + i * 60)
            for i, (a, t) in enumerate([("ann", "see you all next week"), ("ben", "back tomorrow"),
                                        ("cy", "We decided the offsite is in Porto"),
                                        ("cy", "Ann, can you book the train?")])]
    bot.store.ingest(msgs, embed=False)
    bot.analyse_pending(limit=None)
    sid = bot.store.scope_id(KEY)
    subscriptions.subscribe(bot.store, sid, "ann", "Ann")
    subscriptions.subscribe(bot.store, sid, "ben", "Ben")
    return sid


def make_bot(cfg: Settings) -> Bot:
    """A bot whose analysis labels acts by first words (tests/_fakes.py): these tests are about scheduling."""
    labels = KeywordActs()
    return Bot(cfg, load_models=False, analysis_models=(labels, labels))


def scheduler(bot: Bot, deliverer: FakeDeliverer, at: float) -> DigestScheduler:
    return DigestScheduler(bot, {"slack": deliverer}, clock=lambda: at)


@pytest.fixture
def bot(tmp_path):
    b = make_bot(settings(tmp_path))
    yield b
    b.close()


def rows(bot: Bot) -> list[tuple[str, str]]:
    with bot.store.read() as conn:
        return conn.execute("SELECT person_id, status FROM catchup_digests ORDER BY person_id").fetchall()


def test_a_run_sends_each_subscriber_one_digest_and_a_second_pass_sends_nothing(bot):
    seed(bot)
    platform = Platform()
    sched = scheduler(bot, FakeDeliverer(platform), RUN + 600)
    assert sched.run_schedule(sched.schedules[0]) == 2
    assert sched.run_schedule(sched.schedules[0]) == 0 and sched.recover() == 0
    assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]
    ann = next(t for u, t in platform.dms if u == "ann")
    assert "Porto" in ann and "book the train" in ann and "digest #" in ann and "/catchup unsubscribe" in ann
    assert rows(bot) == [("ann", "sent"), ("ben", "sent")]


def test_members_with_nothing_new_are_skipped(bot):
    seed(bot)
    platform = Platform()
    sched = scheduler(bot, FakeDeliverer(platform), RUN + 600)
    sched.run_schedule(sched.schedules[0])
    tomorrow = scheduler(bot, FakeDeliverer(platform), RUN + 86400 + 600)  # nobody said anything since
    assert tomorrow.run_schedule(tomorrow.schedules[0]) == 0
    assert len(platform.dms) == 2
    with bot.store.read() as conn:
        assert conn.execute("SELECT count(*) FROM catchup_digests WHERE status = 'skipped'").fetchone()[0] == 2


def test_restart_runs_the_missed_run_once(tmp_path):
    platform = Platform()
    first = make_bot(settings(tmp_path))
    seed(first)
    first.close()  # down over 09:00
    for _ in range(2):  # two restarts after the run was due: one digest each, not two
        b = make_bot(settings(tmp_path))
        try:
            scheduler(b, FakeDeliverer(platform), RUN + 3 * 3600).recover()
        finally:
            b.close()
    assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]
    late = make_bot(settings(tmp_path, missed_grace_hours=1.0))
    try:  # beyond the grace period a missed run is not sent late; the next run covers it
        assert scheduler(late, FakeDeliverer(Platform()), RUN + 86400 + 5 * 3600).recover() == 0
    finally:
        late.close()


def test_no_duplicate_after_a_crash_between_send_and_record(tmp_path):
    platform = Platform()
    b = make_bot(settings(tmp_path))
    seed(b)
    with pytest.raises(Crash):
        scheduler(b, FakeDeliverer(platform, crash_after_send=True), RUN + 600).recover()
    b.close()
    assert len(platform.dms) == 1  # ann's went out; the process died before recording it
    b = make_bot(settings(tmp_path))
    try:
        again = FakeDeliverer(platform)
        scheduler(b, again, RUN + 700).recover()
        assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]  # ann not twice, ben once
        assert again.attempts == 1 and rows(b) == [("ann", "sent"), ("ben", "sent")]
    finally:
        b.close()


def test_a_crash_before_the_send_loses_nothing(tmp_path):
    platform = Platform()
    b = make_bot(settings(tmp_path))
    seed(b)
    with pytest.raises(Crash):
        scheduler(b, FakeDeliverer(platform, crash_before_send=True), RUN + 600).recover()
    b.close()
    b = make_bot(settings(tmp_path))
    try:
        scheduler(b, FakeDeliverer(platform), RUN + 700).recover()
        assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]
    finally:
        b.close()


def test_failed_deliveries_are_retried_logged_and_finally_given_up(bot, caplog):
    seed(bot)
    platform = Platform()
    flaky = FakeDeliverer(platform, fail=3)  # the first three calls fail: ann's twice, ben's once
    sched = scheduler(bot, flaky, RUN + 600)
    with caplog.at_level(logging.WARNING, logger="bot.catchup_scheduler"):
        sched.run_schedule(sched.schedules[0])
        assert platform.dms == [] and rows(bot) == [("ann", "failed"), ("ben", "failed")]
        sched.retry_open()
        sched.retry_open()
    assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]  # each exactly once
    assert sum("delivery failed" in r.getMessage() for r in caplog.records) == 3
    dead = make_bot(settings(_sub(bot), max_attempts=2))
    try:
        seed(dead)
        down = FakeDeliverer(Platform(), fail=100)
        s2 = scheduler(dead, down, RUN + 600)
        with caplog.at_level(logging.ERROR, logger="bot.catchup_scheduler"):
            s2.run_schedule(s2.schedules[0])
            s2.retry_open()
            s2.retry_open()
        assert rows(dead) == [("ann", "gave_up"), ("ben", "gave_up")] and down.attempts == 4
        assert any(r.levelno == logging.ERROR and "given up" in r.getMessage() for r in caplog.records)
    finally:
        dead.close()


def _sub(bot: Bot):
    from pathlib import Path

    folder = Path(bot.store.path).parent / "second"
    folder.mkdir(exist_ok=True)
    return folder


def test_schedule_settings_are_checked():
    with pytest.raises(ValueError, match="crontab"):
        Settings.model_validate({"catchup": {"schedules": [["slack:T1:C1", "every morning"]]}})
    with pytest.raises(ValueError, match="platform:workspace:channel"):
        Settings.model_validate({"catchup": {"schedules": [["C1", "0 9 * * *"]]}})


def test_the_apscheduler_jobs_recover_at_start_and_stop_cleanly(bot):
    import time

    seed(bot)
    platform = Platform()
    sched = scheduler(bot, FakeDeliverer(platform), RUN + 600)
    sched.start()
    try:
        deadline = time.time() + 20
        while len(platform.dms) < 2 and time.time() < deadline:
            time.sleep(0.05)
        jobs = {j.id for j in sched._scheduler.get_jobs()}
    finally:
        sched.stop()
    assert sorted(u for u, _ in platform.dms) == ["ann", "ben"]
    assert {"catchup-0", "catchup-retry"} <= jobs
