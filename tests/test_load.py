"""The CI version of ``chorus bench load``: 60 s of traffic in 4 channels with questions and writer windows.

The full run (``chorus bench load``: 50 messages/s for 10 minutes) is the same code; here the
rate is lower so it fits a CI box, and the pass condition is the same: every posted message is
stored exactly once, the file is intact, and the report (JSON + PNG) is written.
"""
from __future__ import annotations

import json

from benchmarks.common import save
from benchmarks.load import run_load, write_plot
from bot.config import Settings
from tests._integrity import assert_consistent


def test_sustained_load_loses_nothing(tmp_path, embedder):
    db = tmp_path / "load.db"
    data = run_load(Settings(), rate=20, seconds=60, channels=4, no_model=True, ask_every=5, drain_s=180,
                    store_path=str(db), progress=False, embedder=embedder)
    r = data["result"]
    assert r["lost"] == 0 and r["duplicates"] == 0 and r["refused"] == 0, r
    assert r["integrity"] == "ok" and not r["errors"], r
    assert r["posted"] >= 0.8 * 20 * 60 and r["stored"] == r["posted"]
    assert data["answer_latency"]["n"] >= 2 and data["writer"]["windows"] >= 1
    assert data["ingest_latency"]["n"] >= r["posted"] - data["answer_latency"]["n"] - 5
    assert data["timeline"] and data["memory"]["peak_rss_mib"] > 0
    assert_consistent(db, vectors_complete=True)  # the drain embedded everything; indexes match

    path = save(tmp_path, "load", data)
    png = write_plot(tmp_path / "load.png", data)
    assert json.loads(path.read_text())["result"]["lost"] == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_the_analysis_bench_reads_every_message_of_its_chats(tmp_path, embedder):
    """`chorus bench analysis` times the pass over real-looking chats; every message is analysed, none fails."""
    from benchmarks.analysis import messages, one
    from memory.analysis.shipped import linear_models

    msgs = messages(1)[:120]
    assert len({m.channel for m in msgs}) == 1 and all(m.text for m in msgs)
    row = one("linear", linear_models(), msgs, tmp_path, embedder, batch=64)
    assert row["messages"] == len(msgs) and row["failed"] == 0 and row["messages_per_s"] > 0
    assert row["acts"] == "acts-v2" and row["links"] == "links-v2"
