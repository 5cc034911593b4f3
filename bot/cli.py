"""The ``chorus`` command line: its table of subcommands, the parser rendered from it, and ``main``.

Each subcommand is a ``bot.command_table.Command`` whose handler takes the parsed
arguments and the settings and returns the exit status. Each handler is a boundary:
errors print a reason, not a trace. The handlers live below this module (``commands``,
``eval_commands``, ``platform_cli``, ``doctor``) and never import it.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from memory.errors import ChorusError

from . import commands, doctor, eval_commands, platform_cli
from .command_table import Arg, Command
from .config import Settings, load_settings

log = logging.getLogger("chorus")

CliHandler = Callable[[argparse.Namespace, Settings], int]
CliCommand = Command[CliHandler]

DATASETS = ("locomo", "socialmem", "friendsqa")
SCOPE = Arg("--scope", "platform:workspace:channel (default: the store's only channel; `chorus scopes` lists them)")
WHO = (Arg("--platform", required=True),
       Arg("--workspace", "Discord guild id / Slack team id ('@me' for Discord DMs)", required=True),
       Arg("--user", "the platform user id", required=True))
BENCH_OUT = Arg("--out", default="out/bench")

EVAL: tuple[CliCommand, ...] = (
    Command("retrieval", "evidence recall@k of retrieval systems side by side", eval_commands.eval_retrieval, (
        Arg("--dataset", "the dataset to score (required unless --lodo)", choices=DATASETS),
        Arg("--lodo", "tune hybrid search's constants leave-one-dataset-out on all three and print the table",
            type=bool),
        Arg("--cache", "--lodo: folder for per-dataset feature caches", default="out/cache"),
        Arg("--data", "a file (or SocialMemBench folder) of the same format"),
        Arg("--out", "folder for the JSON and Markdown results", default="out/eval"),
        Arg("--limit", "only the first N conversations", type=int),
        Arg("--systems", "comma-separated systems to compare",
            default="bm25,dense,hybrid,full,no_track2,no_track1,no_group,no_person"),
        Arg("--stores", "folder of per-conversation stores to reuse (e.g. filled by `eval writer`)"))),
    Command("writer", "write real conversations end to end and measure the writer", eval_commands.eval_writer, (
        Arg("--dataset", "write this dataset's chats", choices=DATASETS),
        Arg("--data", "a file (or SocialMemBench folder) of the same format"),
        Arg("--out", default="out/eval"),
        Arg("--limit", "only the first N conversations", type=int),
        Arg("--stores", "keep the written stores here (reuse with `eval retrieval --stores`)"),
        Arg("--reference", "reference writer output (folder of *.actions.json, or one file) to score the records "
                           "against"),
        Arg("--store", "score an existing store (or folder of stores) against --reference; writes nothing"))),
    Command("answer", "replies as users read them: answer recall, cite-hit, declines, latency",
            eval_commands.eval_answer, (
        Arg("--dataset", "the dataset's format (required)", choices=DATASETS, required=True),
        Arg("--data", "a file (or SocialMemBench folder) of the same format"),
        Arg("--out", default="out/eval"),
        Arg("--limit", "only the first N conversations", type=int),
        Arg("--questions", "at most N questions per conversation", type=int),
        Arg("--stores", "reuse stores written by `eval writer` (Track 2 included)"),
        Arg("--models", "folder of reply models to use instead of the shipped ones (e.g. a held-out model "
                        "written by `chorus train reranker` under out/train/lodo-DATASET)"),
        Arg("--policies", "comma-separated reply policies to compare: evidence, features (without the encoder), "
                          "model, baseline (top BM25 message)",
            default="evidence,baseline"),
        Arg("--model-questions", "how many questions the (slow) model policy answers; 0 skips it",
            type=int, default=30))),
    Command("catchup", "catch-up digests: gold recall, length, citation support, last-N and BM25 baselines",
            eval_commands.eval_catchup, (
        Arg("--own", "our catch-up set (SocialMemBench format with a 'catchup' block)", default="tests/data/catchup"),
        Arg("--data", "SocialMemBench folder or file (default: the shared data's)"),
        Arg("--lodo", "choose the digest's constants on one set and score them on the other", type=bool),
        Arg("--encoder", "read the chats with the act and link heads of the encoder in this folder (a candidate)"),
        Arg("--out", default="out/eval"))),
    Command("acts", "the analysis pass's act and link models on labelled chats, beside the old group-act classifier",
            eval_commands.eval_acts, (
        Arg("--data", "a labelled chat file or a folder of them (tests/data/longblind/README.md's format)",
            required=True),
        Arg("--acts", "act model file (default: the shipped memory/models/acts-v2.json)"),
        Arg("--links", "link model file (default: the shipped memory/models/links-v2.json)"),
        Arg("--no-old", "skip the old group-act classifier", type=bool),
        Arg("--encoder", "folder holding a candidate encoder with analysis heads (default: the shipped one)"),
        Arg("--out", default="out/eval"))),
    Command("speaker-levenshtein", "compare the records of two stores (writer A vs B)",
            eval_commands.eval_speaker_levenshtein, (
        Arg("--pred", "store written by the writer under test", required=True),
        Arg("--ref", "reference store", required=True))),
)

BENCH: tuple[CliCommand, ...] = (  # run by their parent's handler: the benchmarks package dispatches on bench_kind
    Command("ingest", "messages/s with and without embeddings", args=(
        Arg("--messages", type=int, default=20_000), Arg("--embedded-messages", type=int, default=2_000),
        BENCH_OUT)),
    Command("event", "adapter event ingest p50/p95 and command ack under a slow model", args=(
        Arg("--events", type=int, default=300), Arg("--model-seconds", type=float, default=5.0),
        Arg("--acks", type=int, default=10), BENCH_OUT)),
    Command("load", "sustained traffic with questions and writer windows: zero loss, latency, RSS", args=(
        Arg("--rate", "messages per second over all channels", type=float, default=50.0),
        Arg("--seconds", type=float, default=600.0),
        Arg("--channels", type=int, default=8),
        Arg("--ask-every", "seconds between questions", type=float, default=5.0),
        Arg("--no-model", "answer from evidence; write with a scripted model", type=bool),
        Arg("--writer-model-seconds", "with --no-model: seconds the scripted writer model takes per window",
            type=float, default=0.0),
        BENCH_OUT)),
    Command("writer", "writer messages/min and tokens/s vs raw llama.cpp on the same model", args=(
        Arg("--windows", type=int, default=3), BENCH_OUT)),
    Command("answer", "answer path latency without generation at 10k/100k messages", args=(
        Arg("--sizes", default="10000,100000"), Arg("--queries", type=int, default=200),
        Arg("--generate", "also time N full answers with the model", type=int, default=5), BENCH_OUT)),
    Command("catchup", "a member's digest over the last week of a big store vs reading that week", args=(
        Arg("--sizes", default="100000"), Arg("--queries", "digests timed (a different member each)", type=int,
                                              default=50), BENCH_OUT)),
    Command("search", "hybrid search latency vs numpy and rank-bm25", args=(
        Arg("--sizes", default="10000,100000"), Arg("--queries", type=int, default=100), BENCH_OUT)),
    Command("analysis", "the analysis pass alone: messages/s with the linear act and link models and with the "
                        "encoder's heads, on the same chats in one run", args=(
        Arg("--chats", "training chats to analyse (each a channel, about 300 messages each)", type=int, default=6),
        Arg("--encoder", "folder holding a candidate encoder with analysis heads (default: the shipped one)"),
        Arg("--batch", "messages per analysis batch (the bot's is 64)", type=int, default=64), BENCH_OUT)),
    Command("scopes", "BM25, ingest and open time with many scopes (one FTS5 table each) vs one scope", args=(
        Arg("--messages", type=int, default=100_000), Arg("--scopes", "small scopes beside the big one", type=int,
                                                          default=200),
        Arg("--queries", type=int, default=100), BENCH_OUT)),
)

TRAIN: tuple[CliCommand, ...] = (
    Command("reranker", "fit the reply's reranker and decline leave-one-dataset-out, print the held-out table, "
                        "and write the shipped models", eval_commands.train_reranker, (
        Arg("--out", "folder for the examples cache, the held-out models and the report", default="out/train"),
        Arg("--models", "where the shipped models are written (default: memory/query/models)"),
        Arg("--no-locomo", "skip LoCoMo (held out only; it is never trained on)", type=bool),
        Arg("--limit", "only the first N conversations of each dataset (a quick check)", type=int))),
    Command("answer", "fine-tune the reader (which message answers, its words, when none does) leave-one-dataset-"
                      "out and on everything, report held out, write the shipped encoder (needs the train extra; "
                      "hours on a CPU, resumable)", eval_commands.train_answer, (
        Arg("--out", "folder for the runs (checkpoints, logs, reports)", default="out/reader/runs"),
        Arg("--models", "where the shipped encoder is written", default="memory/models"),
        Arg("--run", "only this run (without-friendsqa, without-socialmem, all, or a run continued from it: "
                     "evaluation/reader_train.py RUNS lists them all)"),
        Arg("--epochs", "epochs instead of the run's own (4 from MiniLM; 1 for a run continued from another, "
                        "unless reader_train.PASSES says otherwise)", type=float),
        Arg("--evaluate-only", "score finished runs and write the shipped files, train nothing", type=bool))),
    Command("heads", "train the encoder's act and link heads (after `train answer`), choose their constants on "
                     "held-apart chats, rebuild the shipped encoder with them (needs the train extra)",
            eval_commands.train_heads, (
        Arg("--reader", "the reader run the heads sit on", default="out/reader/runs/all"),
        Arg("--out", "folder for the run (rows cache, checkpoints, log)", default="out/reader/heads"),
        Arg("--models", "where the shipped encoder is written", default="memory/models"),
        Arg("--epochs", type=float, default=3.0),
        Arg("--evaluate-only", "choose constants and ship from a finished run", type=bool))),
    Command("acts", "fit the analysis pass's act and link models on the labelled training chats, report them "
                    "leave-chats-out, write the model files", eval_commands.train_acts, (
        Arg("--data", "labelled training chats (folder or file)", default="evaluation/data/train"),
        Arg("--models", "folder the model files are written to", default="memory/models"),
        Arg("--no-validation", "fit the shipped models only (no leave-chats-out report)", type=bool),
        Arg("--out", "folder for the validation report", default="out/train"))),
)

CLI_COMMANDS: tuple[CliCommand, ...] = (
    Command("console", "terminal group chat with the bot (the embedded default)", commands.console, (
        Arg("--channel", default="general"),
        Arg("--no-demo", "do not preload the demo conversation", type=bool))),
    Command("ingest", "import a transcript (jsonl, locomo, socialmem, friendsqa)", commands.ingest, (
        Arg("file", required=True),
        Arg("--format", default="jsonl", choices=("jsonl", *DATASETS)),
        Arg("--no-embed", "store now, embed later with `chorus embed`", type=bool))),
    Command("embed", "embed messages imported without vectors", commands.embed),
    Command("analyse", "analyse messages waiting for it (entities, acts, links, the group state); the bot does this "
                       "in the background", commands.analyse, (
        Arg("--retry-failed", "first put back the messages the analysis could not read", type=bool),)),
    Command("reindex", "re-embed everything with the configured embedder (after changing it)", commands.reindex, (
        Arg("--force", "re-embed even if the store already uses this embedder", type=bool),)),
    Command("ask", "ask the bot a question about one channel, as a mention would", commands.ask, (
        Arg("question", required=True), SCOPE,
        Arg("--member", "ask as this member's platform user id (their 'I' and 'me', their catch-up)"))),
    Command("catchup", "what one member missed in one channel: a cited digest", commands.catchup, (
        SCOPE, Arg("--member", "the member's platform user id", required=True),
        Arg("--since", "since when: yesterday, Monday, 2026-03-02, 3d (default: the member's last message)"),
        Arg("--all", "every line, not the first 12", type=bool))),
    Command("whosaid", "who said an exact phrase in one channel", commands.whosaid,
            (Arg("phrase", required=True), SCOPE)),
    Command("write", "run pending writer windows now", commands.write, (
        Arg("--force", "also write sessions that are still open", type=bool),
        Arg("--max-windows", "stop after this many windows", type=int),
        Arg("--retry-quarantined", "retry one quarantined window", type=int, metavar="ID"))),
    Command("status", "what the store holds, writer lag per scope, quarantined windows", commands.status),
    Command("migrate", "apply pending schema migrations", commands.migrate_cmd),
    Command("scopes", "list channels with memory", commands.scopes),
    Command("config-example", "print the documented example configuration", commands.config_example),
    Command("doctor", "what the configured model supports, with a live smoke test of each prompt form",
            doctor.doctor),
    Command("inspect", "browse the store read-only in Datasette: what is remembered about whom, from which message, "
                       "update chains, writer rejections", commands.inspect_cmd, (
        Arg("--store", "store file (default: --db or [store].path)"),
        Arg("--host", "address to listen on (default: this machine only)", default="127.0.0.1"),
        Arg("--port", type=int, default=8001),
        Arg("--token-env", "require the operator token held in this environment variable", metavar="VAR"))),
    Command("eval", "evaluate on real conversation data", subcommands=EVAL, sub_dest="eval_kind"),
    Command("train", "rebuild the learned models from the dev data", subcommands=TRAIN, sub_dest="train_kind"),
    Command("bench", "benchmarks that compare against a baseline in the same run", commands.bench_cmd,
            subcommands=BENCH, sub_dest="bench_kind"),
    Command("run", "connect the configured Discord / Slack adapters and serve until stopped", platform_cli.run_cmd),
    Command("backfill", "import channel history on request (oldest first, resumable; never automatic by default)",
            platform_cli.backfill_cmd, (
        Arg("--platform", "only this platform (default: every enabled one)", choices=("discord", "slack")),
        Arg("--channel", "only this channel id (repeatable)", repeat=True),
        Arg("--guild", "Discord: only this guild id (repeatable)", repeat=True),
        Arg("--max-pages", "stop each channel after N pages (resume later)", type=int),
        Arg("--days", "only store messages from the last N days (default: the whole history)", type=float))),
    Command("discord-sync", "publish the slash commands to Discord (run after upgrades)",
            platform_cli.discord_sync_cmd, (
        Arg("--guild", "sync to one guild only (instant, for testing) instead of globally"),)),
    Command("forget", "forget every message of one user in a workspace", platform_cli.forget_cmd,
            (*WHO, Arg("--yes", "do not ask for confirmation", type=bool))),
    Command("export", "write everything kept by or about one user as JSON", platform_cli.export_cmd,
            (*WHO, Arg("--out", "file to write (default: standard output)"))),
)

# The handler of each top-level subcommand, by name.
COMMANDS: dict[str, CliHandler] = {c.name: c.handler for c in CLI_COMMANDS if c.handler is not None}


def add_argument(parser: argparse.ArgumentParser, arg: Arg) -> None:
    """One table argument as an argparse argument."""
    kw: dict[str, Any] = {"help": arg.help} if arg.help else {}
    if arg.type is bool:
        kw["action"] = "store_true"
    elif arg.repeat:
        kw.update(action="append", default=[])
    else:
        if arg.type is not str:
            kw["type"] = arg.type
        if arg.default is not None:
            kw["default"] = arg.default
    if arg.choices:
        kw["choices"] = list(arg.choices)
    if arg.metavar:
        kw["metavar"] = arg.metavar
    if arg.required and arg.name.startswith("-"):
        kw["required"] = True
    parser.add_argument(arg.name, **kw)


def add_commands(parser: argparse.ArgumentParser, table: tuple[CliCommand, ...], dest: str,
                 inherited: CliHandler | None = None) -> None:
    """The table's commands as required subcommands of ``parser``; each parser knows its handler."""
    sub = parser.add_subparsers(dest=dest, required=True)
    for cmd in table:
        p = sub.add_parser(cmd.name, help=cmd.help)
        for arg in cmd.args:
            add_argument(p, arg)
        handler = cmd.handler or inherited
        if cmd.subcommands:
            add_commands(p, cmd.subcommands, cmd.sub_dest, handler)
        elif handler is not None:
            p.set_defaults(handler=handler)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chorus", description="Chorus: a self-hosted memory bot for group chats.")
    p.add_argument("--config", help="config TOML (default: $CHORUS_CONFIG or ./config.toml)")
    p.add_argument("--db", help="store file, overriding [store].path")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_commands(p, CLI_COMMANDS, "command")
    return p


def short_help() -> str:
    """What bare `chorus` prints: one line per command, no argparse error."""
    lines = ["usage: chorus [--config FILE] [--db FILE] [-v] COMMAND ...", "",
             "Chorus: a self-hosted memory bot for group chats. Commands:"]
    lines += [f"  {c.name:<15} {c.help}" for c in CLI_COMMANDS]
    lines += ["", "Start with `chorus console` (a terminal group chat). `chorus COMMAND --help` shows a command's "
              "options; `chorus status` shows which store file is in use."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(short_help())
        return 0
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        if args.db:
            settings.use_store(args.db)
    except ChorusError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else getattr(logging, settings.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.handler(args, settings)
    except ChorusError as exc:
        log.debug("command failed", exc_info=True)
        print(f"chorus: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("chorus: interrupted", file=sys.stderr)
        return 130
