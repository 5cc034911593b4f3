"""``chorus bench scopes``: what one FTS5 index per scope costs when a store holds many scopes.

Each scope has its own FTS5 table (memory/store/scopeindex.py), so BM25 reads only the visible
scopes' statistics. The baseline in the same run is the same messages in ONE scope (one table):
BM25 there, bulk ingest and opening the store. The many-scope store puts half the messages in one
big scope and spreads the rest over ``--scopes`` small ones, then searches the big scope, a small
one, three linked small ones and the big one linked with two small ones.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from memory.models import Message
from memory.search import HYBRID_BM25_MAX_DF, RECALL_POOL, Searcher
from memory.store import Store

from . import synthetic
from .common import percentiles, save


def _layout(n: int, scopes: int) -> list[Message]:
    """Half the messages in 'big', the rest round-robin over ``scopes`` small channels."""
    out = []
    for i, m in enumerate(synthetic.history(n, channels=1, seed=21)):
        channel = "big" if scopes == 0 or i < n // 2 else f"c{i % scopes}"
        out.append(Message(m.platform, m.workspace, channel, m.msg_id, m.author_id, m.author_name, m.text, m.ts))
    return out


def _store(folder: Path, msgs: list[Message]) -> tuple[float, float]:
    """Bulk-ingest ``msgs`` (seconds) and reopen the store (milliseconds to the first read)."""
    store = Store(folder / "bench.db")
    t = time.perf_counter()
    store.ingest(msgs, embed=False, batch_size=5000)
    ingest_s = time.perf_counter() - t
    store.close()
    t = time.perf_counter()
    Store(folder / "bench.db").close()
    return ingest_s, (time.perf_counter() - t) * 1000


def _bm25(store: Store, scope_ids: list[int], qs: list[str]) -> dict:
    searcher = Searcher(store)
    searcher.bm25(scope_ids, qs[0])
    lat = []
    for q in qs:
        t = time.perf_counter()
        searcher.bm25(scope_ids, q, RECALL_POOL, HYBRID_BM25_MAX_DF)
        lat.append(time.perf_counter() - t)
    return percentiles(lat)


def main(args: argparse.Namespace, settings: object) -> int:
    n, k = int(args.messages), int(args.scopes)
    qs = synthetic.queries(int(args.queries))
    report: dict = {"messages": n, "scopes": k, "queries": len(qs)}
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        one.mkdir()
        many.mkdir()
        print(f"ingesting {n:,} messages into 1 scope and into 1 + {k} scopes ...", file=sys.stderr)
        report["one_scope"] = dict(zip(("ingest_s", "open_ms"), _store(one, _layout(n, 0)), strict=True))
        report["many_scopes"] = dict(zip(("ingest_s", "open_ms"), _store(many, _layout(n, k)), strict=True))
        with Store(one / "bench.db") as store:
            report["one_scope"]["bm25"] = _bm25(store, [store.scopes()[0].id], qs)
        with Store(many / "bench.db") as store:
            sid = {s.channel: s.id for s in store.scopes()}
            small = [sid[f"c{i}"] for i in range(min(3, k))]
            cases = {"big": [sid["big"]], "one small": small[:1], "three small linked": small,
                     "big + two small linked": [sid["big"], *small[:2]]}
            report["many_scopes"]["bm25"] = {name: _bm25(store, ids, qs) for name, ids in cases.items() if ids}
    path = save(args.out, "scopes", report)
    one_r, many_r = report["one_scope"], report["many_scopes"]
    print(f"\n| store | bulk ingest | open | BM25 p50 / p95 |\n|---|---|---|---|\n"
          f"| {n:,} in one scope (baseline) | {one_r['ingest_s']:.1f} s | {one_r['open_ms']:.1f} ms | "
          f"{one_r['bm25']['p50_ms']} / {one_r['bm25']['p95_ms']} ms |")
    for name, lat in many_r["bm25"].items():
        print(f"| 1 + {k} scopes, search {name} | {many_r['ingest_s']:.1f} s | {many_r['open_ms']:.1f} ms | "
              f"{lat['p50_ms']} / {lat['p95_ms']} ms |")
    print(f"\nwritten to {path}")
    return 0
