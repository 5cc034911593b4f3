"""The background writer job: runs pending windows, survives failures, stops cleanly."""
from __future__ import annotations

import json
import time

from bot.scheduler import WriterScheduler
from memory.llm.fake import ScriptedLLM
from memory.records import Records
from memory.records_sync import attach
from memory.writer.writer import Writer
from tests.conftest import msg


def test_scheduler_runs_windows_in_background_and_survives_errors(store):
    store.ingest([msg(1, "I adopted a beagle named Rocket", author="Ann")])
    records = Records(store)
    attach(store, records)
    ok = json.dumps({"actions": [{"op": "ADD", "owner": "Ann", "source": "Ann", "layer": "per_speaker_core",
                                  "utype": "fact", "content": "Ann adopted a beagle named Rocket"}]})
    writer = Writer(store, ScriptedLLM([ok]), records=records, clock=lambda: 2_000_000_000.0)
    calls = {"n": 0}

    def factory():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("model crashed")
        return writer

    sched = WriterScheduler(factory, interval_s=1)
    assert sched.run_once() == 0 and "model crashed" in sched.last_error  # a boundary: logged, not raised
    sched.start()  # catch-up run at start, then every second
    deadline = time.time() + 20
    while records.count() == 0 and time.time() < deadline:
        time.sleep(0.1)
    sched.stop()
    assert records.count() == 1 and sched.last_error is None
