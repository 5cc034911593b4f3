"""The ``chorus`` command line. Each subcommand is a boundary: errors print a reason, not a trace."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Callable

from memory.errors import ChorusError

from .config import Settings, example_toml, load_settings

log = logging.getLogger("chorus")
COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], int]] = {}


def command(name: str) -> Callable:
    def register(fn: Callable[[argparse.Namespace, Settings], int]) -> Callable:
        COMMANDS[name] = fn
        return fn
    return register


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chorus", description="Chorus: a self-hosted memory bot for group chats.")
    p.add_argument("--config", help="config TOML (default: $CHORUS_CONFIG or ./config.toml)")
    p.add_argument("--db", help="store file, overriding [store].path")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("console", help="terminal group chat with the bot (the embedded default)")
    c.add_argument("--channel", default="general")
    c.add_argument("--no-demo", action="store_true", help="do not preload the demo conversation")

    c = sub.add_parser("ingest", help="import a transcript (jsonl, locomo, socialmem, friendsqa)")
    c.add_argument("file")
    c.add_argument("--format", default="jsonl", choices=["jsonl", "locomo", "socialmem", "friendsqa"])
    c.add_argument("--no-embed", action="store_true", help="store now, embed later with `chorus embed`")

    sub.add_parser("embed", help="embed messages imported without vectors")
    c = sub.add_parser("reindex", help="re-embed everything with the configured embedder (after changing it)")
    c.add_argument("--force", action="store_true", help="re-embed even if the store already uses this embedder")

    c = sub.add_parser("ask", help="ask the bot a question about one channel")
    c.add_argument("question")
    c.add_argument("--scope", required=True, help="platform:workspace:channel")

    c = sub.add_parser("whosaid", help="who said an exact phrase in one channel")
    c.add_argument("phrase")
    c.add_argument("--scope", required=True, help="platform:workspace:channel")

    c = sub.add_parser("write", help="run pending writer windows now")
    c.add_argument("--force", action="store_true", help="also write sessions that are still open")
    c.add_argument("--max-windows", type=int, help="stop after this many windows")
    c.add_argument("--retry-quarantined", type=int, metavar="ID", help="retry one quarantined window")

    sub.add_parser("status", help="what the store holds, writer lag per scope, quarantined windows")
    sub.add_parser("migrate", help="apply pending schema migrations")
    sub.add_parser("scopes", help="list channels with memory")
    sub.add_parser("config-example", help="print the documented example configuration")
    sub.add_parser("doctor", help="what the configured model supports, with a live smoke test of each prompt form")
    c = sub.add_parser("inspect", help="browse the store read-only in Datasette: what is remembered about whom, "
                                        "from which message, update chains, writer rejections")
    c.add_argument("--store", help="store file (default: --db or [store].path)")
    c.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    c.add_argument("--port", type=int, default=8001)
    c.add_argument("--token-env", metavar="VAR", help="require the operator token held in this environment variable")

    c = sub.add_parser("eval", help="evaluate on real conversation data")
    esub = c.add_subparsers(dest="eval_kind", required=True)
    e = esub.add_parser("retrieval", help="evidence recall@k of retrieval systems side by side")
    e.add_argument("--dataset", choices=["locomo", "socialmem", "friendsqa"],
                   help="the dataset to score (required unless --lodo)")
    e.add_argument("--lodo", action="store_true",
                   help="tune hybrid search's constants leave-one-dataset-out on all three and print the table")
    e.add_argument("--cache", default="out/cache", help="--lodo: folder for per-dataset feature caches")
    e.add_argument("--data", help="a file (or SocialMemBench folder) of the same format")
    e.add_argument("--out", default="out/eval", help="folder for the JSON and Markdown results")
    e.add_argument("--limit", type=int, help="only the first N conversations")
    e.add_argument("--systems", default="bm25,dense,hybrid,full,no_track2,no_track1,no_group,no_person",
                   help="comma-separated systems to compare")
    e.add_argument("--stores", help="folder of per-conversation stores to reuse (e.g. filled by `eval writer`)")

    e = esub.add_parser("writer", help="write real conversations end to end and measure the writer")
    e.add_argument("--dataset", choices=["locomo", "socialmem", "friendsqa"], help="write this dataset's chats")
    e.add_argument("--data", help="a file (or SocialMemBench folder) of the same format")
    e.add_argument("--out", default="out/eval")
    e.add_argument("--limit", type=int, help="only the first N conversations")
    e.add_argument("--stores", help="keep the written stores here (reuse with `eval retrieval --stores`)")
    e.add_argument("--reference", help="reference writer output (folder of *.actions.json, or one file) to score "
                                       "the records against")
    e.add_argument("--store", help="score an existing store (or folder of stores) against --reference; writes nothing")
    e = esub.add_parser("answer", help="replies as users read them: answer recall, cite-hit, declines, latency")
    e.add_argument("--dataset", choices=["locomo", "socialmem", "friendsqa"], help="required unless --lodo")
    e.add_argument("--lodo", action="store_true",
                   help="choose the reply constants leave-one-dataset-out on all three dev sets and print the table")
    e.add_argument("--own", default="tests/data/chats",
                   help="--lodo: also score our own question set (SocialMemBench format) with the chosen constants")
    e.add_argument("--data", help="a file (or SocialMemBench folder) of the same format")
    e.add_argument("--out", default="out/eval")
    e.add_argument("--limit", type=int, help="only the first N conversations")
    e.add_argument("--questions", type=int, help="at most N questions per conversation")
    e.add_argument("--stores", help="reuse stores written by `eval writer` (Track 2 included)")
    e.add_argument("--policies", default="evidence,model,baseline",
                   help="comma-separated reply policies to compare: evidence, model, baseline (top BM25 message)")
    e.add_argument("--model-questions", type=int, default=30,
                   help="how many questions the (slow) model policy answers; 0 skips it")
    e = esub.add_parser("speaker-levenshtein", help="compare the records of two stores (writer A vs B)")
    e.add_argument("--pred", required=True, help="store written by the writer under test")
    e.add_argument("--ref", required=True, help="reference store")

    c = sub.add_parser("bench", help="benchmarks that compare against a baseline in the same run")
    bsub = c.add_subparsers(dest="bench_kind", required=True)
    b = bsub.add_parser("ingest", help="messages/s with and without embeddings")
    b.add_argument("--messages", type=int, default=20_000)
    b.add_argument("--embedded-messages", type=int, default=2_000)
    b.add_argument("--out", default="out/bench")
    b = bsub.add_parser("event", help="adapter event ingest p50/p95 and command ack under a slow model")
    b.add_argument("--events", type=int, default=300)
    b.add_argument("--model-seconds", type=float, default=5.0)
    b.add_argument("--acks", type=int, default=10)
    b.add_argument("--out", default="out/bench")
    b = bsub.add_parser("load", help="sustained traffic with questions and writer windows: zero loss, latency, RSS")
    b.add_argument("--rate", type=float, default=50.0, help="messages per second over all channels")
    b.add_argument("--seconds", type=float, default=600.0)
    b.add_argument("--channels", type=int, default=8)
    b.add_argument("--ask-every", type=float, default=5.0, help="seconds between questions")
    b.add_argument("--no-model", action="store_true", help="answer from evidence; write with a scripted model")
    b.add_argument("--out", default="out/bench")
    b = bsub.add_parser("writer", help="writer messages/min and tokens/s vs raw llama.cpp on the same model")
    b.add_argument("--windows", type=int, default=3)
    b.add_argument("--out", default="out/bench")
    b = bsub.add_parser("answer", help="answer path latency without generation at 10k/100k messages")
    b.add_argument("--sizes", default="10000,100000")
    b.add_argument("--queries", type=int, default=200)
    b.add_argument("--generate", type=int, default=5, help="also time N full answers with the model")
    b.add_argument("--out", default="out/bench")
    b = bsub.add_parser("search", help="hybrid search latency vs numpy and rank-bm25")
    b.add_argument("--sizes", default="10000,100000")
    b.add_argument("--queries", type=int, default=100)
    b.add_argument("--out", default="out/bench")
    from .platform_cli import add_parsers  # local: platform_cli imports this module

    add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        if args.db:
            settings.store.path = args.db
    except ChorusError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else getattr(logging, settings.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from . import commands, doctor, platform_cli  # noqa: F401  (register the subcommands)

    try:
        return COMMANDS[args.command](args, settings)
    except ChorusError as exc:
        log.debug("command failed", exc_info=True)
        print(f"chorus: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("chorus: interrupted", file=sys.stderr)
        return 130


@command("config-example")
def _config_example(args: argparse.Namespace, settings: Settings) -> int:
    sys.stdout.write(example_toml())
    return 0


@command("inspect")
def _inspect(args: argparse.Namespace, settings: Settings) -> int:
    from .inspect import serve

    return serve(Path(args.store or settings.store.path).expanduser(), host=args.host, port=args.port,
                 token_env=args.token_env)
