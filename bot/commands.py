"""The ``chorus`` subcommands that work on the store and the bot (the table in ``bot.cli`` names them).

Each takes the parsed arguments and the settings and returns the exit status.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tqdm import tqdm

from memory.datasets import load_dataset
from memory.errors import ChorusError
from memory.models import ScopeKey
from memory.store import Store

from .app import Bot, load_embedder_from, parse_scope
from .config import Settings, example_toml


def open_store(settings: Settings, *, embed: bool = True) -> Store:
    embedder = load_embedder_from(settings) if embed else None
    return Store(Path(settings.store.path).expanduser(), embedder=embedder,
                 idle_gap_s=settings.store.idle_gap_minutes * 60)


def console(args: argparse.Namespace, settings: Settings) -> int:
    from adapters.console import ConsoleChat

    from .scheduler import WriterScheduler

    log_path = console_logs_to_file(settings)
    bot = Bot(settings)
    scheduler = WriterScheduler(bot.writer, settings.writer.interval_seconds) if settings.writer.enabled else None
    try:
        chat = ConsoleChat(bot, stdout=private_stdout(), channel=args.channel)
        chat.say(f"({settings.store_line()}; logs go to {log_path})")
        if settings.console.demo and not args.no_demo:
            n = chat.load_demo()
            if n:
                chat.say(f"(loaded a {n}-message demo conversation into #{args.channel}; try "
                         f"“@{settings.console.bot_name} where are we having dinner?”)")
        if scheduler is not None:
            scheduler.start()  # the writer turns the chat into memory in the background
        return chat.run()
    finally:
        if scheduler is not None:
            scheduler.stop()
        bot.close()


def private_stdout():
    """The chat's own handle on the terminal.

    llama-cpp-python silences a model load by pointing the process's fd 1 and 2 at /dev/null for a
    moment; the writer loads its model in a background thread, so a reply printed then would vanish.
    """
    try:
        return open(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1, closefd=True)
    except (OSError, ValueError):  # no real stdout (embedded use)
        return sys.stdout


def console_logs_to_file(settings: Settings) -> Path:
    """Send every log line, and anything native code prints to stderr (llama.cpp), to a file.

    The console is a chat on the terminal: a log line there would read as part of the conversation.
    """
    store = Path(settings.store.path).expanduser()
    path = Path(settings.console.log_file).expanduser() if settings.console.log_file else store.with_suffix(".log")
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", encoding="utf-8", buffering=1)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    try:
        sys.stderr.flush()
        os.dup2(stream.fileno(), 2)  # native libraries write to fd 2 directly
    except OSError:  # no real fd 2 (embedded use): Python logging still goes to the file
        pass
    sys.stderr = stream
    return path


def ingest(args: argparse.Namespace, settings: Settings) -> int:
    conversations = load_dataset(args.format, args.file)
    messages = [m for c in conversations for m in c.messages]
    # Through the bot's one door: the same privacy gate (paused, opted-out members and channels) as live messages.
    with Bot(settings, store=open_store(settings, embed=not args.no_embed), load_models=False) as bot:
        with tqdm(total=len(messages), desc="ingest", unit="msg", file=sys.stderr) as bar:
            result = bot.remember(messages, embed=not args.no_embed, batch_size=256, progress=bar.update)
        left = bot.door.close(timeout_s=60.0)
    print(f"imported {result.stored} messages ({result.duplicates} already stored, {result.refused} not remembered "
          f"by privacy settings, {result.embedded} embedded) into {settings.store.path}"
          + (f"; {left} could not be stored (the store refused writes), run it again" if left else ""))
    return 0 if not left else 1


def embed(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings)
    try:
        with tqdm(total=store.pending_embeddings(), desc="embed", unit="msg", file=sys.stderr) as bar:
            done = store.embed_pending(progress=bar.update)
    finally:
        store.close()
    print(f"embedded {done} messages")
    return 0


def analyse(args: argparse.Namespace, settings: Settings) -> int:
    """Work through the analysis backlog now (embedding first what it needs), with progress."""
    with Bot(settings, store=open_store(settings), load_models=False) as bot:
        if args.retry_failed:
            print(f"{bot.store.retry_failed_analysis()} message(s) put back in the analysis backlog", file=sys.stderr)
        analysis = bot.analysis
        if analysis is None:
            raise ChorusError(f"the analysis pass is {bot.status().data['analysis'] or 'unavailable'}")
        if bot.store.pending_embeddings():
            with tqdm(total=bot.store.pending_embeddings(), desc="embed", unit="msg", file=sys.stderr) as bar:
                bot.store.embed_pending(progress=bar.update)
        with tqdm(total=bot.store.pending_analysis(), desc="analyse", unit="msg", file=sys.stderr) as bar:
            done = analysis.run(progress=bar.update)
        failed = bot.store.failed_analysis()
    print(f"analysed {done} messages" + (f"; {failed} could not be read (see the log)" if failed else ""))
    return 0


def reindex(args: argparse.Namespace, settings: Settings) -> int:
    """Re-embed every message and record with the configured embedder (after changing `embeddings.*`)."""
    from memory.records import Records

    embedder = load_embedder_from(settings)
    store = Store(Path(settings.store.path).expanduser(), idle_gap_s=settings.store.idle_gap_minutes * 60)
    try:
        if args.force or not store.use_embedder(embedder):
            store.reset_vectors(embedder)  # one transaction: old vectors out, every message back in the backlog
            print(f"dropped the old vectors; re-embedding with {embedder.name}", file=sys.stderr)
        with tqdm(total=store.pending_embeddings(), desc="reindex messages", unit="msg", file=sys.stderr) as bar:
            messages = store.embed_pending(progress=bar.update)
        with tqdm(desc="reindex records", unit="record", file=sys.stderr) as bar:
            records = Records(store).embed_missing(progress=bar.update)
    finally:
        store.close()
    print(f"embedded {messages} messages and {records} records with {embedder.name}; interrupted runs resume "
          "where they stopped")
    return 0


def chosen_scope(bot: Bot, scope: str | None) -> ScopeKey | None:
    """``--scope`` as given; without it the store's only channel, else None after listing the choices."""
    if scope:
        return parse_scope(scope)
    found = bot.store.scopes()
    if len(found) == 1:
        s = found[0]
        return ScopeKey(s.platform, s.workspace, s.channel)
    if not found:
        raise ChorusError(f"no channel has memory yet in {bot.store.path}; chat in `chorus console`, "
                          "`chorus ingest` a transcript, or check --config / --db")
    print(f"This store holds {len(found)} channels; say which one with --scope:", file=sys.stderr)
    for s in found:
        print(f"  --scope {s.platform}:{s.workspace}:{s.channel}"
              f"{f'  (#{s.name})' if s.name else ''}", file=sys.stderr)
    return None


