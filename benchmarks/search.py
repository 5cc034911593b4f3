"""``chorus bench search``: hybrid search latency at 10k and 100k messages in one scope.

Baselines in the same run over the same corpus: numpy brute-force KNN over a
float32 matrix, and rank-bm25 scoring. Corpus vectors are synthetic unit vectors
written straight into the vector index (embedding 100k messages takes minutes and
does not change search cost); queries are embedded by the real model, inside the
timed region for hybrid and dense search.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from memory.models import Message
from memory.search import OLD_RRF, Searcher
from memory.store import Store

from . import synthetic
from .common import percentiles, save_by_size

_TOKEN = re.compile(r"\w+")


def one_scope(n: int) -> list[Message]:
    return [Message(m.platform, m.workspace, "big", m.msg_id, m.author_id, m.author_name, m.text, m.ts)
            for m in synthetic.history(n, channels=1, seed=21)]


def fill_vectors(store: Store, dim: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with store.read() as conn:
        rows = conn.execute("SELECT id, scope_id FROM messages WHERE deleted = 0 ORDER BY id").fetchall()
    matrix = rng.standard_normal((len(rows), dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    for start in tqdm(range(0, len(rows), 5000), desc="vectors", unit="batch", file=sys.stderr):
        chunk = rows[start:start + 5000]
        with store.write() as conn:
            conn.executemany("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                             [(r[0], r[1], matrix[start + i].tobytes()) for i, r in enumerate(chunk)])
            conn.executemany("UPDATE messages SET embedded = 1 WHERE id = ?", [(r[0],) for r in chunk])
    return matrix


def main(args: argparse.Namespace, settings: object) -> int:
    from rank_bm25 import BM25Okapi

    from bot.app import load_embedder_from

    embedder = load_embedder_from(settings)  # type: ignore[arg-type]
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    qs = synthetic.queries(int(args.queries))
    report: dict = {"queries": len(qs), "sizes": {}}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
            store = Store(Path(tmp) / "bench.db", embedder=embedder)
            msgs = one_scope(size)
            with tqdm(total=size, desc=f"import {size}", unit="msg", file=sys.stderr) as bar:
                store.ingest(msgs, embed=False, batch_size=5000, progress=bar.update)
            matrix = fill_vectors(store, embedder.dim)
            searcher = Searcher(store)
            scope = [store.scopes()[0].id]
            searcher.search(scope, qs[0], k=10)  # warm: loads the in-memory vector mirror once
            row: dict = {}
            # The old fixed-constant RRF (40 a side, no chat signals) runs too, as the before in the same run.
            for name, mode, params in (("hybrid", "hybrid", None), ("hybrid_old_rrf", "hybrid", OLD_RRF),
                                       ("bm25", "bm25", None), ("dense", "dense", None)):
                lat = []
                for q in qs:
                    searcher.forget_query_vectors()  # every timed search embeds its question
                    t = time.perf_counter()
                    searcher.search(scope, q, k=10, mode=mode, params=params)  # type: ignore[arg-type]
                    lat.append(time.perf_counter() - t)
                row[f"chorus_{name}"] = percentiles(lat)
            qvecs = embedder.embed(qs)
            lat = []
            for qv in qvecs:
                t = time.perf_counter()
                sims = matrix @ qv
                top = np.argpartition(-sims, 40)[:40]
                top[np.argsort(-sims[top])]
                lat.append(time.perf_counter() - t)
            row["baseline_numpy_knn"] = percentiles(lat)
            corpus = [_TOKEN.findall(m.text.lower()) or ["_"] for m in msgs]
            bm25 = BM25Okapi(corpus)
            lat = []
            for q in qs[: max(5, len(qs) // 5)]:
                t = time.perf_counter()
                scores = bm25.get_scores(_TOKEN.findall(q.lower()))
                np.argpartition(-scores, 40)[:40]
                lat.append(time.perf_counter() - t)
            row["baseline_rank_bm25"] = percentiles(lat)
            report["sizes"][str(size)] = row
            store.close()
    columns = ("messages in one scope", "Chorus hybrid p50 / p95", "old RRF hybrid p95", "Chorus BM25 p95",
               "Chorus dense p95", "numpy KNN p95", "rank-bm25 p95")
    later = ("chorus_hybrid_old_rrf", "chorus_bm25", "chorus_dense", "baseline_numpy_knn", "baseline_rank_bm25")
    path = save_by_size(args.out, "search", report, columns, lambda row: [
        f"{row['chorus_hybrid']['p50_ms']} / {row['chorus_hybrid']['p95_ms']} ms",
        *(f"{row[name]['p95_ms']} ms" for name in later)])
    print(f"\npeak RSS {report['peak_rss_mib']:.0f} MiB; written to {path}")
    return 0
