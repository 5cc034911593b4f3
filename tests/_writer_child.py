"""Child process for the crash test: writes windows and freezes at a chosen point to be killed.

argv: DB_PATH MODE READY_FILE where MODE is 'model' (freeze inside the model call)
or 'commit' (freeze inside the commit transaction after the first record row).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.llm.fake import ScriptedLLM  # noqa: E402
from memory.records import Records  # noqa: E402
from memory.records_sync import attach  # noqa: E402
from memory.store import Store  # noqa: E402
from memory.writer.writer import Writer, WriterConfig  # noqa: E402


def respond(prompt: str) -> str:
    """Propose one grounded record per message of the window (deterministic)."""
    actions = []
    for line in prompt.split("New messages:\n")[-1].splitlines():
        if line.startswith("(") and ": " in line:
            speaker = line.split(") ", 1)[1].split(" @ ", 1)[0]
            text = line.split(": ", 1)[1]
            actions.append({"op": "ADD", "owner": speaker, "source": speaker, "layer": "per_speaker_core",
                            "utype": "fact", "content": text})
    return json.dumps({"actions": actions[:8]})


def main() -> None:
    db, mode, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    store = Store(db)
    records = Records(store)
    attach(store, records)
    calls = {"n": 0}

    def model(prompt: str) -> str:
        calls["n"] += 1
        if mode == "model" and calls["n"] == 2:
            ready.write_text("in model call")
            time.sleep(600)
        return respond(prompt)

    if mode == "commit":
        original = records.insert
        inserted = {"n": 0}

        def slow_insert(conn, rec, **kw):
            rid = original(conn, rec, **kw)
            inserted["n"] += 1
            if inserted["n"] == 10:  # inside the second window's transaction
                ready.write_text("in commit")
                time.sleep(600)
            return rid

        records.insert = slow_insert  # type: ignore[method-assign]
    writer = Writer(store, ScriptedLLM([model] * 100), config=WriterConfig(window_messages=8), records=records,
                    clock=lambda: 2_000_000_000.0)
    writer.run_pending(force=True)
    ready.write_text("finished")


if __name__ == "__main__":
    main()
