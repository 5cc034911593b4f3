"""CLI subcommand implementations (registered into ``bot.cli.COMMANDS``)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tqdm import tqdm

from memory.datasets import load_dataset
from memory.errors import ChorusError
from memory.eval.plots import write_report_plot
from memory.store import Store

from .app import Bot, load_embedder_from, parse_scope, persona_of, writer_config
from .cli import command
from .config import Settings


def open_store(settings: Settings, *, embed: bool = True) -> Store:
    embedder = load_embedder_from(settings) if embed else None
    return Store(Path(settings.store.path).expanduser(), embedder=embedder,
                 idle_gap_s=settings.store.idle_gap_minutes * 60)


@command("console")
def console(args: argparse.Namespace, settings: Settings) -> int:
    from adapters.console import ConsoleChat

    from .scheduler import WriterScheduler

    log_path = console_logs_to_file(settings)
    bot = Bot(settings)
    scheduler = WriterScheduler(bot.writer, settings.writer.interval_seconds) if settings.writer.enabled else None
    try:
        chat = ConsoleChat(bot, stdout=private_stdout(), channel=args.channel)
        chat.say(f"(logs go to {log_path})")
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


@command("ingest")
def ingest(args: argparse.Namespace, settings: Settings) -> int:
    conversations = load_dataset(args.format, args.file)
    messages = [m for c in conversations for m in c.messages]
    store = open_store(settings, embed=not args.no_embed)
    try:
        with tqdm(total=len(messages), desc="ingest", unit="msg", file=sys.stderr) as bar:
            result = store.ingest(messages, embed=not args.no_embed, batch_size=256, progress=bar.update)
    finally:
        store.close()
    print(f"imported {result.inserted} messages ({result.duplicates} already stored, {result.skipped} from "
          f"opted-out channels, {result.embedded} embedded) into {settings.store.path}")
    return 0


@command("embed")
def embed(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings)
    try:
        with tqdm(total=store.pending_embeddings(), desc="embed", unit="msg", file=sys.stderr) as bar:
            done = store.embed_pending(progress=bar.update)
    finally:
        store.close()
    print(f"embedded {done} messages")
    return 0


@command("reindex")
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


@command("ask")
def ask(args: argparse.Namespace, settings: Settings) -> int:
    bot = Bot(settings)
    try:
        print(bot.ask(parse_scope(args.scope), args.question).text)
    finally:
        bot.close()
    return 0


@command("whosaid")
def whosaid(args: argparse.Namespace, settings: Settings) -> int:
    bot = Bot(settings, load_models=False)
    try:
        print(bot.whosaid(parse_scope(args.scope), args.phrase).text)
    finally:
        bot.close()
    return 0


@command("write")
def write(args: argparse.Namespace, settings: Settings) -> int:
    bot = Bot(settings)
    try:
        writer = bot.writer()
        if writer is None:
            raise ChorusError(f"the language model could not be loaded: {bot._llm_error}")
        if args.retry_quarantined is not None:
            res = writer.retry_quarantined(args.retry_quarantined)
            print(f"window {args.retry_quarantined}: {res.status} ({res.accepted} records, {res.error or 'ok'})")
            return 0 if res.status == "committed" else 1
        total = sum(l.pending_messages for l in writer.lag())
        with tqdm(total=total, desc="write", unit="msg", file=sys.stderr) as bar:
            def tick(res) -> None:
                bar.update(res.n_messages)
                bar.set_postfix(records=res.accepted, status=res.status)
            results = writer.run_pending(force=args.force, max_windows=args.max_windows, progress=tick)
        ok = sum(r.status == "committed" for r in results)
        print(f"{len(results)} windows: {ok} committed, {len(results) - ok} failed; "
              f"{sum(r.accepted for r in results)} records added, {sum(r.rejected for r in results)} rejected")
        return 0
    finally:
        bot.close()


@command("status")
def status(args: argparse.Namespace, settings: Settings) -> int:
    from memory.writer.writer import Writer

    bot = Bot(settings, load_models=False)
    try:
        print(bot.status().text)
        writer = Writer(bot.store, llm=None, records=bot.records)  # type: ignore[arg-type]  # read-only use
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
    finally:
        bot.close()
    return 0


@command("scopes")
def scopes(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, embed=False)
    try:
        for s in store.scopes():
            print(f"{s.platform}:{s.workspace}:{s.channel}\t{store.count_messages(s.id)} messages"
                  f"{'  (opted out)' if s.opted_out else ''}")
    finally:
        store.close()
    return 0


@command("migrate")
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


@command("eval")
def eval_cmd(args: argparse.Namespace, settings: Settings) -> int:
    if args.eval_kind == "retrieval" and args.lodo:
        from memory.eval.lodo import run_lodo

        return run_lodo(args, lambda: load_embedder_from(settings))
    if args.eval_kind == "retrieval":
        if not args.dataset:
            raise ChorusError("eval retrieval needs --dataset (or --lodo for all three)")
        from memory.eval.report import write_json
        from memory.eval.retrieval import FULL_SYSTEMS, TRACK1_SYSTEMS, evaluate_retrieval

        known = {**TRACK1_SYSTEMS, **FULL_SYSTEMS}
        wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise ChorusError(f"unknown systems {unknown}; choose from {', '.join(known)}")
        report = evaluate_retrieval(args.dataset, data=args.data, embedder=load_embedder_from(settings),
                                    limit_conversations=args.limit, systems={s: known[s] for s in wanted},
                                    store_dir=args.stores)
        md = report.to_markdown()
        out = Path(args.out)
        write_json(out / f"retrieval-{args.dataset}.json", report.to_json())
        (out / f"retrieval-{args.dataset}.md").write_text(md + "\n", "utf-8")
        print(md)
        print(f"\nwritten to {out}/retrieval-{args.dataset}.json and .md ({report.seconds:.0f} s)")
        print(write_report_plot("retrieval", out / f"retrieval-{args.dataset}.png", report.to_json()))
        return 0
    if args.eval_kind == "writer":
        from memory.eval.writer import evaluate_writer
        from memory.eval.writer_reference import score_stores, stores_in

        if args.store:
            if not args.reference or not Path(args.store).exists():
                raise ChorusError("--store needs an existing store (or folder of stores) and --reference")
            ref = score_stores(stores_in(args.store), args.reference, label=args.store)
            return _emit(args, f"writer-reference-{Path(args.store).stem}", ref.to_json(), ref.to_markdown())
        if not args.dataset:
            raise ChorusError("eval writer needs --dataset (or --store with --reference)")
        bot_llm = _require_llm(settings)
        report = evaluate_writer(args.dataset, data=args.data, embedder=load_embedder_from(settings), llm=bot_llm,
                                 config=writer_config(settings), persona=persona_of(settings),
                                 limit_conversations=args.limit, store_dir=args.stores, reference=args.reference)
        return _emit(args, f"writer-{args.dataset}", report.to_json(), report.to_markdown())
    if args.eval_kind == "answer" and args.lodo:
        from memory.eval.reply_lodo import run_reply_lodo

        own = args.own if args.own and Path(args.own).exists() else None
        data, md = run_reply_lodo(load_embedder_from(settings), own=own)
        return _emit(args, "answer-lodo", data, md)
    if args.eval_kind == "answer" and not args.dataset:
        raise ChorusError("eval answer needs --dataset (or --lodo for all three)")
    if args.eval_kind == "answer":
        from memory.eval.answer import POLICIES, evaluate_replies
        from memory.query.answer import PersonaVoice

        policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
        unknown = [p for p in policies if p not in POLICIES]
        if unknown or not policies:
            raise ChorusError(f"unknown policy {unknown}: choose from {', '.join(POLICIES)}")
        p = settings.persona
        llm = _require_llm(settings) if "model" in policies and args.model_questions > 0 else None
        report = evaluate_replies(args.dataset, data=args.data, embedder=load_embedder_from(settings), llm=llm,
                                  persona=PersonaVoice(p.name, p.description, p.voice, p.cares_about),
                                  policies=policies, limit_conversations=args.limit, max_questions=args.questions,
                                  model_questions=args.model_questions, store_dir=args.stores,
                                  decline_below=settings.answer.decline_below)
        name = f"answer-{args.dataset}" + (f"-{Path(args.data).stem}" if args.data else "")
        return _emit(args, name, report.to_json(), report.to_markdown(), plot="answer")
    if args.eval_kind == "speaker-levenshtein":
        from memory.speaker_levenshtein import MemRecord, speaker_levenshtein

        def load(path: str) -> list[MemRecord]:
            store = Store(path)
            try:
                with store.read() as conn:
                    rows = conn.execute("SELECT r.owner, r.content, r.layer, r.utype, r.source, r.session, r.ts "
                                        "FROM records r WHERE r.status = 'active' AND r.superseded_by IS NULL "
                                        "AND r.layer != 'persona_insight'").fetchall()
                    names = dict(conn.execute("SELECT person_id, display_name FROM people").fetchall())
            finally:
                store.close()
            return [MemRecord(names.get(r[0], r[0]), r[1], r[2], r[3], names.get(r[4], r[4]), r[5], r[6])
                    for r in rows]

        for path in (args.pred, args.ref):
            if not Path(path).exists():
                raise ChorusError(f"store {path} does not exist")
        res = speaker_levenshtein(load(args.pred), load(args.ref))
        print(f"SpeakerLevenshtein = {res.score:.4f} (pred {res.n_pred} records, ref {res.n_ref}, "
              f"matched {res.n_matched}; worst owner: {res.worst_owner})")
        for owner, score in sorted(res.per_owner.items(), key=lambda kv: kv[1]):
            print(f"  {owner}: {score:.4f}")
        return 0
    raise ChorusError(f"unknown evaluation {args.eval_kind}")


def _emit(args: argparse.Namespace, name: str, data: dict, md: str, plot: str | None = None) -> int:
    from memory.eval.report import write_json

    out = Path(args.out)
    write_json(out / f"{name}.json", data)
    (out / f"{name}.md").write_text(md + "\n", "utf-8")
    print(md)
    print(f"\nwritten to {out}/{name}.json and .md")
    if plot:
        print(write_report_plot(plot, out / f"{name}.png", data))
    return 0


def _require_llm(settings: Settings):
    from .app import load_llm_from

    return load_llm_from(settings)


@command("bench")
def bench_cmd(args: argparse.Namespace, settings: Settings) -> int:
    from benchmarks import run_bench

    return run_bench(args, settings)