def ask(args: argparse.Namespace, settings: Settings) -> int:
    """The reply a mention with the same text gets: the same command path (``Actions.ask``), asked by
    ``--member`` (their "I" and "me", their catch-up) or by the operator."""
    from .actions import Actions, Invoker

    with Bot(settings) as bot:
        key = chosen_scope(bot, args.scope)
        if key is None:
            return 2
        member = args.member or ""
        name = next((p.display_name for sid in bot.scope_ids(key) for p in bot.store.roster(sid)
                     if p.person_id == member), member)
        print(Actions(bot).ask(Invoker(key, member or "operator", name, is_admin=True,
                                       channel_name=key.channel), args.question).text)
    return 0


def catchup(args: argparse.Namespace, settings: Settings) -> int:
    """One member's catch-up digest of a channel, printed (the same digest `/catchup` shows)."""
    from .catchup import Catchup

    with Bot(settings, load_models=False) as bot:
        key = chosen_scope(bot, args.scope)
        if key is None:
            return 2
        print(Catchup(bot).reply(key, args.member, "", args.since or "", show_all=args.all,
                                 where=f"#{key.channel}").text)
    return 0


def whosaid(args: argparse.Namespace, settings: Settings) -> int:
    with Bot(settings, load_models=False) as bot:
        key = chosen_scope(bot, args.scope)
        if key is None:
            return 2
        print(bot.whosaid(key, args.phrase).text)
    return 0


