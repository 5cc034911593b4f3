"""History backfill: interrupted runs resume from their cursor and import each message exactly once."""
from __future__ import annotations

import asyncio

import pytest

from bot.backfill import Backfiller, Page
from bot.door import Door
from memory import privacy
from memory.models import Message, ScopeKey
from memory.store import Store

KEY = ScopeKey("test", "w", "general")
T0 = 1_717_000_000.0


class Interrupted(Exception):
    pass


class FakeHistory:
    """A platform history of N messages served in pages strictly after an id; can fail on a chosen call."""

    def __init__(self, n: int, *, fail_on_call: int | None = None, stream: str = "", authors: tuple = ("alice", "bob")):
        self.items = [Message("test", "w", "general", f"{i:05d}", authors[i % len(authors)],
                              authors[i % len(authors)].title(), f"message number {i}", T0 + i * 30,
                              thread=stream) for i in range(1, n + 1)]
        self.key, self.stream, self.label = KEY, stream, "test #general"
        self.channel_name, self.is_dm = "general", False
        self.calls: list[str | None] = []
        self.fail_on_call = fail_on_call

    async def fetch_after(self, after: str | None, limit: int) -> Page:
        self.calls.append(after)
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise Interrupted("connection reset")
        rest = [m for m in self.items if after is None or m.msg_id > after][:limit]
        more = bool(rest) and rest[-1].msg_id != self.items[-1].msg_id
        # Platforms hand pages over newest first; the backfiller must still import oldest first.
        return Page(list(reversed(rest)), rest[-1].msg_id if rest else after, more=more, fetched=len(rest))


def stored_ids(store: Store) -> list[str]:
    with store.read() as conn:
        return [r[0] for r in conn.execute("SELECT msg_id FROM messages ORDER BY session, turn")]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "chorus.db"


def run(coro):
    return asyncio.run(coro)


def test_interrupted_backfill_resumes_and_imports_each_message_once(path):
    store = Store(path)
    history = FakeHistory(250, fail_on_call=3)
    progress: list[int] = []
    bf = Backfiller(Door(store), page_size=50, progress=lambda label, r: progress.append(r.imported))
    with pytest.raises(Interrupted):
        run(bf.run_stream(history))
    assert store.count_messages() == 100 and progress == [50, 100]
    sid = store.scope_id(KEY)
    assert store.backfill_cursor(sid, "").newest_id == "00100" and not store.backfill_cursor(sid, "").done
    store.close()

    # A new process: the cursor, not the beginning, is where it goes on.
    store = Store(path)
    history.fail_on_call, history.calls = None, []
    result = run(Backfiller(Door(store), page_size=50).run_stream(history))
    assert history.calls[0] == "00100"
    assert result.imported == 150 and result.duplicates == 0
    ids = stored_ids(store)
    assert ids == [m.msg_id for m in history.items]  # each once, in chat order (sessions/turns oldest first)
    assert store.backfill_cursor(store.scope_id(KEY), "").done
    # Running again (after downtime) only asks for what is newer.
    history.items.append(Message("test", "w", "general", "00251", "carol", "Carol", "late news", T0 + 251 * 30))
    again = run(Backfiller(Door(store), page_size=50).run_stream(history))
    assert again.imported == 1 and store.count_messages() == 251
    store.close()


def test_crash_between_storing_a_page_and_saving_its_cursor(path, monkeypatch):
    store = Store(path)
    history = FakeHistory(120)
    real = Door.save_cursor
    saved = []

    def flaky(door, sid, stream, cursor):
        if len(saved) == 1:
            raise Interrupted("killed after the page was stored")
        saved.append(cursor.newest_id)
        real(door, sid, stream, cursor)
    monkeypatch.setattr(Door, "save_cursor", flaky)
    with pytest.raises(Interrupted):
        run(Backfiller(Door(store), page_size=40).run_stream(history))
    assert store.count_messages() == 80  # the second page is stored, its cursor is not
    monkeypatch.setattr(Door, "save_cursor", real)
    history.calls = []
    result = run(Backfiller(Door(store), page_size=40).run_stream(history))
    assert history.calls[0] == "00040"  # the page is fetched again...
    assert result.duplicates == 40 and result.imported == 40  # ...and not stored twice
    assert stored_ids(store) == [m.msg_id for m in history.items]
    store.close()


