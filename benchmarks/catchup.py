"""``chorus bench catchup``: a member's digest over the last week of a 100k-message store.

The store holds one channel of synthetic chat (``benchmarks.synthetic``, about 40 s between messages, so
a week is about 15k messages), read by the analysis pass first as the bot reads messages when they arrive
(no vectors here: the bench measures the digest, not the pass). Each timed digest is the whole ``/catchup``
path below the adapter: window, the group state and the stored acts, names, selection and rendering with
citations, for a different member each time; the first one (cold caches) is reported apart. Baselines in
the same run on the same store: reading the week's messages whole (what a digest that reread every text
would pay before any work), the last-N messages and BM25's top N for "decided plan rule @member" (the
evaluation's two baselines).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from bot.app import Bot
from bot.catchup import Catchup
from bot.config import Settings
from memory.catchup.digest import window_messages
from memory.ftsquery import match_any
from memory.models import Message
from memory.store import scopeindex

from . import synthetic
from .common import percentiles, save_by_size

WEEK_S = 7 * 86400


def main(args: argparse.Namespace, settings: object) -> int:
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    report: dict = {"digests": int(args.queries), "window_days": 7, "sizes": {}}
    for size in sizes:
        report["sizes"][str(size)] = one_size(size, int(args.queries))
    columns = ("messages in the store", "messages in the week", "digest p50 / p95", "first (cold) digest",
               "mean lines", "read the week p95", "last-N p95", "BM25-N p95")
    path = save_by_size(args.out, "catchup", report, columns, lambda row: [
        f"{row['messages_in_week']:,}", f"{row['chorus_digest']['p50_ms']} / {row['chorus_digest']['p95_ms']} ms",
        f"{row['cold_ms']} ms", str(row["mean_lines"]), f"{row['baseline_read_week']['p95_ms']} ms",
        f"{row['baseline_last_n']['p95_ms']} ms", f"{row['baseline_bm25_n']['p95_ms']} ms"])
    print(f"\ntarget: digest p95 <= 200 ms at 100k; peak RSS {report['peak_rss_mib']:.0f} MiB; written to {path}")
    return 0


def one_size(size: int, queries: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        cfg = Settings.model_validate({"store": {"path": str(Path(tmp) / "bench.db")}})
        with Bot(cfg, load_models=False) as bot:
            msgs = [Message(m.platform, m.workspace, "big", m.msg_id, m.author_id, m.author_name, m.text, m.ts)
                    for m in synthetic.history(size, channels=1, seed=21)]
            with tqdm(total=size, desc=f"import {size}", unit="msg", file=sys.stderr) as bar:
                bot.store.ingest(msgs, embed=False, batch_size=5000, progress=bar.update)
            analysis = bot.analysis  # the bot reads every message as it arrives; here, all at once first
            if analysis is not None:
                with tqdm(total=size, desc=f"analyse {size}", unit="msg", file=sys.stderr) as bar:
                    analysis.run(batch_size=256, progress=bar.update)
            scope = bot.store.scopes()[0]
            sids = [scope.id]
            until = msgs[-1].ts + 1
            since = until - WEEK_S
            people = bot.store.roster(scope.id)
            catchup = Catchup(bot)
            row: dict = {"messages_in_week": len(window_messages(bot.store, sids, since, until, 10**7)[0])}
            lat, lines = [], []
            for i in range(queries + 1):
                p = people[i % len(people)]
                t = time.perf_counter()
                reply = catchup.reply(scope.key, p.person_id, p.display_name, "7d", now=until)
                elapsed = time.perf_counter() - t
                if i == 0:  # the first digest reads the store cold
                    row["cold_ms"] = round(elapsed * 1000, 1)
                else:
                    lat.append(elapsed)
                lines.append(len((reply.data.get("catchup") or {}).get("lines", [])))
            row["chorus_digest"] = percentiles(lat)
            row["mean_lines"] = round(sum(lines) / len(lines), 1)
            row["baseline_read_week"] = percentiles(timed(queries, lambda: window_messages(
                bot.store, sids, since, until, 10**7)))
            row["baseline_last_n"] = percentiles(timed(queries, lambda: bot.store.recent(scope.id, 12)))
            names = iter([people[i % len(people)].display_name for i in range(queries)])

            def bm25() -> None:
                query = match_any(f"decided plan rule {next(names)}") or '"x"'
                with bot.store.read() as conn:
                    for sid in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES, sids):
                        t = scopeindex.MESSAGES.table(sid)
                        conn.execute(f"SELECT f.rowid FROM {t} f JOIN messages m ON m.id = f.rowid WHERE "
                                     f"{t} MATCH ? AND m.ts > ? ORDER BY bm25({t}) LIMIT 12", (query, since)).fetchall()
            row["baseline_bm25_n"] = percentiles(timed(queries, bm25))
            return row


def timed(n: int, fn: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out
