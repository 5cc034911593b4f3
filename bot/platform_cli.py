"""CLI for the chat platforms: ``chorus run``, ``backfill``, ``discord-sync``, ``forget``, ``export``.

The table in ``bot.cli`` names these subcommands and their arguments. Platform
libraries are imported only when a platform command runs.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from memory import privacy
from memory.errors import ChorusError, ConfigError

from .actions import Actions, describe_history_import
from .app import Bot
from .config import Settings

log = logging.getLogger("chorus.run")


# ---------------------------------------------------------------------- logging without secrets
class RedactSecrets(logging.Filter):
    """Replaces any configured secret that reaches a log line (libraries log URLs and headers)."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 8]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            text = record.getMessage()
            if any(s in text for s in self.secrets):
                for s in self.secrets:
                    text = text.replace(s, "[redacted]")
                record.msg, record.args = text, None
            # Tracebacks too: an exception message may quote a token (formatters reuse exc_text).
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            for attr in ("exc_text", "stack_info"):
                value = getattr(record, attr, None)
                if value and any(s in value for s in self.secrets):
                    for s in self.secrets:
                        value = value.replace(s, "[redacted]")
                    setattr(record, attr, value)
        return True


def redact(secrets: list[str]) -> None:
    root = logging.getLogger()
    for handler in root.handlers or [logging.lastResort]:
        if handler is not None:
            handler.addFilter(RedactSecrets(secrets))


# ---------------------------------------------------------------------- building blocks
def _slack_adapter(settings: Settings, actions: Actions, *, http: bool) -> Any:
    from slack_sdk import WebClient

    from adapters.slack import SlackAdapter

    cfg = settings.slack
    client = WebClient(token=settings.secret(cfg.bot_token_env))
    return SlackAdapter(actions, client, signing_secret=settings.secret(cfg.signing_secret_env) if http else None,
                        command=cfg.command,
                        ignore_other_bots=cfg.ignore_other_bots,
                        backfill_on_join=cfg.backfill_on_join)


def _discord_adapter(settings: Settings, actions: Actions) -> Any:
    from adapters.discord import DiscordAdapter

    cfg = settings.discord
    return DiscordAdapter(actions, ignore_other_bots=cfg.ignore_other_bots,
                          backfill_on_join=cfg.backfill_on_join)


def _secrets(settings: Settings) -> list[str]:
    import os

    names = [settings.discord.token_env, settings.slack.bot_token_env, settings.slack.app_token_env,
             settings.slack.signing_secret_env, settings.llm.api_key_env]
    return [os.environ.get(n, "") for n in names if n]