def test_cancelled_backfill_resumes_exactly_once(path):
    store = Store(path)
    history = FakeHistory(300)

    async def go() -> None:
        started = asyncio.Event()
        release = asyncio.Event()
        original = history.fetch_after

        async def fetch(after, limit):
            if len(history.calls) == 2:
                started.set()
                await release.wait()  # hangs like a stalled request, until cancelled (SIGTERM)
            return await original(after, limit)
        history.fetch_after = fetch  # type: ignore[method-assign]
        task = asyncio.create_task(Backfiller(Door(store), page_size=100).run_stream(history))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        history.fetch_after = original  # type: ignore[method-assign]
    run(go())
    assert store.count_messages() == 200
    run(Backfiller(Door(store), page_size=100).run_stream(history))
    assert stored_ids(store) == [m.msg_id for m in history.items]
    store.close()


def test_backfill_respects_privacy_and_threads_have_their_own_cursor(path):
    store = Store(path)
    privacy.opt_out_user(store, "test", "w", "bob")
    main, thread = FakeHistory(10), FakeHistory(4, stream="T1")
    for m in thread.items:
        object.__setattr__(m, "msg_id", "t" + m.msg_id)
    result = run(Backfiller(Door(store), page_size=3).run([main, thread]))
    assert result.streams == 2 and result.refused == 7  # bob's five + two in the thread
    sid = store.scope_id(KEY)
    assert store.backfill_cursor(sid, "").done and store.backfill_cursor(sid, "T1").newest_id == "t00004"
    assert all(not m.author_id == "bob" for m in store.recent(sid, 50))
    assert store.count_messages() == 7
    store.close()


def test_one_failing_stream_does_not_stop_the_others(path):
    store = Store(path)
    bad, good = FakeHistory(5, fail_on_call=1), FakeHistory(5, stream="T9")
    result = run(Backfiller(Door(store), page_size=10).run([bad, good]))
    assert result.imported == 5 and len(result.errors) == 1 and "connection reset" in result.errors[0]
    store.close()


def test_pacing_waits_between_pages(path):
    store = Store(path)
    waits: list[float] = []

    async def fake_sleep(s: float) -> None:
        waits.append(s)
    run(Backfiller(Door(store), page_size=2, min_interval_s=5.0, sleep=fake_sleep).run_stream(FakeHistory(6)))
    assert len(waits) == 2 and all(4.0 < w <= 5.0 for w in waits)  # before pages 2 and 3
    store.close()


def test_discord_history_backfill_through_discord_py(tmp_path, monkeypatch):
    """The real discord.py history iterator against the loopback mock API, interrupted and resumed."""
    from tests.test_discord_adapter import GENERAL, GUILD_ID, Harness, message_payload

    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            h.api.history[GENERAL] = [message_payload(2000 + i, f"old line {i}") for i in range(1, 151)]
            streams = [s for s in await h.adapter.history_streams(h.adapter.client.get_guild(int(GUILD_ID)))
                       if s.stream == ""]
            bf = Backfiller(Door(h.store), page_size=100, executor=h.adapter.fast)
            first = await bf.run(streams, max_pages=1)
            assert first.imported == 100
            rest = await bf.run(streams)
            assert rest.imported == 50 and rest.duplicates == 0
            sid = h.store.scope_id(ScopeKey("discord", GUILD_ID, GENERAL))
            assert [m.msg_id for m in h.store.recent(sid, 200)] == [str(2000 + i) for i in range(1, 151)]
            afters = [c[2].get("after") for c in h.api.calls if c[0] == "history"]
            assert afters[0] in (None, "0") and "2100" in afters  # the second run started after the cursor
    asyncio.run(go())


def test_since_limits_how_far_back_an_import_stores(path):
    """`backfill DAYS`: older messages are read past (the cursor still moves) but never stored."""
    store = Store(path)
    history = FakeHistory(40)
    cutoff = T0 + 30 * 30  # messages 30..40 are on or after it
    result = run(Backfiller(Door(store), page_size=15, since=cutoff).run([history]))
    assert result.older == 29 and result.imported == 11
    assert stored_ids(store) == [f"{i:05d}" for i in range(30, 41)]
    assert "29 older than the limit" in result.summary()
    assert store.backfill_cursor(store.scope_id(KEY), "").done
    store.close()
