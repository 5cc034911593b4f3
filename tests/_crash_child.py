"""Child process for tests/test_crash_safety.py: does real work on a store and gets SIGKILLed.

argv: MODE DB READY_FILE [ACK_FILE]

Modes
- ``ingest``: bulk ``Store.ingest`` with embeddings, batch after batch; after each batch returns its
  message ids are appended (flushed, fsynced) to ACK_FILE: those are acknowledged and must survive.
- ``ingest-freeze``: the same, but freezes inside the write transaction of the 4th batch (in the
  embedding call, which runs inside the transaction) so the kill lands mid-transaction.
- ``events``: the live path, ``Bot.remember`` one message at a time from two threads, with the
  background embedding thread writing vectors meanwhile; acknowledged as each call returns.
- ``forget-delete`` / ``forget-person`` / ``forget-scrub``: ``privacy.forget_user`` frozen inside its one
  transaction (in the message deletion, or in the Track 2 / roster part) or after it commits, while the
  file is being scrubbed.
- ``backfill`` / ``backfill-freeze`` / ``backfill-cursor``: ``Backfiller`` over a fake history; killed at
  a random time, inside the 3rd page's write transaction, or after the 3rd page is stored but before
  its cursor is saved.
- ``writer``: a writer window with embeddings, frozen inside the commit transaction.

READY_FILE gets "ready" once the interesting part runs (or the freeze point is reached) and
"finished" if the child gets to the end without being killed.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.models import Message, ScopeKey  # noqa: E402

T0 = 1_717_000_000.0
WORDS = ("harbor lantern violin orchard quilt compass hammock teapot glacier saddle meadow pottery falcon ladder "
         "anchor crayon walnut zeppelin kite piano garden bicycle canoe telescope").split()
BACKFILL_KEY = ScopeKey("test", "w", "history")
PEOPLE = [("u1", "Ann"), ("u2", "Ben"), ("u3", "Cat"), ("u4", "Dan")]


def planned_messages(n: int) -> list[Message]:
    """Deterministic chat across three scopes of two workspaces (and a DM), same authors everywhere."""
    scopes = [("slack", "T1", "C1", False), ("slack", "T2", "C1", False), ("slack", "T1", "D1", True)]
    out = []
    for i in range(n):
        platform, ws, ch, dm = scopes[i % 3]
        pid, name = PEOPLE[i % 4]
        w1, w2 = WORDS[i % len(WORDS)], WORDS[(i // len(WORDS) + i * 7) % len(WORDS)]
        text = f"{name} says the {w1} costs {i} coins near the {w2} on day {i * 3 + 1}"
        out.append(Message(platform, ws, ch, f"m{i:06d}", pid, name, text, T0 + i * 5.0, is_dm=dm))
    return out


def history_messages(n: int) -> list[Message]:
    return [Message("test", "w", "history", f"{i:06d}", PEOPLE[i % 4][0], PEOPLE[i % 4][1],
                    f"old message {i} about the {WORDS[i % len(WORDS)]}", T0 + i * 30.0) for i in range(1, n + 1)]


def mark(ready: Path, text: str = "ready") -> None:
    """Write the marker atomically: the parent must never read a half-written file."""
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, ready)


def freeze(ready: Path) -> None:
    mark(ready)
    time.sleep(600)


def ack(handle, ids: list[str]) -> None:
    handle.write("".join(i + "\n" for i in ids))
    handle.flush()
    os.fsync(handle.fileno())


INGEST_N, EVENTS_N, HISTORY_N = 900, 800, 600


def embedder(delay_s: float = 0.002):
    """A fast embedder that takes about as long per text as a small real model spends in the transaction."""
    from tests._fakes import HashEmbedder

    return HashEmbedder(delay_s=delay_s)


def freeze_on_call(obj, name: str, n: int, ready: Path, *, before: bool = False) -> None:
    """Make the n-th call of obj.name freeze (after doing its work, or ``before``) so the parent kills us there."""
    original = getattr(obj, name)
    calls = {"n": 0}

    def wrapper(*a, **kw):
        calls["n"] += 1
        if before and calls["n"] == n:
            freeze(ready)
        out = original(*a, **kw)
        if not before and calls["n"] == n:
            freeze(ready)
        return out

    setattr(obj, name, wrapper)


def run_ingest(db: str, ready: Path, ack_path: Path, frozen: bool) -> None:
    from memory.store import Store

    emb = embedder()
    if frozen:
        freeze_on_call(emb, "embed", 4, ready)
    store = Store(db, embedder=emb)
    msgs = planned_messages(INGEST_N)
    with ack_path.open("a") as handle:
        for start in range(0, len(msgs), 60):
            batch = msgs[start:start + 60]
            store.ingest(batch, embed=True)
            ack(handle, [m.msg_id for m in batch])
            if start == 0 and not frozen:
                mark(ready)
    mark(ready, "finished")


def run_events(db: str, ready: Path, ack_path: Path) -> None:
    from bot.app import Bot
    from bot.config import Settings
    from memory.store import Store

    bot = Bot(Settings(), store=Store(db, embedder=embedder()), load_models=False)
    msgs = planned_messages(EVENTS_N)
    lock = threading.Lock()
    handle = ack_path.open("a")

    def post(part: list[Message]) -> None:
        for m in part:
            bot.remember([m])
            with lock:
                ack(handle, [m.msg_id])
            time.sleep(0.003)  # a busy chat, not a bulk import

    threads = [threading.Thread(target=post, args=(msgs[k::2],)) for k in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    mark(ready)
    for t in threads:
        t.join()
    mark(ready, "finished")


def run_forget(db: str, ready: Path, phase: str) -> None:
    from memory import privacy
    from memory.records import Records
    from memory.records_sync import attach
    from memory.store import Store

    store = Store(db, embedder=embedder())
    records = Records(store)
    attach(store, records)
    if phase == "delete":
        store.change_hooks.append(lambda conn, ids, reason: freeze(ready))
    elif phase == "scrub":  # after the commit, while FTS segments are rewritten and the WAL emptied
        freeze_on_call(privacy._Scrubbing, "__exit__", 1, ready, before=True)
    elif phase == "person":
        store.forget_person_hooks.append(lambda conn, sid, pid: freeze(ready))
    privacy.forget_user(store, "slack", "T1", "u1")
    mark(ready, "finished")


def run_backfill(db: str, ready: Path, phase: str) -> None:
    from bot.backfill import Backfiller, Page
    from bot.door import Door
    from memory.store import Store

    class History:
        key, stream, label, channel_name, is_dm = BACKFILL_KEY, "", "test #history", "history", False

        def __init__(self) -> None:
            self.items = history_messages(HISTORY_N)

        async def fetch_after(self, after: str | None, limit: int) -> Page:
            rest = [m for m in self.items if after is None or m.msg_id > after][:limit]
            more = bool(rest) and rest[-1].msg_id != self.items[-1].msg_id
            return Page(list(reversed(rest)), rest[-1].msg_id if rest else after, more=more, fetched=len(rest))

    emb = embedder()
    if phase == "freeze":
        freeze_on_call(emb, "embed", 3, ready)
    elif phase == "cursor":
        freeze_on_call(Door, "save_cursor", 3, ready, before=True)
    store = Store(db, embedder=emb)
    if phase == "random":
        mark(ready)
    asyncio.run(Backfiller(Door(store), page_size=50, progress=None).run_stream(History()))
    mark(ready, "finished")


def run_writer(db: str, ready: Path) -> None:
    from memory.llm.fake import ScriptedLLM
    from memory.records import Records
    from memory.records_sync import attach
    from memory.store import Store
    from memory.writer.writer import Writer, WriterConfig
    from tests._writer_child import respond

    store = Store(db, embedder=embedder())
    records = Records(store)
    attach(store, records)
    freeze_on_call(records, "insert", 10, ready)  # inside the second window's commit transaction
    Writer(store, ScriptedLLM([respond] * 100), config=WriterConfig(window_messages=8), records=records,
           clock=lambda: 2_000_000_000.0).run_pending(force=True)
    mark(ready, "finished")


def main() -> None:
    mode, db, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    ack_path = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    if mode in ("ingest", "ingest-freeze"):
        run_ingest(db, ready, ack_path, frozen=mode == "ingest-freeze")
    elif mode == "events":
        run_events(db, ready, ack_path)
    elif mode.startswith("forget-"):
        run_forget(db, ready, mode.split("-", 1)[1])
    elif mode.startswith("backfill"):
        run_backfill(db, ready, mode.split("-", 1)[1] if "-" in mode else "random")
    elif mode == "writer":
        run_writer(db, ready)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
