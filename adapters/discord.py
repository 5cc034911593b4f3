"""Discord adapter (discord.py 2.x gateway): translate messages and app commands, render replies.

Scopes: a guild channel is a scope; a thread belongs to its parent channel's scope
(its id goes in ``thread``); a DM is its own private scope in workspace ``@me``.
All bot work runs in worker threads so the gateway loop never waits on a model.
Commands are synced only by ``chorus discord-sync``, never at start.
"""
from __future__ import annotations

import asyncio
import dataclasses
import inspect
import io
import logging
import re
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Literal, Optional

import discord
from discord import app_commands

from bot.actions import Actions, Invoker, guarded
from bot.backfill import Backfiller, BackfillResult, Page
from bot.command_table import CHAT_COMMANDS, ChatCommand, Surface
from bot.errors import InputError
from bot.replies import Reply, split_for_chat
from memory.models import Message, ScopeKey

log = logging.getLogger(__name__)

PLATFORM = "discord"
DM_WORKSPACE = "@me"
MAX_CHARS = 2000
DEFER_AFTER_S = 1.0  # Discord drops an interaction not answered within 3 s; leave room for the network
_STORED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_LINK = re.compile(r"https?://(?:\w+\.)?discord(?:app)?\.com/channels/(@me|\d+)/(\d+)/(\d+)")


def message_link(workspace: str, channel: str, msg_id: str) -> str:
    return f"https://discord.com/channels/{workspace}/{channel}/{msg_id}"


def parse_link(text: str) -> tuple[str, str] | None:
    """(channel or thread id, message id) from a message link, or ('', id) from a bare id."""
    text = text.strip().strip("<>")
    m = _LINK.search(text)
    if m:
        return m.group(2), m.group(3)
    if text.isdigit():
        return "", text
    return None


# How a Discord user repeats `forget me` with its code, and what to say when no link was given.
DISCORD = Surface(parse_link=parse_link, forget_how="`/forget what:me confirm:{code}`",
                  link_hint="Give the message link (Copy Message Link) in `link`.")


def scope_of(channel: Any, guild_id: int | None) -> tuple[ScopeKey, str, str, bool]:
    """(scope key, thread id, channel name, is_dm) for a channel, thread or DM."""
    if guild_id is None:
        who = getattr(getattr(channel, "recipient", None), "name", "") or ""
        return ScopeKey(PLATFORM, DM_WORKSPACE, str(channel.id)), "", f"DM {who}".strip(), True
    parent_id = getattr(channel, "parent_id", None)
    if isinstance(channel, discord.Thread) or (parent_id and getattr(channel, "type", None) in (
            discord.ChannelType.public_thread, discord.ChannelType.private_thread,
            discord.ChannelType.news_thread)):
        parent = getattr(channel, "parent", None)
        return (ScopeKey(PLATFORM, str(guild_id), str(parent_id)), str(channel.id),
                getattr(parent, "name", "") or "", False)
    return ScopeKey(PLATFORM, str(guild_id), str(channel.id)), "", getattr(channel, "name", "") or "", False


def message_text(content: str, filenames: list[str]) -> str:
    """The text Chorus keeps: the content plus attachment names (so 'see photo.jpg' makes sense)."""
    names = [f"[attachment: {f}]" for f in filenames if f]
    return "\n".join([content, *names]).strip() if names else content


def to_model(message: discord.Message) -> Message | None:
    """A discord.py message as a Chorus ``Message`` (None for system messages and empty ones)."""
    if message.type not in _STORED_TYPES:
        return None
    text = message_text(message.content or "", [a.filename for a in message.attachments])
    if not text.strip():
        return None
    key, thread, name, is_dm = scope_of(message.channel, message.guild.id if message.guild else None)
    ref = message.reference.message_id if message.reference and message.reference.message_id else None
    return Message(PLATFORM, key.workspace, key.channel, str(message.id), str(message.author.id),
                   message.author.display_name, text, message.created_at.timestamp(), thread=thread,
                   reply_to=str(ref) if ref else None, is_dm=is_dm,
                   is_bot=bool(message.author.bot or message.webhook_id), channel_name=name)


