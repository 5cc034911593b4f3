"""``chorus bench load``: sustained chat traffic with questions and writer windows at the same time.

Several channels post at a configured total rate (default 50 messages/s for 10 minutes),
each from its own thread, through the same entry point the chat adapters use
(``Actions.remember`` -> ``Bot.remember``), while a mention is answered every few
seconds (``Bot.ask`` through ``Actions.ask``) and the memory writer runs windows in the
background, and the bot's backlog thread embeds and analyses what arrives (entities, acts, links and the
group state). Every second a sampler records resident memory, stored messages, the embedding and analysis
backlogs and the writer's lag.

With ``--no-model`` answers use no language model (evidence only) and the writer runs the
real ``Writer`` (propose -> verify -> commit) with a ``ScriptedLLM`` proposing one record
per message; otherwise the configured model answers and writes.

At the end the stored messages are compared with what was posted, channel by channel, id
by id: zero lost, zero duplicated is the pass condition. JSON goes to ``OUT/load.json`` and
a plot to ``OUT/load.png``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from evaluation.plots import PlotUnavailable

from . import synthetic
from .common import save

log = logging.getLogger(__name__)
PLATFORM, WORKSPACE = "load", "w1"


def scripted_writer(model_seconds: float = 0.0):
    """The scripted writer model, taking ``model_seconds`` per window as a fast real model would.

    The wait releases the GIL like a llama.cpp call, so the figures show the writer's own work
    beside a model of known speed: with 0 s, a window's time is all the writer's.
    """
    def respond(prompt: str) -> str:
        if model_seconds > 0:
            time.sleep(model_seconds)
        return propose_all(prompt)
    return respond


def propose_all(prompt: str) -> str:
    """The scripted writer model: one grounded ADD per message of the window (at most 8)."""
    actions = []
    for line in prompt.split("New messages:\n")[-1].splitlines():
        if line.startswith("(") and ") " in line and ": " in line:
            speaker = line.split(") ", 1)[1].split(" @ ", 1)[0]
            text = line.split(": ", 1)[1][:200]
            actions.append({"op": "ADD", "owner": speaker, "source": speaker, "layer": "per_speaker_core",
                            "utype": "fact", "content": text})
    return json.dumps({"actions": actions[:8]})


def _pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    arr = np.asarray(values, dtype=np.float64) * 1000.0
    return {"n": int(arr.size), "p50_ms": round(float(np.percentile(arr, 50)), 2),
            "p95_ms": round(float(np.percentile(arr, 95)), 2), "p99_ms": round(float(np.percentile(arr, 99)), 2),
            "max_ms": round(float(arr.max()), 2), "mean_ms": round(float(arr.mean()), 2)}


@dataclass
class Run:
    """Everything measured during one load run (appended to from several threads)."""

    t0: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    posted: dict[str, list[str]] = field(default_factory=dict)  # channel -> msg ids posted
    ingest: list[tuple[float, float]] = field(default_factory=list)  # (t, seconds)
    answers: list[tuple[float, float]] = field(default_factory=list)
    windows: list[tuple[float, float, int, int]] = field(default_factory=list)  # (t, seconds, messages, records)
    samples: list[dict[str, float]] = field(default_factory=list)
    refused: int = 0
    late: int = 0
    errors: list[str] = field(default_factory=list)

    def now(self) -> float:
        return time.perf_counter() - self.t0


def _poster(run: Run, actions: Any, channel: int, rate: float, until: float, stop: threading.Event,
            seed: int) -> None:
    from memory.models import Message

    rng = random.Random(seed)
    topics = synthetic.topic_words(400, random.Random(1000 + channel))
    zipf = synthetic.Zipf(len(topics), 1.07, rng)
    roster = [(f"u{channel}_{i}", f"Person {channel}-{i}") for i in range(rng.randint(5, 30))]
    speakers = synthetic.Zipf(len(roster), 1.2, rng)
    interval = 1.0 / rate
    due = run.now() + rng.random() * interval
    ids: list[str] = []
    with run.lock:
        run.posted[f"c{channel}"] = ids
    k = 0
    while not stop.is_set() and due < until:
        wait = due - run.now()
        if wait > 0:
            time.sleep(wait)
        elif wait < -1.0:
            with run.lock:
                run.late += 1
        author_id, author_name = roster[speakers.sample()]
        n_words = max(1, min(120, int(np.exp(rng.gauss(2.3, 0.8)))))
        msg = Message(PLATFORM, WORKSPACE, f"c{channel}", f"c{channel}-{k}", author_id, author_name,
                      synthetic.sentence(rng, topics, zipf, n_words), time.time(), channel_name=f"c{channel}")
        started = time.perf_counter()
        try:
            stored = actions.remember(msg)
        except Exception as exc:  # counted and reported: a lost message must show up in the figures
            stored = False
            with run.lock:
                run.errors.append(f"{type(exc).__name__}: {exc}")
        took = time.perf_counter() - started
        with run.lock:
            ids.append(msg.msg_id)
            run.ingest.append((started - run.t0, took))
            if not stored:
                run.refused += 1
        k += 1
        due += interval


def _asker(run: Run, actions: Any, channels: int, every: float, until: float, stop: threading.Event) -> None:
    from bot.actions import Invoker
    from memory.models import Message, ScopeKey

    rng = random.Random(99)
    n = 0
    while not stop.is_set() and run.now() + every < until:
        stop.wait(every)
        if stop.is_set():
            return
        channel = rng.randrange(channels)
        topics = synthetic.topic_words(400, random.Random(1000 + channel))
        question = f"what did people say about {rng.choice(topics[:40])} and {rng.choice(topics[:40])}?"
        msg = Message(PLATFORM, WORKSPACE, f"c{channel}", f"q{channel}-{n}", "asker", "Asker", f"@chorus {question}",
                      time.time(), channel_name=f"c{channel}")
        n += 1
        started = time.perf_counter()
        try:
            actions.remember(msg)  # the mention is a chat message too
            with run.lock:
                run.posted.setdefault(f"c{channel}", []).append(msg.msg_id)
            actions.ask(Invoker(ScopeKey(PLATFORM, WORKSPACE, f"c{channel}"), "asker", "Asker"), question,
                        asked_in=msg)
        except Exception as exc:
            with run.lock:
                run.errors.append(f"ask: {type(exc).__name__}: {exc}")
            continue
        with run.lock:
            run.answers.append((started - run.t0, time.perf_counter() - started))


def _writer_loop(run: Run, writer: Any, llm: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            windows = writer.pending()
        except Exception as exc:
            with run.lock:
                run.errors.append(f"writer: {type(exc).__name__}: {exc}")
            windows = []
        if not windows:
            stop.wait(0.5)
            continue
        for w in windows:
            if stop.is_set():
                return
            started = time.perf_counter()
            try:
                res = writer.run_window(w)
            except Exception as exc:
                with run.lock:
                    run.errors.append(f"writer: {type(exc).__name__}: {exc}")
                stop.wait(1.0)
                continue
            with run.lock:
                run.windows.append((started - run.t0, time.perf_counter() - started, res.n_messages, res.accepted))
            calls = getattr(llm, "calls", None)
            if isinstance(calls, list) and len(calls) > 200:
                calls.clear()  # the stand-in model's prompt log is not Chorus memory; keep RSS honest


def _writer_lag(store: Any) -> tuple[int, float]:
    """Messages the writer has not processed yet, and how old the oldest of them is (s)."""
    with store.read() as conn:
        count, oldest = conn.execute(
            "SELECT count(*), min(m.ts) FROM messages m LEFT JOIN writer_state w ON w.scope_id = m.scope_id "
            "WHERE m.deleted = 0 AND m.id > coalesce(w.watermark, 0)").fetchone()
    return int(count), (time.time() - oldest) if oldest else 0.0


def _sampler(run: Run, bot: Any, stop: threading.Event, proc: psutil.Process) -> None:
    while True:
        t = run.now()
        with run.lock:
            posted = sum(len(v) for v in run.posted.values())
            recent = [s for ts, s in run.ingest if ts >= t - 1.0]
        pending, age = _writer_lag(bot.store)
        sample = {"t": round(t, 2), "rss_mib": round(proc.memory_info().rss / 2**20, 1), "posted": posted,
                  "stored": bot.store.count_messages(), "queued": bot.door.queue.pending,
                  "embed_backlog": bot.store.pending_embeddings(), "analysis_backlog": bot.store.pending_analysis(),
                  "writer_pending": pending,
                  "writer_oldest_s": round(age, 2), "ingest_p50_ms": round(1000 * float(np.median(recent)), 2)
                  if recent else 0.0, "ingest_p95_ms": round(1000 * float(np.percentile(recent, 95)), 2)
                  if recent else 0.0, "ingest_per_s": len(recent)}
        with run.lock:
            run.samples.append(sample)
        if stop.wait(1.0):
            return


def _verify(store: Any, run: Run) -> dict[str, Any]:
    """Posted vs stored, id by id, and the file's integrity."""
    from memory.models import ScopeKey

    lost, duplicates, stored_total = 0, 0, 0
    missing: list[str] = []
    with run.lock:
        posted = {c: list(ids) for c, ids in run.posted.items()}
    for channel, ids in posted.items():
        sid = store.scope_id(ScopeKey(PLATFORM, WORKSPACE, channel))
        have: dict[str, int] = {}
        if sid is not None:
            with store.read() as conn:
                have = dict(conn.execute("SELECT msg_id, count(*) FROM messages WHERE scope_id = ? AND deleted = 0 "
                                         "GROUP BY msg_id", (sid,)).fetchall())
        stored_total += sum(have.values())
        duplicates += sum(n - 1 for n in have.values() if n > 1)
        gone = [i for i in ids if i not in have]
        lost += len(gone)
        missing += gone[:5]
    with store.read() as conn:
        integrity = conn.execute("PRAGMA quick_check").fetchone()[0]
    return {"posted": sum(len(v) for v in posted.values()), "stored": stored_total, "lost": lost,
            "duplicates": duplicates, "missing_examples": missing[:10], "integrity": integrity}


