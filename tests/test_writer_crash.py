"""Kill -9 in the middle of a writer window, restart: no window lost, no record duplicated."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory.llm.fake import ScriptedLLM
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store, scopeindex
from memory.writer.writer import Writer, WriterConfig
from tests._writer_child import respond
from tests.conftest import msg

CHILD = Path(__file__).with_name("_writer_child.py")
N = 24


def prepare(path: Path) -> None:
    store = Store(path)
    people = ["Ann", "Ben", "Cat"]
    things = ["kite", "piano", "garden", "bicycle", "lantern", "violin", "canoe", "telescope", "orchard", "quilt",
              "compass", "hammock", "teapot", "glacier", "saddle", "harbor", "meadow", "pottery", "falcon", "ladder",
              "anchor", "crayon", "walnut", "zeppelin"]
    places = ["Oslo", "Lima", "Perth", "Kyoto", "Quito", "Tunis", "Riga", "Hanoi", "Cusco", "Dakar", "Bern", "Suva"]
    store.ingest([msg(i, f"I bought a {things[i]} in {places[i % 12]} for {i + 3} dollars", author=people[i % 3])
                  for i in range(N)])
    store.close()


def state(path: Path) -> tuple[int, list[str], str]:
    store = Store(path)
    try:
        with store.read() as conn:
            wm = conn.execute("SELECT coalesce(max(watermark), 0) FROM writer_state").fetchone()[0]
            contents = [r[0] for r in conn.execute("SELECT content FROM records ORDER BY id")]
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
            fts = sum(len(scopeindex.rowids(conn, scopeindex.RECORDS, s.id)) for s in store.scopes())
            assert fts == len(contents)
    finally:
        store.close()
    return wm, contents, check


@pytest.mark.parametrize("mode", ["model", "commit"])
def test_sigkill_mid_window_then_restart(tmp_path, mode):
    db = tmp_path / "crash.db"
    prepare(db)
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, str(CHILD), str(db), mode, str(ready)])
    try:
        deadline = time.time() + 120
        while not ready.exists() and time.time() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert ready.exists() and ready.read_text() != "finished", "child never reached the kill point"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    wm, contents, check = state(db)
    assert check == "ok"
    assert wm == 8  # the first window committed; the interrupted one left nothing behind
    assert len(contents) == 8 and len(set(contents)) == 8

    # Restart in this process: the interrupted window is retried, nothing is duplicated.
    store = Store(db)
    records = Records(store)
    attach(store, records)
    Writer(store, ScriptedLLM([respond] * 10), config=WriterConfig(window_messages=8), records=records,
           clock=lambda: 2_000_000_000.0).run_pending(force=True)
    store.close()
    wm, contents, check = state(db)
    assert check == "ok" and wm == N
    assert len(contents) == N and len(set(contents)) == N