class DiscordHistory:
    """One channel, thread or DM history for the backfiller (discord.py paces requests itself)."""

    def __init__(self, adapter: DiscordAdapter, channel: Any) -> None:
        guild = getattr(channel, "guild", None)
        self.key, thread, self.channel_name, self.is_dm = scope_of(channel, guild.id if guild else None)
        self.stream = thread
        self.channel = channel
        self.adapter = adapter
        self.label = f"discord {self.key.workspace}/#{self.channel_name or self.key.channel}" + (
            f" thread {thread}" if thread else "")

    async def fetch_after(self, after: str | None, limit: int) -> Page:
        kwargs: dict[str, Any] = {"limit": limit, "oldest_first": True}
        if after:
            kwargs["after"] = discord.Object(id=int(after))
        raw = [m async for m in self.channel.history(**kwargs)]
        raw.sort(key=lambda m: m.id)
        msgs = [m for m in (to_model(r) for r in raw if self.adapter.wanted(r)) if m is not None]
        return Page(msgs, str(raw[-1].id) if raw else after, more=len(raw) >= limit, fetched=len(raw))


class ChorusDiscordClient(discord.Client):
    """The gateway client: every event goes straight to the adapter."""

    def __init__(self, adapter: DiscordAdapter, **kwargs: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, **kwargs)
        self.adapter = adapter
        self.tree = app_commands.CommandTree(self)
        adapter.register_commands(self.tree)

    async def on_ready(self) -> None:
        log.info("discord connected as %s in %d guild(s)", self.user, len(self.guilds))

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self.adapter.on_raw_edit(payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self.adapter.on_raw_delete(payload.guild_id, payload.channel_id, [payload.message_id])

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self.adapter.on_raw_delete(payload.guild_id, payload.channel_id, sorted(payload.message_ids))

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        await self.adapter.on_thread_delete(payload.guild_id, payload.parent_id, payload.thread_id)

    async def on_guild_join(self, guild: discord.Guild) -> None:
        await self.adapter.on_guild_join(guild)


class DiscordAdapter:
    """Translates Discord events into ``Actions`` calls and renders the replies."""

    def __init__(self, actions: Actions, *, ignore_other_bots: bool = True, backfill_on_join: bool = False,
                 fast: Executor | None = None, slow: Executor | None = None,
                 defer_after_s: float = DEFER_AFTER_S, client_kwargs: dict | None = None) -> None:
        self.actions = actions
        self.ignore_other_bots = ignore_other_bots
        self.backfill_on_join = backfill_on_join
        self.defer_after_s = defer_after_s
        # Store-only work and model work get separate threads, so ingest never queues behind an answer.
        # One store thread: gateway events are separate tasks, and with two threads a message could be
        # stored after a later one (wrong turn order, and a question not seeing what was said just before).
        self.fast = fast or ThreadPoolExecutor(1, thread_name_prefix="chorus-discord-store")
        self.slow = slow or ThreadPoolExecutor(4, thread_name_prefix="chorus-discord-model")
        self.client = ChorusDiscordClient(self, **(client_kwargs or {}))
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the gateway's loop, seen by the first command
        actions.history_importers[PLATFORM] = self.import_history  # the admin `/backfill` command

    # ------------------------------------------------------------------ helpers
    @property
    def me(self) -> discord.ClientUser | None:
        return self.client.user

    def wanted(self, message: discord.Message) -> bool:
        """Never our own messages; other bots' only if configured."""
        if self.me is not None and message.author.id == self.me.id:
            return False
        if (message.author.bot or message.webhook_id) and self.ignore_other_bots:
            return False
        return True

    def addressed(self, message: discord.Message) -> bool:
        """An @mention of the bot (or its role); in a DM, any question."""
        if self.me is None:
            return False
        if self.me.id in message.raw_mentions:
            return True
        role = message.guild.self_role if message.guild else None
        if role is not None and role.id in message.raw_role_mentions:
            return True
        return message.guild is None and message.content.rstrip().endswith("?")

    def question_of(self, message: discord.Message) -> str:
        text = message.content
        if self.me is not None:
            text = re.sub(rf"<@!?{self.me.id}>", " ", text)
        role = message.guild.self_role if message.guild else None
        if role is not None:
            text = text.replace(f"<@&{role.id}>", " ")
        return " ".join(text.split())

    async def _call(self, executor: Executor, fn: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    def render(self, reply: Reply) -> list[str]:
        """Reply text plus source links, in pieces of at most 2,000 characters."""
        text = reply.text
        links = []
        for c in reply.citations:
            if c.platform != PLATFORM:
                continue
            stored = self.actions.store.find(ScopeKey(c.platform, c.workspace, c.channel), c.msg_id)
            channel = (stored.thread if stored and stored.thread else c.channel)
            links.append(f"[{c.n}](<{message_link(c.workspace, channel, c.msg_id)}>)")
        if links:
            text += "\nSources: " + " ".join(links)
        return split_for_chat(text, MAX_CHARS)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ gateway events
    async def on_message(self, message: discord.Message) -> None:
        try:
            if not self.wanted(message):
                return
            msg = to_model(message)
            if msg is None:
                return
            addressed = self.addressed(message)
            if addressed:  # a question to the bot is kept for the record, never used as evidence
                msg = dataclasses.replace(msg, to_bot=True)
            await self._call(self.fast, self.actions.remember, msg)
            if addressed:
                await self.answer(message, msg)
        except Exception:  # the event boundary: log and keep the gateway alive
            log.exception("discord message %s in channel %s failed", message.id, message.channel.id)

    async def answer(self, message: discord.Message, msg: Message) -> None:
        key = ScopeKey.of(msg)
        inv = Invoker(key, msg.author_id, msg.author_name, is_dm=msg.is_dm, channel_name=msg.channel_name)
        log.info("discord %s/%s: mention from %s", key.workspace, key.channel, msg.author_id)
        try:
            await message.channel.typing()  # "Chorus is typing..." while the model works (lasts 10 s)
        except discord.HTTPException:
            pass
        reply = await self._call(self.slow, guarded, "discord mention",
                                 lambda: self.actions.ask(inv, self.question_of(message), asked_in=msg))
        if (reply.dm or reply.ephemeral) and "catchup" in reply.data:
            # A mention cannot be answered privately in the channel: a private digest goes to the DMs.
            await self.send_dm(message.author, reply)
            reply = Reply("I sent your catch-up to you in a direct message.")
        chunks = await self._call(self.fast, self.render, reply)
        first = True
        for chunk in chunks:
            if first:
                await message.reply(chunk, mention_author=False)
                first = False
            else:
                await message.channel.send(chunk)

    async def on_raw_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        try:
            data = payload.data
            if "content" not in data:
                return  # embed-only updates do not change the text
            author = data.get("author") or {}
            if self.me is not None and str(author.get("id")) == str(self.me.id):
                return
            text = message_text(data.get("content") or "",
                                [str(a.get("filename", "")) for a in data.get("attachments", [])])
            edited = payload.message.edited_at if getattr(payload, "message", None) else None
            workspace = str(payload.guild_id) if payload.guild_id else DM_WORKSPACE
            changed = await self._call(self.fast, self.actions.edited, PLATFORM, workspace, str(payload.channel_id),
                                       str(payload.message_id), text, edited.timestamp() if edited else None)
            log.debug("discord %s/%s: edit of %s %s", workspace, payload.channel_id, payload.message_id,
                      "applied" if changed else "ignored (not remembered)")
        except Exception:  # the event boundary
            log.exception("discord edit of %s failed", payload.message_id)

    async def on_raw_delete(self, guild_id: int | None, channel_id: int, message_ids: list[int]) -> None:
        try:
            workspace = str(guild_id) if guild_id else DM_WORKSPACE
            n = await self._call(self.fast, self.actions.deleted, PLATFORM, workspace, str(channel_id),
                                 [str(i) for i in message_ids])
            log.info("discord %s/%s: %d of %d deleted message(s) forgotten", workspace, channel_id, n,
                     len(message_ids))
        except Exception:  # the event boundary
            log.exception("discord delete in channel %s failed", channel_id)

    async def on_thread_delete(self, guild_id: int, parent_id: int, thread_id: int) -> None:
        try:
            n = await self._call(self.fast, self.actions.thread_deleted, PLATFORM, str(guild_id), str(parent_id),
                                 str(thread_id))
            log.info("discord %s/%s: thread %s deleted (%d message(s) forgotten)", guild_id, parent_id, thread_id, n)
        except Exception:  # the event boundary
            log.exception("discord thread delete %s failed", thread_id)

    async def on_guild_join(self, guild: discord.Guild) -> None:
        log.info("discord: joined guild %s (%s)", guild.id, guild.name)
        if self.backfill_on_join:  # off by default: history is imported when an admin asks (`/backfill`)
            self._spawn(self.backfill_guild(guild))

    def import_history(self, inv: Invoker, since: float | None) -> None:
        """Start importing one channel's history (and its threads) in the background (`/backfill`)."""
        guild = self.client.get_guild(int(inv.key.workspace)) if inv.key.workspace.isdigit() else None
        if guild is None or self._loop is None:
            raise InputError("this server is not in my gateway cache yet; try again in a minute")
        asyncio.run_coroutine_threadsafe(self.backfill_guild(guild, only={inv.key.channel}, since=since), self._loop)

    # ------------------------------------------------------------------ backfill
    async def history_streams(self, guild: discord.Guild, channels: list | None = None,
                              active_threads: list | None = None) -> list[DiscordHistory]:
        """Every readable text channel of a guild and its threads (active and archived).

        From the gateway cache by default; the CLI passes channels and threads fetched over REST.
        """
        streams: list[DiscordHistory] = []
        me = guild.me
        for channel in (guild.text_channels if channels is None else channels):
            if not isinstance(channel, discord.TextChannel):
                continue
            if me is not None and not channel.permissions_for(me).read_message_history:
                continue
            streams.append(DiscordHistory(self, channel))
            threads = list(channel.threads) + [t for t in active_threads or [] if t.parent_id == channel.id]
            try:
                threads += [t async for t in channel.archived_threads(limit=None)]
            except discord.HTTPException as exc:
                log.warning("discord #%s: archived threads not readable (%s)", channel.name, exc)
            seen: set[int] = set()
            for t in threads:
                if t.id not in seen:
                    seen.add(t.id)
                    streams.append(DiscordHistory(self, t))
        return streams

    async def backfill_guild(self, guild: discord.Guild, *, progress: Any = None, over_rest: bool = False,
                             only: set[str] | None = None, max_pages: int | None = None,
                             since: float | None = None) -> BackfillResult:
        """Import a guild's history, oldest first, from each stream's cursor (``over_rest``: no gateway cache);
        messages older than ``since`` are not stored."""
        channels = threads = None
        if over_rest:
            channels = list(await guild.fetch_channels())
            threads = list(await guild.active_threads())
        streams = await self.history_streams(guild, channels, threads)
        if only:
            streams = [s for s in streams if s.key.channel in only or s.stream in only]
        backfiller = Backfiller(self.actions.door, default_opt_in=self.actions.default_opt_in, executor=self.fast,
                                since=since, **({"progress": progress} if progress is not None else {}))
        result = await backfiller.run(streams, max_pages=max_pages)
        log.info("discord backfill of guild %s: %s", guild.id, result.summary())
        return result

    # ------------------------------------------------------------------ app commands
    def invoker(self, interaction: discord.Interaction) -> Invoker:
        channel = interaction.channel
        if channel is None:
            channel = discord.Object(id=interaction.channel_id or 0)
        key, _, name, is_dm = scope_of(channel, interaction.guild_id)
        perms = interaction.permissions
        is_admin = interaction.guild_id is not None and bool(perms.manage_guild or perms.administrator)
        return Invoker(key, str(interaction.user.id), interaction.user.display_name, is_admin=is_admin,
                       is_dm=is_dm, channel_name=name)

    async def run_command(self, interaction: discord.Interaction, name: str, fn: Callable[[Invoker], Reply], *,
                          ephemeral: bool = False, slow: bool = False) -> None:
        """Answer at once when the work is quick; otherwise defer within the 3-second window, then follow up."""
        try:
            inv = self.invoker(interaction)
            log.info("discord %s/%s: /%s by %s", inv.key.workspace, inv.key.channel, name, inv.user_id)
            loop = self._loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self.slow if slow else self.fast, guarded, f"discord /{name}",
                                          lambda: fn(inv))
            done, _ = await asyncio.wait({future}, timeout=self.defer_after_s)
            deferred = not done
            if deferred:
                await interaction.response.defer(ephemeral=ephemeral, thinking=True)
            reply: Reply = await future
            await self._send_interaction(interaction, reply, ephemeral or reply.ephemeral, deferred)
        except Exception:  # the event boundary
            log.exception("discord /%s failed", name)

    async def _send_interaction(self, interaction: discord.Interaction, reply: Reply, ephemeral: bool,
                                deferred: bool) -> None:
        if reply.dm:  # the reply goes to the asker's DMs; the interaction only says so, privately
            await self.send_dm(interaction.user, reply)
            reply = Reply("I sent your catch-up to you in a direct message.", ephemeral=True)
            ephemeral = True
        chunks = await self._call(self.fast, self.render, reply)
        for i, chunk in enumerate(chunks):
            kwargs: dict[str, Any] = {"ephemeral": ephemeral}
            if i == len(chunks) - 1 and reply.attachment is not None:
                kwargs["file"] = discord.File(io.BytesIO(reply.attachment), filename=reply.attachment_name or
                                              "chorus.json")
            if i == 0 and not deferred:
                await interaction.response.send_message(chunk, **kwargs)
            else:
                await interaction.followup.send(chunk, **kwargs)

    def register_commands(self, tree: app_commands.CommandTree) -> None:
        """Define the slash commands from the command table (``chorus discord-sync`` publishes them)."""
        for cmd in CHAT_COMMANDS:
            tree.add_command(self.app_command(cmd))

    def app_command(self, cmd: ChatCommand) -> app_commands.Command:
        """One table entry as a discord.py app command: its options come from the callback's signature."""
        handler = cmd.handler
        if handler is None:
            raise ValueError(f"chat command {cmd.name} has no handler")

        async def callback(interaction: discord.Interaction, **options: Any) -> None:
            args = {k: str(v) for k, v in options.items() if v is not None}
            await self.run_command(interaction, cmd.name, lambda inv: handler(self.actions, inv, args, DISCORD),
                                   ephemeral=cmd.is_private(args), slow=cmd.slow)

        params = [inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=discord.Interaction)]
        for arg in cmd.args:
            kind: Any = Literal.__getitem__(arg.choices) if arg.choices else str
            params.append(inspect.Parameter(arg.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            annotation=kind if arg.required else Optional[kind],  # noqa: UP045  (discord.py reads it at runtime)
                                            default=inspect.Parameter.empty if arg.required else None))
        callback.__signature__ = inspect.Signature(params)  # what discord.py reads the options from
        if cmd.args:
            app_commands.describe(**{a.name: a.help for a in cmd.args})(callback)
        description = cmd.help
        if cmd.permission == "admin":
            app_commands.guild_only()(callback)
            app_commands.default_permissions(manage_guild=True)(callback)
            description = "Admin: " + description[:1].lower() + description[1:]
        return app_commands.Command(name=cmd.name, description=description, callback=callback)

    # ------------------------------------------------------------------ direct messages
    async def send_dm(self, user: Any, reply: Reply) -> None:
        """Send a reply to a user's DMs (discord.py opens the DM channel)."""
        chunks = await self._call(self.fast, self.render, reply)
        for chunk in chunks:
            await user.send(chunk)

    async def _dm_user(self, user_id: str) -> Any:
        return self.client.get_user(int(user_id)) or await self.client.fetch_user(int(user_id))

    def deliver_dm(self, workspace: str, user_id: str, reply: Reply, timeout: float = 60.0) -> None:
        """From another thread (the digest scheduler): send ``reply`` to the user's DMs on the gateway loop."""
        async def go() -> None:
            await self.send_dm(await self._dm_user(user_id), reply)
        asyncio.run_coroutine_threadsafe(go(), self.client.loop).result(timeout)

    def dm_contains(self, workspace: str, user_id: str, marker: str, after_ts: float, timeout: float = 60.0) -> bool:
        """From another thread: whether the bot's DMs with the user hold a message containing ``marker``."""
        import datetime as dt

        async def go() -> bool:
            user = await self._dm_user(user_id)
            channel = user.dm_channel or await user.create_dm()
            after = dt.datetime.fromtimestamp(after_ts, dt.UTC)
            async for m in channel.history(after=after, limit=200):
                if self.me is not None and m.author.id == self.me.id and marker in (m.content or ""):
                    return True
            return False
        return asyncio.run_coroutine_threadsafe(go(), self.client.loop).result(timeout)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.client.close()