def write_plot(path: Path, data: dict[str, Any]) -> Path:
    """The report's timeline as stacked panels (matplotlib, through evaluation.plots)."""
    from evaluation.plots import timeline_plot

    samples = data["timeline"]
    ts = [s["t"] for s in samples]
    answers = data.get("answer_points", [])
    windows = data.get("window_points", [])

    def line(key: str) -> tuple[list[float], list[float], bool]:
        return ts, [s[key] for s in samples], False

    def points(pairs: list) -> tuple[list[float], list[float], bool]:
        return [p[0] for p in pairs], [p[1] for p in pairs], True

    panels = [
        ("ingest latency per second", "ms", {"p50": line("ingest_p50_ms"), "p95": line("ingest_p95_ms")}),
        ("messages per second", "msg/s", {"posted": line("ingest_per_s")}),
        ("answer latency (mention to reply)", "s", {"answer": points(answers)}),
        ("writer lag, embedding and analysis backlogs", "messages",
         {"writer pending": line("writer_pending"), "embed backlog": line("embed_backlog"),
          "analysis backlog": line("analysis_backlog")}),
        ("writer window duration", "s", {"window": points(windows)}),
        ("resident memory", "MiB", {"rss": line("rss_mib")}),
    ]
    cfg = data["config"]
    title = (f"chorus bench load: {cfg['rate']:g} msg/s, {cfg['channels']} channels, "
             f"lost {data['result']['lost']}")
    return timeline_plot(path, title, panels)