def _progress(label: str, result: Any) -> None:
    print(f"backfill {label}: {result.fetched} fetched, {result.imported} imported, "
          f"{result.duplicates} already stored", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- chorus run
async def serve(settings: Settings, bot: Bot, actions: Actions) -> int:
    """Run every enabled adapter until SIGTERM/SIGINT, then stop them and let work in flight finish."""
    if not (settings.discord.enabled or settings.slack.enabled):
        raise ConfigError("no chat platform is enabled: set [discord] enabled = true or [slack] enabled = true "
                          "(or use `chorus console`)")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread / not POSIX
            pass
    slack = discord_adapter = http_runner = digests = None
    waiters: list[asyncio.Task] = [asyncio.create_task(stop.wait())]
    try:
        if settings.slack.enabled:
            http = settings.slack.mode == "http"
            try:
                slack = _slack_adapter(settings, actions, http=http)
                if http:
                    http_runner = await slack.start_http(port=settings.slack.port)
                else:
                    app_token = settings.secret(settings.slack.app_token_env)
                    await asyncio.to_thread(slack.start_socket_mode, app_token)
            except ChorusError:
                raise
            except Exception as exc:  # slack_sdk / bolt / socket errors: say what failed, not a traceback
                log.debug("slack start failed", exc_info=True)
                raise ChorusError(f"could not start the Slack adapter ({settings.slack.mode} mode): {exc}") from exc
            log.info("slack adapter running (%s mode)", settings.slack.mode)
        if settings.discord.enabled:
            discord_adapter = _discord_adapter(settings, actions)
            token = settings.secret(settings.discord.token_env)
            waiters.append(asyncio.create_task(discord_adapter.client.start(token)))
            log.info("discord adapter starting")
        if settings.catchup.schedules:
            from .catchup_scheduler import DigestScheduler

            deliverers = {name: a for name, a in (("slack", slack), ("discord", discord_adapter)) if a is not None}
            digests = DigestScheduler(bot, deliverers)
            digests.start()
            log.info("catch-up digests scheduled for %d channel(s)", len(digests.schedules))
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None:
                raise ChorusError(f"a platform connection failed: {task.exception()}")
        log.info("stopping: finishing work in flight")
        return 0
    finally:
        if digests is not None:
            await asyncio.to_thread(digests.stop)  # a digest being sent finishes and is recorded first
        if discord_adapter is not None:
            await discord_adapter.close()
            await asyncio.to_thread(discord_adapter.fast.shutdown, True)
            await asyncio.to_thread(lambda: discord_adapter.slow.shutdown(wait=True, cancel_futures=True))
        if http_runner is not None:
            await http_runner.cleanup()
        if slack is not None:
            await asyncio.to_thread(slack.close)
        for task in waiters:
            task.cancel()


def run_cmd(args: argparse.Namespace, settings: Settings) -> int:
    redact(_secrets(settings))
    bot = Bot(settings)  # the Bot also wires Track 2 to deletions and forgetting
    actions = Actions(bot)
    scheduler = None
    try:
        if settings.writer.enabled:
            from .scheduler import WriterScheduler

            scheduler = WriterScheduler(bot.writer, settings.writer.interval_seconds)
            scheduler.start()
            log.info("writer scheduled every %d s", settings.writer.interval_seconds)
        return asyncio.run(serve(settings, bot, actions))
    finally:
        if scheduler is not None:
            scheduler.stop()  # lets a window in progress commit (or roll back) first
        bot.close()  # waits for the store lock, so the transaction in progress completes first
        log.info("stopped cleanly")


# ---------------------------------------------------------------------- chorus backfill
async def _discord_backfill(settings: Settings, actions: Actions, args: argparse.Namespace) -> int:
    import discord

    adapter = _discord_adapter(settings, actions)
    try:
        await adapter.client.login(settings.secret(settings.discord.token_env))
        async for guild in adapter.client.fetch_guilds(limit=None):
            if args.guild and str(guild.id) not in args.guild:
                continue
            result = await adapter.backfill_guild(guild, progress=_progress, over_rest=True,
                                                  only=set(args.channel) or None, max_pages=args.max_pages,
                                                  since=_since(args))
            print(f"discord guild {guild.id}: {result.summary()}")
        return 0
    except discord.LoginFailure as exc:
        raise ConfigError(f"Discord rejected the token in ${settings.discord.token_env}: {exc}") from exc
    finally:
        await adapter.close()


def _since(args: argparse.Namespace) -> float | None:
    days = getattr(args, "days", None)
    if days is not None and not days > 0:
        raise ConfigError("--days must be a number above 0")
    return None if days is None else time.time() - days * 86400


def backfill_cmd(args: argparse.Namespace, settings: Settings) -> int:
    redact(_secrets(settings))
    platforms = [args.platform] if args.platform else [p for p in ("discord", "slack")
                                                       if getattr(settings, p).enabled]
    if not platforms:
        raise ConfigError("no platform to backfill: enable one in the config or pass --platform")
    where = ("channel(s) " + ", ".join(args.channel) if args.channel
             else "every channel the bot can read") + f" on {' and '.join(platforms)}"
    print(describe_history_import(where, _since(args), background=False), file=sys.stderr, flush=True)
    with Bot(settings) as bot:
        actions = Actions(bot)
        if "slack" in platforms:
            slack = _slack_adapter(settings, actions, http=False)
            try:
                team = slack.client.auth_test()["team_id"]
                channels = [c for c in slack.list_channels() if not args.channel or c[0] in args.channel]
                result = slack.backfill(team, channels, progress=_progress, max_pages=args.max_pages,
                                        since=_since(args))
                print(f"slack {team}: {result.summary()}")
            finally:
                slack.close()
        if "discord" in platforms:
            asyncio.run(_discord_backfill(settings, actions, args))
        return 0


# ---------------------------------------------------------------------- chorus discord-sync
def discord_sync_cmd(args: argparse.Namespace, settings: Settings) -> int:
    redact(_secrets(settings))

    async def sync() -> list[str]:
        import discord

        bot = Bot(settings, load_models=False)
        adapter = _discord_adapter(settings, Actions(bot))
        try:
            await adapter.client.login(settings.secret(settings.discord.token_env))
            tree = adapter.client.tree
            guild = discord.Object(id=int(args.guild)) if args.guild else None
            if guild is not None:
                tree.copy_global_to(guild=guild)
            return [c.name for c in await tree.sync(guild=guild)]
        finally:
            await adapter.close()
            bot.close()

    names = asyncio.run(sync())
    print(f"synced {len(names)} command(s) {'to guild ' + args.guild if args.guild else 'globally'}: "
          + ", ".join(sorted(names)))
    return 0


# ---------------------------------------------------------------------- chorus forget / export
def forget_cmd(args: argparse.Namespace, settings: Settings) -> int:
    with Bot(settings, load_models=False) as bot:
        n = len(privacy.user_message_ids(bot.store, args.platform, args.workspace, args.user))
        if not args.yes:
            if not sys.stdin.isatty():
                raise ChorusError("forgetting cannot be undone: pass --yes to confirm")
            answer = input(f"Forget {n} message(s) of {args.user} in {args.platform}:{args.workspace}? Type yes: ")
            if answer.strip().lower() != "yes":
                print("nothing forgotten")
                return 1
        report = privacy.forget_user(bot.store, args.platform, args.workspace, args.user)
        print(report.summary())
        return 0


def export_cmd(args: argparse.Namespace, settings: Settings) -> int:
    with Bot(settings, load_models=False) as bot:
        data = privacy.export_user(bot.store, args.platform, args.workspace, args.user)
    text = json.dumps(data, ensure_ascii=False, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", "utf-8")
        print(f"wrote {len(data['messages'])} message(s) and {len(data['records'])} record(s) to {args.out}")
    else:
        print(text)
    return 0
