"""Command handlers shared by every chat adapter: one place decides what a command does.

Adapters translate a platform command into a call here (``bot.command_table`` names every
command and maps it to a method) and render the ``Reply``. Everything here is synchronous
and may block on the store or a model, so adapters run it in a worker thread; none of it
knows which platform it serves.
"""
from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from memory import privacy
from memory.catchup import subscriptions
from memory.errors import ChorusError
from memory.models import Message, ScopeKey

from .app import Bot
from .catchup import Catchup
from .door import Door
from .replies import Reply

log = logging.getLogger(__name__)

CONFIRM_TTL_S = 300.0
CATCHUP_MODES = ("dm", "all", "channel", "subscribe", "unsubscribe")
# Starts importing one channel's history in the background; ``since`` (epoch seconds) bounds how far back.
HistoryImport = Callable[["Invoker", "float | None"], None]
REFUSE_ADMIN = "Only workspace admins can do that (it needs the Manage Server / admin permission)."


@dataclass(frozen=True)
class Invoker:
    """Who issued a command, and where (the scope is the channel's, even inside a thread)."""

    key: ScopeKey
    user_id: str
    user_name: str = ""
    is_admin: bool = False
    is_dm: bool = False
    channel_name: str = ""

    def describe(self) -> str:
        return f"{self.key.platform}:{self.key.workspace}:{self.key.channel} user={self.user_id}"


def guarded(what: str, fn: Callable[[], Reply]) -> Reply:
    """Run one command at the event boundary: a ChorusError becomes its message, anything else is logged."""
    try:
        return fn()
    except ChorusError as exc:
        log.info("%s refused: %s", what, exc)
        return Reply(f"Sorry: {exc}", ephemeral=True)
    except Exception:  # the boundary: never let one command take the adapter down
        log.exception("%s failed", what)
        return Reply("Sorry, something went wrong on my side; the operator can find the details in the log.",
                     ephemeral=True)


def describe_history_import(where: str, since: float | None, *, background: bool = True) -> str:
    """What a history import of ``where`` does, said before it starts (the admin command and `chorus backfill`)."""
    span = ("from its very first message" if since is None
            else f"from {time.strftime('%Y-%m-%d', time.gmtime(since))} (UTC) on; older messages are skipped")
    how = ", in the background" if background else ""
    return (f"Importing the history of {where} (threads included), {span}, oldest first{how}. For each "
            "message I store its text, author id and display name, time and thread, index it for search and "
            "later read it for memory records, exactly as for live messages. Messages of people who opted out, "
            "other bots' messages (unless configured) and anything in an opted-out channel or paused workspace "
            "are not stored. An interrupted import resumes where it stopped; `forget` removes what it stored. "
            "New messages keep being remembered as before.")