def run_load(settings: Any, *, rate: float = 50.0, seconds: float = 600.0, channels: int = 8,
             no_model: bool = False, ask_every: float = 5.0, drain_s: float = 120.0, store_path: str | None = None,
             progress: bool = True, wait_embeddings: bool = True, embedder: Any = None,
             writer_model_s: float = 0.0) -> dict[str, Any]:
    """Run the load and return the report (see the module docstring)."""
    from bot.actions import Actions
    from bot.app import Bot, load_embedder_from, load_llm_from, persona_of, writer_config
    from memory.llm.fake import ScriptedLLM
    from memory.store import Store
    from memory.writer.writer import Writer

    if rate <= 0 or seconds <= 0 or channels <= 0:
        raise ValueError("--rate, --seconds and --channels must be positive")
    proc = psutil.Process()
    tmp = None
    if store_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="chorus-load-")
        store_path = str(Path(tmp.name) / "load.db")
    embedder = embedder or load_embedder_from(settings)
    llm = None if no_model else load_llm_from(settings)
    store = Store(store_path, embedder=embedder, idle_gap_s=settings.store.idle_gap_minutes * 60)
    bot = Bot(settings, store=store, llm=llm, load_models=False)
    actions = Actions(bot)
    if no_model:
        writer_llm: Any = ScriptedLLM([scripted_writer(writer_model_s)] * 1000, name="scripted-writer")
        writer = Writer(store, writer_llm, records=bot.records, config=writer_config(settings))
    else:
        writer_llm = llm
        writer = Writer(store, llm, records=bot.records, persona=persona_of(settings),
                        config=writer_config(settings))
    run = Run(t0=time.perf_counter())
    rss_start = proc.memory_info().rss / 2**20
    stop_posting, stop_all = threading.Event(), threading.Event()
    until = run.now() + seconds
    per_channel = rate / channels
    threads = [threading.Thread(target=_poster, args=(run, actions, c, per_channel, until, stop_posting, 7 + c),
                                name=f"load-post-{c}", daemon=True) for c in range(channels)]
    asker = threading.Thread(target=_asker, args=(run, actions, channels, ask_every, until, stop_posting),
                             name="load-ask", daemon=True)
    background = [threading.Thread(target=_writer_loop, args=(run, writer, writer_llm, stop_all), name="load-writer",
                                   daemon=True),
                  threading.Thread(target=_sampler, args=(run, bot, stop_all, proc), name="load-sample", daemon=True)]
    load_start = os.getloadavg()[0]
    for t in background + threads + [asker]:
        t.start()
    try:
        last = 0.0
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if progress and run.now() - last >= 10:
                last = run.now()
                s = run.samples[-1] if run.samples else {}
                print(f"[{run.now():6.0f} s] posted {s.get('posted', 0)} stored {s.get('stored', 0)} "
                      f"embed backlog {s.get('embed_backlog', 0)} writer pending {s.get('writer_pending', 0)} "
                      f"rss {s.get('rss_mib', 0)} MiB", flush=True)
    except KeyboardInterrupt:
        stop_posting.set()
        for t in threads:
            t.join()
    posting_s = run.now()
    analysis_at_end = store.pending_analysis()
    stop_posting.set()  # no new questions; the one in flight finishes
    load_end = os.getloadavg()[0]
    # Drain: everything posted must be stored (and, if asked, indexed) before counting.
    deadline = time.monotonic() + drain_s
    asker.join(timeout=drain_s)
    while time.monotonic() < deadline and (bot.door.queue.pending
                                           or (wait_embeddings and store.pending_embeddings())):
        time.sleep(0.2)
    drained_s = run.now() - posting_s
    while time.monotonic() < deadline and store.pending_analysis():
        time.sleep(0.2)
    analysed_s = run.now() - posting_s
    # The writer has caught up when only partial windows are left (they wait for the session's idle gap).
    partial = channels * settings.writer.window_messages
    while time.monotonic() < deadline and _writer_lag(store)[0] > partial:
        time.sleep(0.2)
    caught_up_s = run.now() - posting_s if _writer_lag(store)[0] <= partial else None
    stop_all.set()
    for t in background:
        t.join(timeout=120)
    result = _verify(store, run)
    backlog_left = store.pending_embeddings()
    records = bot.records.count()
    lag_pending, lag_age = _writer_lag(store)
    with run.lock:
        ingest = [s for _, s in run.ingest]
        answers = list(run.answers)
        windows = list(run.windows)
        samples = list(run.samples)
    data: dict[str, Any] = {
        "config": {"rate": rate, "seconds": seconds, "channels": channels, "no_model": no_model,
                   "ask_every_s": ask_every, "embedder": embedder.name,
                   "answer_model": None if llm is None else getattr(llm, "name", "model"),
                   "writer_model": getattr(writer_llm, "name", "model"),
                   "window_messages": settings.writer.window_messages, "cpus": os.cpu_count(),
                   "loadavg_1m_start": round(load_start, 2), "loadavg_1m_end": round(load_end, 2)},
        "result": {**result, "refused": run.refused, "errors": run.errors[:20], "n_errors": len(run.errors),
                   "zero_loss": result["lost"] == 0 and result["duplicates"] == 0 and not run.refused},
        "posting_seconds": round(posting_s, 1),
        "achieved_rate": round(result["posted"] / posting_s, 2) if posting_s else 0.0,
        "late_posts": run.late,
        "drain_seconds": round(drained_s, 1),
        "ingest_latency": _pct(ingest),
        "answer_latency": _pct([a[1] for a in answers]),
        "writer": {"windows": len(windows), "records": records, "window_latency": _pct([w[1] for w in windows]),
                   "messages_written": sum(w[2] for w in windows), "model_seconds_per_window": writer_model_s,
                   "busy_seconds": round(sum(w[1] for w in windows), 1),
                   "messages_per_busy_second": round(sum(w[2] for w in windows) / sum(w[1] for w in windows), 1)
                   if windows else 0.0,
                   "caught_up_after_posting_s": None if caught_up_s is None else round(caught_up_s, 1),
                   "max_pending": max((s["writer_pending"] for s in samples), default=0),
                   "max_oldest_s": max((s["writer_oldest_s"] for s in samples), default=0.0),
                   "final_pending": lag_pending, "final_oldest_s": round(lag_age, 1)},
        "embedding": {"max_backlog": max((s["embed_backlog"] for s in samples), default=0),
                      "backlog_left": backlog_left},
        "analysis": {"max_backlog": max((s["analysis_backlog"] for s in samples), default=0),
                     "backlog_when_posting_stopped": analysis_at_end,
                     "drained_after_posting_s": round(analysed_s, 1) if not store.pending_analysis() else None,
                     "backlog_left": store.pending_analysis(), "failed": store.failed_analysis(),
                     "state_records": len(bot.records.heads([sc.id for sc in store.scopes()],
                                                            layers=["group_interaction"]))},
        "memory": {"rss_start_mib": round(rss_start, 1),
                   "rss_end_mib": round(proc.memory_info().rss / 2**20, 1),
                   "peak_rss_mib": max([s["rss_mib"] for s in samples] + [round(rss_start, 1)])},
        "timeline": samples,
        "answer_points": [(round(t, 2), round(s, 4)) for t, s in answers],
        "window_points": [(round(t, 2), round(s, 4)) for t, s, _, _ in windows],
    }
    bot.close()
    if tmp is not None:
        tmp.cleanup()
    return data


