"""``chorus bench writer``: writer throughput and generation speed vs raw llama.cpp.

Runs a few real windows (a SocialMemBench network if the shared data is present,
otherwise synthetic chat) with the configured model, then generates the same
number of tokens from the same first prompt with llama.cpp directly, in the same
run, so the writer's overhead (grammar, verification, commits) is visible.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from memory.records import Records
from memory.records_sync import attach
from memory.store import Store
from memory.writer.prompt import build_prompt
from memory.writer.writer import Writer

from .common import peak_rss_mib, save


def _messages():
    try:
        from memory.datasets import load_dataset

        return load_dataset("socialmem")[0].messages
    except Exception:  # no shared data here: synthetic chat still measures speed
        from . import synthetic

        return list(synthetic.history(200, channels=1))


def main(args: argparse.Namespace, settings) -> int:
    from bot.app import load_embedder_from, load_llm_from, persona_of, writer_config

    llm = load_llm_from(settings)
    config = writer_config(settings)
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        store = Store(Path(tmp) / "w.db", embedder=load_embedder_from(settings), idle_gap_s=config.idle_gap_s)
        store.ingest(_messages())
        records = Records(store)
        attach(store, records)
        writer = Writer(store, llm, config=config, persona=persona_of(settings), records=records)
        first = writer.pending(force=True)[0]
        roster = store.roster(first.scope_id)
        prompt = build_prompt([p.display_name for p in roster], [], {}, first.messages)
        llm.complete("warm up", max_tokens=4)
        t = time.perf_counter()
        results = writer.run_pending(force=True, max_windows=int(args.windows),
                                     progress=lambda r: print(f"window: {r.status}, {r.accepted} records, "
                                                              f"{r.n_messages} messages", file=sys.stderr))
        wall = time.perf_counter() - t
        store.close()
    toks = sum(r.completion.completion_tokens for r in results if r.completion)
    gen = sum(r.completion.gen_seconds for r in results if r.completion)
    msgs = sum(r.n_messages for r in results)
    writer_tps = toks / gen if gen else 0.0
    raw_tps = 0.0
    if hasattr(llm, "raw_generate_speed"):
        n = max(32, min(256, toks // max(1, len(results))))
        raw = llm.raw_generate_speed(prompt, n)
        raw_tps = raw.tokens_per_second
    data = {"model": getattr(llm, "name", "model"), "windows": len(results), "messages": msgs,
            "messages_per_minute": round(60 * msgs / wall, 1) if wall else 0.0,
            "writer_generation_tokens_per_s": round(writer_tps, 2), "raw_llama_cpp_tokens_per_s": round(raw_tps, 2),
            "ratio": round(writer_tps / raw_tps, 3) if raw_tps else None, "peak_rss_mib": round(peak_rss_mib(), 1)}
    path = save(args.out, "writer", data)
    print(f"""
| measure | writer | raw llama.cpp (same model, same prompt, same run) |
|---|---|---|
| generation speed | {data['writer_generation_tokens_per_s']} tokens/s | {data['raw_llama_cpp_tokens_per_s']} tokens/s |
| ratio | {data['ratio']} | target >= 0.8 |
| messages written | {data['messages_per_minute']} messages/min | |

written to {path}""")
    return 0
