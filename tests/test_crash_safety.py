"""kill -9 in the middle of real work, then restart: nothing acknowledged is lost, nothing doubled.

Each case runs ``tests/_crash_child.py`` in a subprocess, SIGKILLs it (at a random moment or at
a frozen point inside a transaction), and then checks the file the way a restarted Chorus finds it:
``PRAGMA integrity_check`` is ok, the FTS5 and vec0 indexes match the live messages and active
records one to one (``tests/_integrity.py``), every acknowledged message is there, and finishing the
interrupted work in a new process stores each message exactly once.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory import privacy
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store
from tests._crash_child import BACKFILL_KEY, EVENTS_N, HISTORY_N, INGEST_N, history_messages, planned_messages
from tests._fakes import HashEmbedder
from tests._integrity import assert_consistent

CHILD = Path(__file__).with_name("_crash_child.py")


@pytest.fixture
def embedder():
    """The children's embedder (the store refuses a different one), without their simulated model time."""
    return HashEmbedder()


def run_and_kill(mode: str, db: Path, tmp: Path, *, delay: float | None = None) -> list[str]:
    """Start the child, wait until it is ready (plus ``delay`` s), SIGKILL it; return the acknowledged ids."""
    ready, acks = tmp / f"{mode}.ready", tmp / f"{mode}.ack"
    for f in (ready, acks):
        f.unlink(missing_ok=True)
    child = subprocess.Popen([sys.executable, str(CHILD), mode, str(db), str(ready), str(acks)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
        assert ready.exists() and ready.read_text() == "ready", f"{mode}: child never reached the kill point"
        if delay:
            time.sleep(delay)
        assert child.poll() is None, f"{mode}: child finished before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return acks.read_text().split() if acks.exists() else []


def stored_ids(db: Path) -> dict[str, int]:
    """platform message id -> how many rows hold it (over every scope)."""
    with Store(db) as store, store.read() as conn:
        rows = conn.execute("SELECT s.workspace || '/' || s.channel || '/' || m.msg_id, count(*) FROM messages m "
                            "JOIN scopes s ON s.id = m.scope_id WHERE m.deleted = 0 GROUP BY 1").fetchall()
    return dict(rows)


def key_of(m) -> str:
    return f"{m.workspace}/{m.channel}/{m.msg_id}"


# ---------------------------------------------------------------------- bulk ingest and the live path
@pytest.mark.parametrize("mode,delay", [("ingest-freeze", None), ("ingest", 0.4), ("ingest", 1.0)])
def test_kill_during_bulk_ingest(tmp_path, embedder, mode, delay):
    db = tmp_path / "chorus.db"
    acked = run_and_kill(mode, db, tmp_path, delay=delay)
    assert acked, "nothing was acknowledged before the kill"
    rep = assert_consistent(db, vectors_complete=True)  # ingest(embed=True): a message never lacks its vector
    planned = planned_messages(INGEST_N)
    by_id = {m.msg_id: m for m in planned}
    have = stored_ids(db)
    assert all(have.get(key_of(by_id[i])) == 1 for i in acked), "an acknowledged message was lost"
    assert all(n == 1 for n in have.values())
    assert rep.messages < len(planned), "the kill came too late to test anything"

    # Restart: the importer runs again over everything; what is stored is skipped, the rest is added.
    with Store(db, embedder=embedder) as store:
        result = store.ingest(planned, embed=True, batch_size=1000)
    assert result.duplicates == rep.messages and result.inserted == len(planned) - rep.messages
    assert assert_consistent(db, vectors_complete=True).messages == len(planned)
    assert set(stored_ids(db)) == {key_of(m) for m in planned}


def test_kill_during_live_events_with_background_embedding(tmp_path, embedder):
    db = tmp_path / "chorus.db"
    acked = run_and_kill("events", db, tmp_path, delay=0.6)
    rep = assert_consistent(db)  # vectors may lag (backlog) but never point at the wrong row
    planned = planned_messages(EVENTS_N)
    by_id = {m.msg_id: m for m in planned}
    have = stored_ids(db)
    assert acked and all(have.get(key_of(by_id[i])) == 1 for i in acked)
    assert rep.messages < len(planned)

    from bot.app import Bot
    from bot.config import Settings

    bot = Bot(Settings(), store=Store(db, embedder=embedder), load_models=False)
    try:
        for m in planned:  # the platform (or a backfill) delivers everything again
            bot.remember([m])
        bot.store.embed_pending()
    finally:
        bot.close()
    assert assert_consistent(db, vectors_complete=True).messages == len(planned)


# ---------------------------------------------------------------------- forget
def prepare_forget(db: Path, embedder) -> None:
    """Messages of u1 and others in T1 channels, a DM and T2, with Track 2 records written from them."""
    from memory.llm.fake import ScriptedLLM
    from memory.writer.writer import Writer, WriterConfig
    from tests._writer_child import respond

    store = Store(db, embedder=embedder)
    records = Records(store)
    attach(store, records)
    store.ingest(planned_messages(240), embed=True)
    Writer(store, ScriptedLLM([respond] * 100), config=WriterConfig(window_messages=8), records=records,
           clock=lambda: 2_000_000_000.0).run_pending(force=True)
    assert records.count() > 100
    store.close()


def u1_traces(db: Path) -> dict[str, int]:
    with Store(db) as store, store.read() as conn:
        sids = privacy.workspace_scope_ids(store, "slack", "T1")
        marks = ",".join("?" * len(sids))
        return {
            "messages": conn.execute(f"SELECT count(*) FROM messages WHERE deleted = 0 AND author_id = 'u1' "
                                     f"AND scope_id IN ({marks})", sids).fetchone()[0],
            "tombstone_authors": conn.execute(f"SELECT count(*) FROM messages WHERE deleted = 1 AND author_id = 'u1' "
                                              f"AND scope_id IN ({marks})", sids).fetchone()[0],
            "roster": conn.execute(f"SELECT count(*) FROM people WHERE person_id = 'u1' AND scope_id IN ({marks})",
                                   sids).fetchone()[0],
            "records": conn.execute(f"SELECT count(*) FROM records WHERE source = 'u1' AND content != '' "
                                    f"AND scope_id IN ({marks})", sids).fetchone()[0],
            "audit": conn.execute(f"SELECT count(*) FROM writer_runs WHERE raw_output LIKE '%Ann says%' "
                                  f"AND scope_id IN ({marks})", sids).fetchone()[0],
            "other_workspace": conn.execute("SELECT count(*) FROM messages m JOIN scopes s ON s.id = m.scope_id "
                                            "WHERE s.workspace = 'T2' AND m.deleted = 0").fetchone()[0],
        }


@pytest.mark.parametrize("phase", ["delete", "person", "scrub"])
def test_kill_during_forget_then_forget_again(tmp_path, embedder, phase):
    db = tmp_path / "chorus.db"
    prepare_forget(db, embedder)
    before = u1_traces(db)
    assert before["messages"] and before["records"] and before["roster"]
    run_and_kill(f"forget-{phase}", db, tmp_path)
    assert_consistent(db)
    after_kill = u1_traces(db)
    if phase == "scrub":  # the one transaction had committed: everything of u1 is gone already
        assert after_kill == {**before, "messages": 0, "tombstone_authors": 0, "roster": 0, "records": 0, "audit": 0}
    else:  # killed inside the transaction: nothing was forgotten half-way
        assert after_kill == before
    assert after_kill["other_workspace"] == before["other_workspace"]

    # The user (or the operator) asks again: now nothing of u1 is left anywhere in T1.
    with Store(db, embedder=embedder) as store:
        records = Records(store)
        attach(store, records)
        privacy.forget_user(store, "slack", "T1", "u1")
    assert_consistent(db)
    final = u1_traces(db)
    assert final == {"messages": 0, "tombstone_authors": 0, "roster": 0, "records": 0, "audit": 0,
                     "other_workspace": before["other_workspace"]}


# ---------------------------------------------------------------------- backfill
@pytest.mark.parametrize("mode,delay", [("backfill-freeze", None), ("backfill-cursor", None),
                                        ("backfill", 0.5)])
def test_kill_during_backfill_then_resume(tmp_path, embedder, mode, delay):
    from bot.backfill import Backfiller, Page
    from bot.door import Door

    db = tmp_path / "chorus.db"
    run_and_kill(mode, db, tmp_path, delay=delay)
    rep = assert_consistent(db, vectors_complete=True)
    items = history_messages(HISTORY_N)
    assert 0 < rep.messages < len(items) or mode == "backfill-freeze"
    if mode == "backfill-freeze":
        assert rep.messages == 100  # pages 1-2 committed, page 3 rolled back whole

    class History:
        key, stream, label, channel_name, is_dm = BACKFILL_KEY, "", "test #history", "history", False

        def __init__(self) -> None:
            self.first_after: list[str | None] = []

        async def fetch_after(self, after, limit):
            self.first_after.append(after)
            rest = [m for m in items if after is None or m.msg_id > after][:limit]
            more = bool(rest) and rest[-1].msg_id != items[-1].msg_id
            return Page(list(reversed(rest)), rest[-1].msg_id if rest else after, more=more, fetched=len(rest))

    with Store(db, embedder=embedder) as store:
        sid = store.scope_id(BACKFILL_KEY)
        cursor = store.backfill_cursor(sid, "")
        history = History()
        result = asyncio.run(Backfiller(Door(store), page_size=50, progress=None).run_stream(history))
        assert history.first_after[0] == cursor.newest_id  # resumed from the cursor, not the beginning
        assert result.imported == len(items) - rep.messages
        if mode == "backfill-cursor":
            assert result.duplicates == 50  # the page stored before the kill is fetched again, stored once
        assert store.backfill_cursor(sid, "").done
    final = assert_consistent(db, vectors_complete=True)
    assert final.messages == len(items)
    have = stored_ids(db)
    assert set(have) == {key_of(m) for m in items} and set(have.values()) == {1}


# ---------------------------------------------------------------------- writer (with vectors)
def test_kill_inside_writer_commit_with_vectors(tmp_path, embedder):
    from memory.llm.fake import ScriptedLLM
    from memory.writer.writer import Writer, WriterConfig
    from tests._writer_child import respond

    db = tmp_path / "chorus.db"
    with Store(db, embedder=embedder) as store:
        store.ingest(planned_messages(48), embed=True)
    run_and_kill("writer", db, tmp_path)
    rep = assert_consistent(db, vectors_complete=True)
    with Store(db) as store, store.read() as conn:
        marks = dict(conn.execute("SELECT scope_id, watermark FROM writer_state").fetchall())
        runs = conn.execute("SELECT count(*) FROM writer_runs").fetchone()[0]
    assert rep.records == 8 and runs == 1 and len(marks) == 1  # one whole window, nothing of the second

    with Store(db, embedder=embedder) as store:
        records = Records(store)
        attach(store, records)
        Writer(store, ScriptedLLM([respond] * 100), config=WriterConfig(window_messages=8), records=records,
               clock=lambda: 2_000_000_000.0).run_pending(force=True)
        with store.read() as conn:
            contents = [r[0] for r in conn.execute("SELECT content FROM records WHERE status = 'active'")]
    assert len(contents) == 48 and len(set(contents)) == 48  # every message once, none twice
    assert_consistent(db, vectors_complete=True)