def main(args: argparse.Namespace, settings: Any) -> int:
    data = run_load(settings, rate=float(args.rate), seconds=float(args.seconds), channels=int(args.channels),
                    no_model=bool(getattr(args, "no_model", False)), ask_every=float(getattr(args, "ask_every", 5.0)),
                    writer_model_s=float(getattr(args, "writer_model_seconds", 0.0) or 0.0))
    out = Path(args.out)
    path = save(out, "load", data)
    try:
        plot_note = f"and {write_plot(out / 'load.png', data)}"
    except PlotUnavailable as exc:
        plot_note = f"({exc})"
    r, il, al, w = data["result"], data["ingest_latency"], data["answer_latency"], data["writer"]
    print(f"posted {r['posted']} messages at {data['achieved_rate']} msg/s over {data['posting_seconds']} s; "
          f"stored {r['stored']}; lost {r['lost']}; duplicated {r['duplicates']}; integrity {r['integrity']}")
    print(f"ingest p50 {il.get('p50_ms')} ms, p95 {il.get('p95_ms')} ms, p99 {il.get('p99_ms')} ms; "
          f"answers {al.get('n', 0)}: p50 {al.get('p50_ms')} ms, p95 {al.get('p95_ms')} ms")
    wl = w["window_latency"]
    caught = w["caught_up_after_posting_s"]
    print(f"writer: {w['windows']} windows ({w['messages_written']} messages), window p50 {wl.get('p50_ms')} ms, "
          f"p95 {wl.get('p95_ms')} ms, max {wl.get('max_ms')} ms (model {w['model_seconds_per_window']:g} s each); "
          f"{w['messages_per_busy_second']} messages per writer-busy second; {w['records']} records")
    print(f"writer lag: max {w['max_pending']} messages (oldest {w['max_oldest_s']:.0f} s), {w['final_pending']} at "
          f"the end; " + (f"caught up {caught} s after posting stopped" if caught is not None
                          else "not caught up within the drain time") +
          f"; embedding backlog max {data['embedding']['max_backlog']}; peak RSS {data['memory']['peak_rss_mib']} MiB")
    a = data["analysis"]
    print(f"analysis: backlog max {a['max_backlog']}, {a['backlog_when_posting_stopped']} when posting stopped, "
          + (f"drained {a['drained_after_posting_s']} s after" if a["drained_after_posting_s"] is not None
             else f"{a['backlog_left']} left after the drain time")
          + f"; {a['failed']} failed; {a['state_records']} group-state heads")
    print(f"written to {path} {plot_note}")
    return 0 if r["lost"] == 0 and r["duplicates"] == 0 else 1