def write(args: argparse.Namespace, settings: Settings) -> int:
    with Bot(settings) as bot:
        writer = bot.writer()
        if writer is None:
            raise ChorusError(f"the language model could not be loaded: {bot.llm_error}")
        if args.retry_quarantined is not None:
            res = writer.retry_quarantined(args.retry_quarantined)
            print(f"window {args.retry_quarantined}: {res.status} ({res.accepted} records, {res.error or 'ok'})")
            return 0 if res.status == "committed" else 1
        total = sum(lag.pending_messages for lag in writer.lag())
        with tqdm(total=total, desc="write", unit="msg", file=sys.stderr) as bar:
            def tick(res) -> None:
                bar.update(res.n_messages)
                bar.set_postfix(records=res.accepted, status=res.status)
            results = writer.run_pending(force=args.force, max_windows=args.max_windows, progress=tick)
        ok = sum(r.status == "committed" for r in results)
        print(f"{len(results)} windows: {ok} committed, {len(results) - ok} failed; "
              f"{sum(r.accepted for r in results)} records added, {sum(r.rejected for r in results)} rejected")
        return 0


def status(args: argparse.Namespace, settings: Settings) -> int:
    with Bot(settings, load_models=False) as bot:
        print(settings.store_line())
        print(bot.status().text)
        writer = bot.read_only_writer()
        print("\nwriter lag per scope:")
        for lag in writer.lag():
            print(f"  {lag.label}: {lag.pending_messages} messages pending, {bot.records.count(lag.scope_id)} "
                  f"records, {lag.quarantined} quarantined window(s)"
                  + (f", last error: {lag.last_error}" if lag.last_error else ""))
        for q in writer.quarantined():
            print(f"  quarantined #{q['id']}: scope {q['scope_id']} messages {q['first_message_id']}-"
                  f"{q['last_message_id']} failed {q['failures']}x: {q['last_error']}  "
                  f"(retry: chorus write --retry-quarantined {q['id']})")
        speed = writer.speed()
        print(f"model speed (last {speed['windows']} windows): {speed['gen_tokens_per_s']} tokens/s, "
              f"{speed['messages_per_min']} messages/min")
    return 0


def scopes(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, embed=False)
    try:
        for s in store.scopes():
            print(f"{s.platform}:{s.workspace}:{s.channel}\t{store.count_messages(s.id)} messages"
                  f"{'  (opted out)' if s.opted_out else ''}")
    finally:
        store.close()
    return 0


def migrate_cmd(args: argparse.Namespace, settings: Settings) -> int:
    from memory import migrate
    from memory.db import connect

    conn = connect(Path(settings.store.path).expanduser())
    try:
        ran = migrate.migrate(conn)
    finally:
        conn.close()
    print("applied: " + (", ".join(ran) if ran else "nothing (already at the latest schema)"))
    return 0


def bench_cmd(args: argparse.Namespace, settings: Settings) -> int:
    """``chorus bench KIND``: the benchmarks package runs the chosen kind."""
    from benchmarks import run_bench

    return run_bench(args, settings)


def config_example(args: argparse.Namespace, settings: Settings) -> int:
    sys.stdout.write(example_toml())
    return 0


def inspect_cmd(args: argparse.Namespace, settings: Settings) -> int:
    from .inspect import serve

    return serve(Path(args.store or settings.store.path).expanduser(), host=args.host, port=args.port,
                 token_env=args.token_env)
