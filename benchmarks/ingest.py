"""``chorus bench ingest``: messages/s into the store, with and without embeddings.

Baselines in the same run on the same messages: building a rank-bm25 index, and
embedding alone (what a numpy brute-force index must pay before it can search).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from memory.store import Store

from . import synthetic
from .common import peak_rss_mib, percentiles, save, timed

_TOKEN = re.compile(r"\w+")


class _TimedEmbedder:
    """The embedder, adding up the seconds spent inside ``embed`` (what the store's own work is not)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.seconds = 0.0

    def embed(self, texts):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return self.inner.embed(texts)  # type: ignore[attr-defined]
        finally:
            self.seconds += time.perf_counter() - t

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def main(args: argparse.Namespace, settings: object) -> int:
    from bot.app import load_embedder_from

    n_bulk = int(args.messages)
    n_embed = int(args.embedded_messages)
    results: dict = {"messages_bulk": n_bulk, "messages_embedded": n_embed}
    print(f"generating {n_bulk + n_embed} synthetic messages...", file=sys.stderr)
    bulk = list(synthetic.history(n_bulk, seed=7))
    live = list(synthetic.history(n_embed, seed=8, workspace="w2"))
    embedder = load_embedder_from(settings)  # type: ignore[arg-type]
    embedder.embed(["warm up the model"])
    timed_embedder = _TimedEmbedder(embedder)
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        store = Store(Path(tmp) / "bench.db", embedder=timed_embedder)
        with tqdm(total=n_bulk, desc="bulk import (no embeddings)", unit="msg", file=sys.stderr,
                  mininterval=2.0) as bar:
            _, secs = timed(store.ingest, bulk, embed=False, batch_size=2000, progress=bar.update)
        results["bulk_import_msgs_per_s"] = round(n_bulk / secs, 1)

        # `chorus ingest` and backfill embed in batches of 256; the live bot's background embedder takes 64 at a time.
        with tqdm(total=n_embed, desc="ingest with embeddings", unit="msg", file=sys.stderr) as bar:
            _, secs = timed(store.ingest, live, embed=True, batch_size=256, progress=bar.update)
        results["ingest_with_embeddings_msgs_per_s"] = round(n_embed / secs, 1)
        # Share of that ingest spent inside the embedder: load on a shared machine moves both together.
        results["ingest_share_in_embedder"] = round(timed_embedder.seconds / secs, 3)
        # Embedding alone right after, on the same strings the store embeds ("author: text", cut to the
        # prefix), so the ratio compares equal work at nearly the same moment.
        from memory.embeddings.base import prefix
        from memory.store import embed_text

        texts = [prefix(embed_text(m.author_name, m.text)) for m in live]
        _, secs = timed(embedder.embed, texts)
        results["baseline_embed_only_msgs_per_s"] = round(n_embed / secs, 1)
        results["ingest_vs_embed_only"] = round(results["ingest_with_embeddings_msgs_per_s"]
                                                / results["baseline_embed_only_msgs_per_s"], 2)
        small = list(synthetic.history(n_embed // 2, seed=10, workspace="w4"))
        with tqdm(total=len(small), desc="ingest with embeddings, batches of 64", unit="msg", file=sys.stderr) as bar:
            _, secs = timed(store.ingest, small, embed=True, batch_size=64, progress=bar.update)
        results["ingest_with_embeddings_batch64_msgs_per_s"] = round(len(small) / secs, 1)
        results["embedder"] = embedder.name

        # One live event at a time. The bot stores it at once and embeds it in the background
        # (Bot.remember); embedding inline is shown too.
        events = list(synthetic.history(600, seed=9, workspace="w3"))
        lat, lat_inline = [], []
        for n, m in enumerate(tqdm(events, desc="single events", unit="msg", file=sys.stderr, mininterval=2.0)):
            _, s = timed(store.ingest_one, m, embed=n % 2 == 1)
            (lat_inline if n % 2 else lat).append(s)
        results["event_ingest_latency"] = percentiles(lat)
        results["event_ingest_latency_embedding_inline"] = percentiles(lat_inline)
        store.close()

    # Baselines over the same messages.
    from rank_bm25 import BM25Okapi

    _, secs = timed(lambda: BM25Okapi([_TOKEN.findall(m.text.lower()) or ["_"] for m in bulk]))
    results["baseline_rank_bm25_index_msgs_per_s"] = round(n_bulk / secs, 1)
    from memory.embeddings.minilm import MiniLMEmbedder

    numpy_port = MiniLMEmbedder()
    numpy_port.embed(["warm up the model"])
    _, secs = timed(numpy_port.embed, texts)
    results["baseline_numpy_minilm_embed_msgs_per_s"] = round(n_embed / secs, 1)
    results["peak_rss_mib"] = round(peak_rss_mib(), 1)
    path = save(args.out, "ingest", results)
    print(f"""
| measure | Chorus | baseline (same data, same run) |
|---|---|---|
| bulk import, no embeddings | {results['bulk_import_msgs_per_s']:,.0f} msg/s | rank-bm25 index build {results['baseline_rank_bm25_index_msgs_per_s']:,.0f} msg/s |
| ingest with embeddings ({results['embedder']}, batches of 256) | {results['ingest_with_embeddings_msgs_per_s']:,.0f} msg/s ({results['ingest_vs_embed_only']}x; {100 * results['ingest_share_in_embedder']:.0f}% of it inside the embedder) | embedding alone, same strings (numpy index) {results['baseline_embed_only_msgs_per_s']:,.0f} msg/s |
| ingest with embeddings, batches of 64 (live backlog) | {results['ingest_with_embeddings_batch64_msgs_per_s']:,.0f} msg/s | numpy MiniLM port, embedding alone {results['baseline_numpy_minilm_embed_msgs_per_s']:,.0f} msg/s |
| one live event, vector in background (p50 / p95) | {results['event_ingest_latency']['p50_ms']} / {results['event_ingest_latency']['p95_ms']} ms | embedding inline: {results['event_ingest_latency_embedding_inline']['p50_ms']} / {results['event_ingest_latency_embedding_inline']['p95_ms']} ms |
| peak RSS | {results['peak_rss_mib']:.0f} MiB | |

written to {path}""")
    return 0
