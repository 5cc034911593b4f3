"""Faults: each gives a clear error naming the cause and the fix, loses no message, and the bot stays up.

- The store locked by another process (a real second process holding the write lock).
- The disk full: a real 1 MiB tmpfs where the sandbox allows mounting one, and everywhere
  ``PRAGMA max_page_count`` (SQLite's own SQLITE_FULL, the same error path).
- The language model file missing, not a GGUF, or truncated; the embedding model missing or
  damaged, or failing at run time.
- Platform API errors and rate limits (the loopback Slack API from the adapter tests), and a
  crash inside the message handler: the adapter logs it and keeps serving.
While the store refuses writes, live messages wait in ``Bot.door.queue`` and are stored, in
order, once it accepts them again.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.actions import Actions
from bot.app import Bot
from bot.config import Settings
from memory.errors import ChorusError, EmbeddingError, ModelError, StoreError
from memory.models import Message, ScopeKey
from memory.search import Searcher
from memory.store import Store
from tests._fakes import HashEmbedder
from tests._integrity import assert_consistent

HOLDER = Path(__file__).with_name("_lock_holder.py")
KEY = ScopeKey("slack", "T1", "C1")
T0 = 1_717_000_000.0


def m(i: int, text: str = "", *, user: str = "u1") -> Message:
    return Message("slack", "T1", "C1", f"m{i:04d}", user, user.title(), text or f"message number {i} about kites",
                   T0 + i)


def stored(store: Store) -> list[str]:
    sid = store.scope_id(KEY)
    with store.read() as conn:
        return [r[0] for r in conn.execute("SELECT msg_id FROM messages WHERE scope_id = ? AND deleted = 0 "
                                           "ORDER BY id", (sid,))]


def hold_lock(db: Path, tmp: Path, seconds: float) -> subprocess.Popen:
    ready = tmp / "locked"
    ready.unlink(missing_ok=True)
    child = subprocess.Popen([sys.executable, str(HOLDER), str(db), str(ready), str(seconds)])
    deadline = time.monotonic() + 60
    while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), "the lock holder never took the lock"
    return child


# ---------------------------------------------------------------------- locked by another process
def test_locked_store_names_cause_and_fix_and_reads_go_on(tmp_path):
    db = tmp_path / "chorus.db"
    store = Store(db, busy_timeout_ms=300)
    store.ingest([m(1)])
    child = hold_lock(db, tmp_path, 60)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as err:
            store.ingest_one(m(2))
        waited = time.monotonic() - started
        text = str(err.value)
        assert "locked by another process" in text and "0.3 s busy timeout" in text and "Stop the other" in text
        assert "nothing from this write was stored" in text and str(db) in text
        assert waited >= 0.25  # the busy timeout was honoured before giving up
        # WAL: reading and searching go on while another process holds the write lock.
        assert [h.message.msg_id for h in Searcher(store).search([store.scope_id(KEY)], "kites", mode="bm25")] == \
            ["m0001"]
    finally:
        child.kill()
        child.wait()
    assert store.ingest_one(m(2)).inserted == 1
    store.close()
    assert_consistent(db)


def test_bot_queues_messages_while_locked_and_stores_them_all_in_order(tmp_path, caplog):
    db = tmp_path / "chorus.db"
    bot = Bot(Settings(), store=Store(db, busy_timeout_ms=200), load_models=False)
    acts = Actions(bot)
    acts.remember(m(0))
    # A backup or a second process holds the lock until it is stopped (not for a fixed time, so a
    # slow, busy machine cannot let it go before the checks below).
    child = hold_lock(db, tmp_path, 120)
    try:
        for i in range(1, 41):
            assert acts.remember(m(i)) is True  # accepted: stored now or queued, never dropped
        assert bot.door.queue.pending > 0
        assert "queued for retry" in caplog.text and "locked by another process" in caplog.text
        assert "Messages remembered: 1" in bot.status(KEY).text  # the bot answers meanwhile
    finally:
        child.terminate()  # the process ends; SQLite releases its lock and drops its open transaction
        child.wait(timeout=30)
    assert bot.door.queue.drain(30)
    assert stored(bot.store) == [f"m{i:04d}" for i in range(41)]  # all of them, in the order they came
    assert bot.door.queue.retried >= 40 and bot.door.queue.dropped == 0
    bot.close()
    assert_consistent(db)


# ---------------------------------------------------------------------- disk full
def test_full_database_is_reported_and_nothing_is_lost(tmp_path, caplog):
    db = tmp_path / "chorus.db"
    bot = Bot(Settings(), store=Store(db), load_models=False)
    store = bot.store
    store.ingest([m(i) for i in range(5)])
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "database or disk is full"
    with pytest.raises(StoreError) as err:
        store.ingest([m(100 + i, "x" * 3000) for i in range(10)])
    text = str(err.value)
    assert "is full" in text and "Free space" in text and "nothing from this write was stored" in text
    assert "cannot rollback" not in text  # SQLite had rolled back already; the real cause is kept
    assert len(stored(store)) == 5
    for i in range(5, 30):
        bot.remember([m(i, "y" * 2000)])
    assert bot.door.queue.pending >= 20 and "is full" in bot.door.queue.last_error
    store.conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    assert bot.door.queue.drain(30)
    assert stored(store) == [f"m{i:04d}" for i in range(30)]
    bot.close()
    assert_consistent(db)


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_real_full_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a small tmpfs here (needs root); the max_page_count test covers the error path")
    try:
        db = disk / "chorus.db"
        filler = disk / "filler"
        filler.write_bytes(b"\0" * 400_000)
        bot = Bot(Settings(), store=Store(db), load_models=False)
        n = 0
        while not bot.door.queue.pending and n < 2000:
            bot.remember([m(n, f"{n} " + "z" * 1500)])
            n += 1
        assert bot.door.queue.pending, "the disk never filled"
        assert "is full" in bot.door.queue.last_error and str(db) in bot.door.queue.last_error
        for i in range(n, n + 20):
            bot.remember([m(i, "more")])
        filler.unlink()  # the operator frees space
        assert bot.door.queue.drain(30)
        assert stored(bot.store) == [f"m{i:04d}" for i in range(n + 20)]
        bot.close()
        assert_consistent(db)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# ---------------------------------------------------------------------- models
@pytest.mark.parametrize("content,expect", [
    (None, "does not exist; set llm.model_path"),
    (b"PK\x03\x04 not a model", "is not a GGUF model file"),
    (b"GGUF\x03\x00\x00\x00" + b"\x00" * 64, "corrupt or truncated"),
])
def test_language_model_missing_or_corrupt(tmp_path, content, expect):
    pytest.importorskip("llama_cpp")
    from memory.llm.factory import load_llm

    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError) as err:
        load_llm("llama", str(path)).load()
    assert expect in str(err.value) and str(path) in str(err.value) and "llm.model_path" in str(err.value)


def test_bot_stays_up_without_its_language_model(tmp_path, caplog):
    settings = Settings.model_validate({"llm": {"model_path": str(tmp_path / "gone.gguf")}})
    bot = Bot(settings, store=Store(tmp_path / "chorus.db", embedder=HashEmbedder()))
    try:
        bot.remember([m(1, "the picnic is on Saturday at the lake")])
        reply = bot.ask(KEY, "when is the picnic?")
        assert "[1]" in reply.text and not reply.data["model_used"]  # evidence instead of a generated answer
        assert any("gone.gguf" in n and "llm.model_path" in n for n in reply.data["notes"])
        assert "gone.gguf does not exist; set llm.model_path" in caplog.text
        writer = bot.writer()
        results = writer.run_pending(force=True)  # retried, then quarantined (retryable later)
        assert all(r.status == "failed" and "llm.model_path" in r.error for r in results) and results[-1].quarantined
        assert "llm.model_path" in writer.quarantined()[0]["last_error"]  # shown by `chorus status`
        assert len(stored(bot.store)) == 1  # the message waits for a working model; nothing is lost
    finally:
        bot.close()


def test_embedding_model_missing_or_damaged(tmp_path):
    from memory.embeddings.factory import load_embedder

    with pytest.raises(EmbeddingError) as err:
        load_embedder("minilm", str(tmp_path / "nowhere"))
    assert "nowhere" in str(err.value) and "embeddings.model_path" in str(err.value) and "pip install" in str(err.value)
    with pytest.raises(EmbeddingError, match=r"embeddings.model_path"):
        load_embedder("gguf", None)
    with pytest.raises(EmbeddingError) as err:
        load_embedder("gguf", str(tmp_path / "e.gguf"))
    assert "e.gguf" in str(err.value) and "embeddings.model_path" in str(err.value)

    from memory.embeddings.minilm import default_model_dir

    damaged = tmp_path / "damaged"
    shutil.copytree(default_model_dir(), damaged)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(EmbeddingError) as err:
        load_embedder("minilm", str(damaged))
    assert str(damaged) in str(err.value) and "embeddings.model_path" in str(err.value) and "damaged" in str(err.value)


def test_cli_startup_with_a_broken_embedder_config_is_one_clear_line(tmp_path, capsys):
    from bot.cli import main

    cfg = tmp_path / "chorus.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "c.db"}"\n[embeddings]\nbackend = "gguf"\n'
                   f'model_path = "{tmp_path / "missing.gguf"}"\n')
    assert main(["--config", str(cfg), "ask", "--scope", "slack:T1:C1", "hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("chorus: GGUF embedding model not found") and "embeddings.model_path" in err[-1]
    assert "Traceback" not in "\n".join(err)


class FlakyEmbedder(HashEmbedder):
    broken = False

    def embed(self, texts):
        if self.broken:
            raise RuntimeError("out of memory in the embedding backend")
        return super().embed(texts)


def test_embedder_failing_at_run_time_keeps_messages_and_recovers(tmp_path, caplog):
    emb = FlakyEmbedder()
    bot = Bot(Settings(), store=Store(tmp_path / "chorus.db", embedder=emb), load_models=False)
    acts = Actions(bot)
    try:
        emb.broken = True
        for i in range(10):
            acts.remember(m(i, f"kites and lakes {i}"))
        assert len(stored(bot.store)) == 10  # ingest never waits for (or fails on) the embedder
        from bot.actions import Invoker, guarded
        from bot.command_table import run_text

        # The question is still answered, by words alone; the operator's log says why.
        reply = guarded("ask", lambda: run_text(acts, Invoker(KEY, "u1"), "ask kites?"))
        assert "[1]" in reply.text and "kites and lakes" in reply.text
        assert any("searched by words only" in n and "out of memory" in n for n in reply.data["notes"])
        assert "meaning search unavailable" in caplog.text or "could not embed new messages" in caplog.text
        deadline = time.monotonic() + 10
        while "embedding backlog failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "embedding backlog failed" in caplog.text
        emb.broken = False
        bot.flush_embeddings()
        bot.store.embed_pending()  # the background thread may have done some already
        assert bot.store.pending_embeddings() == 0
        assert "[1]" in run_text(acts, Invoker(KEY, "u1"), "ask kites?").text
    finally:
        bot.close()
    assert_consistent(tmp_path / "chorus.db", vectors_complete=True)


# ---------------------------------------------------------------------- platform API errors, crashing handlers
@pytest.fixture
def slack(tmp_path):
    from tests.test_slack_adapter import Harness

    h = Harness(tmp_path)
    yield h
    h.close()


def test_slack_api_errors_do_not_lose_messages_or_stop_the_bot(slack, caplog):
    from tests.test_slack_adapter import GENERAL, TEAM, until

    h = slack
    original = h.api.answer
    h.api.answer = lambda method, args: ({"ok": False, "error": "internal_error"} if method == "chat.postMessage"
                                         else {"ok": False, "error": "ratelimited"} if method == "users.info"
                                         else original(method, args))
    h.message("1717000001.000100", "the gig is at nine")
    h.event({"type": "app_mention", "channel": GENERAL, "user": "U0ALICE", "text": "<@U0BOT> when is the gig?",
             "ts": "1717000002.000100", "team": TEAM})
    until(lambda: "mention failed" in caplog.text)
    assert "internal_error" in caplog.text  # the platform's own reason is in the log
    h.api.answer = original
    h.message("1717000003.000100", "after the outage")
    assert until(lambda: h.count() == 3)  # the mention and both messages are remembered


def test_slack_backfill_survives_server_errors_and_rate_limits(slack):
    from slack_sdk.errors import SlackApiError

    from tests.test_slack_adapter import GENERAL

    h = slack
    h.api.history[GENERAL] = [{"type": "message", "user": "U0ALICE", "text": f"old {i}",
                               "ts": f"17000000{i:02d}.000100"} for i in range(1, 31)]
    original = h.api.route
    failures = {"n": 0}

    def flaky(path, ctype, raw):
        if path.endswith("conversations.history") and failures["n"] < 3:  # outlasts the client's 2 retries
            failures["n"] += 1
            return 500, {"Content-Type": "application/json"}, b'{"ok": false, "error": "internal_error"}'
        return original(path, ctype, raw)

    h.api.route = flaky
    first = h.adapter.backfill("T0TEST", [(GENERAL, "general", False)])
    assert first.errors and "internal_error" in first.errors[0] and "#general" in first.errors[0]
    assert failures["n"] == 3 and len(h.sleeps) == 2  # slack_sdk retried the 500 twice, backing off, then gave up
    h.api.rate_limit_once.add("conversations.history")
    second = h.adapter.backfill("T0TEST", [(GENERAL, "general", False)])
    assert not second.errors and 7.0 in h.sleeps  # waited as long as Retry-After asked
    assert h.count() == 30
    third = h.adapter.backfill("T0TEST", [(GENERAL, "general", False)])
    assert third.imported == 0 and h.count() == 30  # nothing twice
    assert SlackApiError  # the error type adapters surface


def test_a_crashing_handler_is_logged_and_the_adapter_keeps_serving(slack, caplog, monkeypatch):
    from tests.test_slack_adapter import until

    h = slack
    real = h.bot.remember
    calls = {"n": 0}

    def explode(msgs, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated bug in the message handler")
        return real(msgs, **kw)

    monkeypatch.setattr(h.bot, "remember", explode)
    resp = h.message("1717000001.000100", "first")
    assert resp.status == 200  # acknowledged: the platform does not retry into the same bug forever
    until(lambda: "message event failed" in caplog.text)
    assert "simulated bug" in caplog.text
    h.message("1717000002.000100", "second")
    assert until(lambda: h.count() == 1)


def test_console_keeps_running_after_an_error(tmp_path, monkeypatch):
    import io

    from adapters.console import ConsoleChat

    bot = Bot(Settings(), store=Store(tmp_path / "c.db"), load_models=False)
    try:
        out = io.StringIO()
        chat = ConsoleChat(bot, io.StringIO("alice: one\nalice: two\n/status\n"), out)
        real, calls = bot.remember, {"n": 0}

        def explode(msgs, **kw):
            calls["n"] += 1
            if calls["n"] == 1:
                raise StoreError("the store is locked (test)")
            return real(msgs, **kw)

        monkeypatch.setattr(bot, "remember", explode)
        assert chat.run() == 0
        assert "error: the store is locked (test)" in out.getvalue() and "Messages remembered: 1" in out.getvalue()
    finally:
        bot.close()


def test_every_fault_error_is_a_chorus_error():
    """Boundaries (CLI, adapters, scheduler) show ChorusError messages to people; these faults are all of them."""
    assert all(issubclass(e, ChorusError) for e in (StoreError, ModelError, EmbeddingError))