class Actions:
    """Platform-neutral commands over one ``Bot``: ingest gate, queries, privacy, admin."""

    def __init__(self, bot: Bot, *, default_opt_in: bool | None = None) -> None:
        self.bot = bot
        self.store = bot.store
        self.default_opt_in = (bot.settings.scopes.default_opt_in if default_opt_in is None else default_opt_in)
        self._pending: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.catchups = Catchup(bot)
        # Per platform, set by its adapter: history import is an explicit admin act (`backfill`), never automatic.
        self.history_importers: dict[str, HistoryImport] = {}

    # ------------------------------------------------------------------ events
    def remember(self, msg: Message) -> bool:
        """Remember a live chat message through the bot's one door; False when privacy settings forbid it."""
        return not self.bot.remember([msg], default_opt_in=self.default_opt_in).refused

    @property
    def door(self) -> Door:
        """The bot's one door into the store, for adapters' history imports and event bookkeeping."""
        return self.bot.door

    def edited(self, platform: str, workspace: str, channel: str, msg_id: str, text: str,
               edited_ts: float | None = None) -> bool:
        """Apply a platform edit; ``channel`` may be a thread id. False when the message is not remembered."""
        found = privacy.find_message(self.store, platform, workspace, channel, msg_id)
        if found is None:
            return False
        key = ScopeKey(found.platform, found.workspace, found.channel)
        return self.store.edit(key, msg_id, text, edited_ts=edited_ts)

    def deleted(self, platform: str, workspace: str, channel: str, msg_ids: list[str]) -> int:
        """Apply platform deletions (one or a bulk delete); returns how many were remembered."""
        ids = []
        for mid in msg_ids:
            found = privacy.find_message(self.store, platform, workspace, channel, mid)
            if found is not None:
                ids.append(found.id)
        return self.store.delete_messages(ids, reason="deleted") if ids else 0

    def thread_deleted(self, platform: str, workspace: str, channel: str, thread: str) -> int:
        """A deleted thread takes its messages with it."""
        sid = self.store.scope_id(ScopeKey(platform, workspace, channel))
        if sid is None:
            return 0
        with self.store.read() as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE scope_id = ? AND thread = ? AND "
                                              "deleted = 0", (sid, thread))]
        return self.store.delete_messages(ids, reason="deleted") if ids else 0

    # ------------------------------------------------------------------ questions
    def ask(self, inv: Invoker, question: str, *, asked_in: Message | None = None) -> Reply:
        """A question from any surface (a mention, /ask, `chorus ask`): analysed once, then answered or,
        for "what did I miss?" / "catch me up since Monday", the asker's catch-up digest."""
        q = self.bot.question(inv.key, question, asked_in=asked_in, asker_id=inv.user_id)
        if q.catchup is not None:
            return self.catchup(inv, "", q.catchup, asked_in=asked_in)
        log.info("ask in %s", inv.describe())
        return self.bot.ask(inv.key, q, asked_in=asked_in)

    def catchup(self, inv: Invoker, mode: str = "", since: str = "", *, asked_in: Message | None = None) -> Reply:
        """The asker's digest: private by default, to their DMs with ``dm``, to the channel for an admin.

        Every reply of this command (its refusals and errors too) carries ``data["catchup"]``, which tells
        a surface answering a mention to keep it private.
        """
        try:
            reply = self._catchup(inv, mode, since, asked_in)
        except ChorusError as exc:  # e.g. a `since` that names no time: said privately, like the digest
            log.info("catchup refused in %s: %s", inv.describe(), exc)
            reply = Reply(f"Sorry: {exc}", ephemeral=True)
        reply.data.setdefault("catchup", None)
        return reply

    def _catchup(self, inv: Invoker, mode: str, since: str, asked_in: Message | None) -> Reply:
        log.info("catchup %s in %s", mode or "-", inv.describe())
        mode = mode.strip().lower()
        if mode and mode not in CATCHUP_MODES:
            return Reply(f"Unknown catch-up option {mode[:20]!r}; use one of {', '.join(CATCHUP_MODES)}.",
                         ephemeral=True)
        if mode in ("subscribe", "unsubscribe"):
            return self._subscription(inv, mode == "subscribe")
        if mode == "channel" and not inv.is_admin:
            return Reply(REFUSE_ADMIN, ephemeral=True)
        exclude: tuple[int, ...] = ()
        if asked_in is not None:
            stored = self.store.find(inv.key, asked_in.msg_id)
            exclude = (stored.id,) if stored is not None else ()
        where = f"#{inv.channel_name}" if inv.channel_name and not inv.is_dm else ""
        reply = self.catchups.reply(inv.key, inv.user_id, inv.user_name, since, show_all=mode == "all",
                                    exclude=exclude, where=where)
        if mode == "dm":
            reply.dm = True
        if mode == "channel":
            reply.ephemeral = False
        return reply

    def _subscription(self, inv: Invoker, on: bool) -> Reply:
        sid = self.store.scope_id(inv.key)
        if sid is None:
            return Reply("I don't have any memory of this channel yet; say something here first.", ephemeral=True)
        scheduled = any(s[0] == f"{inv.key.platform}:{inv.key.workspace}:{inv.key.channel}"
                        for s in self.bot.settings.catchup.schedules)
        if on:
            new = subscriptions.subscribe(self.store, sid, inv.user_id, inv.user_name)
            when = ("" if scheduled else " No schedule is set for this channel yet, so nothing is sent until the "
                    "operator adds one (`catchup.schedules`).")
            return Reply(("Subscribed" if new else "You were already subscribed") + ": I'll send you a catch-up "
                         "digest of this channel by direct message on its schedule, when there is something new."
                         + when, ephemeral=True)
        gone = subscriptions.unsubscribe(self.store, sid, inv.user_id)
        return Reply("Unsubscribed: no more scheduled digests of this channel." if gone else
                     "You weren't subscribed to this channel's digest.", ephemeral=True)

    def whosaid(self, inv: Invoker, phrase: str) -> Reply:
        log.info("whosaid in %s", inv.describe())
        if not phrase.strip():
            return Reply("Tell me the phrase, e.g. `whosaid pizza by the river`.", ephemeral=True)
        return self.bot.whosaid(inv.key, phrase)

    def profile(self, inv: Invoker, person: str) -> Reply:
        log.info("profile in %s", inv.describe())
        if not person.strip():
            return Reply("Whose profile? e.g. `profile alice`.", ephemeral=True)
        return self.bot.profile(inv.key, person.strip().lstrip("@"))

    def timeline(self, inv: Invoker, topic: str) -> Reply:
        log.info("timeline in %s", inv.describe())
        if not topic.strip():
            return Reply("Which topic? e.g. `timeline the trip`.", ephemeral=True)
        return self.bot.timeline(inv.key, topic.strip())

    def status(self, inv: Invoker) -> Reply:
        log.info("status in %s", inv.describe())
        reply = self.bot.status(inv.key)
        lines = [reply.text]
        k = inv.key
        if privacy.is_paused(self.store, k.platform, k.workspace):
            lines.append("Memory is paused in this workspace (an admin can `resume`).")
        if not privacy.is_channel_opted_in(self.store, k, default_opt_in=self.default_opt_in or inv.is_dm):
            lines.append("This channel is opted out: new messages here are not remembered.")
        if privacy.is_user_opted_out(self.store, k.platform, k.workspace, inv.user_id):
            lines.append("You opted out: your messages are not remembered (`optin` to undo).")
        return Reply("\n".join(lines), reply.citations, ephemeral=True, data=reply.data)

    # ------------------------------------------------------------------ privacy
    def forget_me(self, inv: Invoker, confirm: str = "", *, how: str = "`forget me {code}`") -> Reply:
        """Two steps: the first call names a code, repeating the command with that code forgets.

        ``how`` shows the user how to repeat the command on their platform.
        """
        k = inv.key
        who = (k.platform, k.workspace, inv.user_id)
        now = time.monotonic()
        with self._lock:
            pending = self._pending.get(who)
            if pending and pending[1] < now:
                self._pending.pop(who, None)
                pending = None
            if not confirm.strip() or pending is None or not secrets.compare_digest(confirm.strip().lower(),
                                                                                     pending[0]):
                code = secrets.token_hex(3)
                self._pending[who] = (code, now + CONFIRM_TTL_S)
                n = len(privacy.user_message_ids(self.store, k.platform, k.workspace, inv.user_id))
                prefix = "That code did not match or has expired. " if confirm.strip() else ""
                log.info("forget me requested in %s (%d messages)", inv.describe(), n)
                return Reply(f"{prefix}This forgets all {n} message(s) of yours I remember in this workspace "
                             "(and our direct messages), with everything derived from them. It cannot be undone. "
                             f"To confirm within 5 minutes, run {how.format(code=code)}.",
                             ephemeral=True, data={"confirm_code": code, "messages": n})
            self._pending.pop(who, None)
        report = privacy.forget_user(self.store, k.platform, k.workspace, inv.user_id)
        log.info("forget me done in %s: %d messages, %d scopes", inv.describe(), report.messages, report.scopes)
        return Reply(report.summary() + " To stop me remembering new messages too, use `optout`.",
                     ephemeral=True, data={"forgotten": report.messages, "scopes": report.scopes})

    def forget_message(self, inv: Invoker, channel: str, msg_id: str) -> Reply:
        """Forget one message: its author may, and so may an admin."""
        k = inv.key
        found = privacy.find_message(self.store, k.platform, k.workspace, channel or k.channel, msg_id)
        if found is None:
            return Reply("I don't remember that message (or it is already forgotten).", ephemeral=True)
        if found.author_id != inv.user_id and not inv.is_admin:
            return Reply("You can only make me forget your own messages (admins can forget any).", ephemeral=True)
        privacy.forget_stored(self.store, found)
        log.info("forget message %s/%s in %s", channel, msg_id, inv.describe())
        return Reply("Forgotten: that message and anything that rested only on it.", ephemeral=True,
                     data={"forgotten": 1})

    def export_me(self, inv: Invoker) -> Reply:
        """A JSON file of the user's data, only ever sent back privately to that user."""
        k = inv.key
        data = privacy.export_user(self.store, k.platform, k.workspace, inv.user_id)
        blob = json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")
        safe = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{k.platform}-{inv.user_id}")[:80]
        log.info("export in %s: %d messages, %d records", inv.describe(), len(data["messages"]),
                 len(data["records"]))
        return Reply(f"Here is everything I keep by or about you: {len(data['messages'])} message(s) and "
                     f"{len(data['records'])} memory record(s).", ephemeral=True,
                     data={"messages": len(data["messages"]), "records": len(data["records"])},
                     attachment_name=f"chorus-export-{safe}.json", attachment=blob)

    def opt_out_me(self, inv: Invoker) -> Reply:
        privacy.opt_out_user(self.store, inv.key.platform, inv.key.workspace, inv.user_id)
        log.info("user opt-out in %s", inv.describe())
        return Reply("Done: I will not remember your messages in this workspace from now on. What I already "
                     "remember stays until you use `forget me`.", ephemeral=True)

    def opt_in_me(self, inv: Invoker) -> Reply:
        privacy.opt_in_user(self.store, inv.key.platform, inv.key.workspace, inv.user_id)
        log.info("user opt-in in %s", inv.describe())
        return Reply("Done: I will remember your messages again.", ephemeral=True)

    # ------------------------------------------------------------------ admin
    def pause(self, inv: Invoker) -> Reply:
        if not inv.is_admin:
            return Reply(REFUSE_ADMIN, ephemeral=True)
        privacy.set_paused(self.store, inv.key.platform, inv.key.workspace, True)
        log.info("pause in %s", inv.describe())
        return Reply("Paused: I will not remember new messages in this workspace until an admin runs `resume`.",
                     ephemeral=True)

    def resume(self, inv: Invoker) -> Reply:
        if not inv.is_admin:
            return Reply(REFUSE_ADMIN, ephemeral=True)
        privacy.set_paused(self.store, inv.key.platform, inv.key.workspace, False)
        log.info("resume in %s", inv.describe())
        return Reply("Resumed: I am remembering this workspace again.", ephemeral=True)

    def backfill(self, inv: Invoker, days: str = "", *, now: float | None = None) -> Reply:
        """Import this channel's past messages, when an admin asks; the reply says how far back and what is kept."""
        if not inv.is_admin:
            return Reply(REFUSE_ADMIN, ephemeral=True)
        try:
            n_days = float(days) if days.strip() else None
        except ValueError:
            n_days = -1.0
        if n_days is not None and not n_days > 0:
            return Reply("Use `backfill` for the whole history, or `backfill DAYS` (a number above 0) for the last "
                         "DAYS days.", ephemeral=True)
        importer = self.history_importers.get(inv.key.platform)
        if importer is None:
            return Reply("There is no platform history to import here: this chat is remembered as it happens.",
                         ephemeral=True)
        if not privacy.is_channel_opted_in(self.store, inv.key, default_opt_in=self.default_opt_in or inv.is_dm):
            return Reply("This channel is opted out, so I would store nothing from its history; run `channel in` "
                         "first.", ephemeral=True)
        since = None if n_days is None else (now if now is not None else time.time()) - n_days * 86400
        importer(inv, since)
        log.info("backfill requested in %s (since %s)", inv.describe(), since)
        where = f"#{inv.channel_name}" if inv.channel_name else "this channel"
        return Reply(describe_history_import(where, since), ephemeral=True,
                     data={"since": since})

    def channel_opt(self, inv: Invoker, opted_in: bool) -> Reply:
        if not inv.is_admin:
            return Reply(REFUSE_ADMIN, ephemeral=True)
        privacy.set_channel_opt_in(self.store, inv.key, opted_in, default_opt_in=self.default_opt_in,
                                   name=inv.channel_name, is_dm=inv.is_dm)
        log.info("channel opt-%s in %s", "in" if opted_in else "out", inv.describe())
        if opted_in:
            return Reply("This channel is opted in: I will remember its messages.", ephemeral=True)
        return Reply("This channel is opted out: I will not remember new messages here (what I already remember "
                     "stays; `forget` removes it).", ephemeral=True)
