"""The Slack adapter: a Bolt ``App`` wired to ``Actions``, events and commands in, replies out.

Commands and mentions are acknowledged at once and answered by a lazy listener in a
worker thread, so an ack never waits on a model.
"""
from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from slack_bolt import App, BoltResponse
from slack_sdk import WebClient

from bot.actions import Actions, Invoker, guarded
from bot.backfill import Backfiller, BackfillResult
from bot.command_table import run_text
from bot.replies import Reply, split_for_chat
from memory.models import ScopeKey

from .events import EventDeduper, event_to_model, is_wanted
from .history import HISTORY_INTERVAL_S, Pacer, SlackHistory, SlackHistoryReader
from .http import serve_http
from .links import PLATFORM, message_link, parse_link
from .retry import install_retry_handlers
from .users import BotIdentity, SlackDirectory

log = logging.getLogger(__name__)

MAX_CHARS = 3900  # Slack's advice for one message's text is 4,000 characters


class SlackAdapter:
    """Wires a Bolt ``App`` to ``Actions``: events and commands in, replies out."""

    def __init__(self, actions: Actions, client: WebClient, *, signing_secret: str | None = None,
                 command: str = "/chorus", ignore_other_bots: bool = True, backfill_on_join: bool = False,
                 token_verification: bool = True, executor: Executor | None = None,
                 sleep: Callable[[float], None] = time.sleep, history_interval_s: float = HISTORY_INTERVAL_S) -> None:
        self.actions = actions
        self.client = client
        self.command = command
        self.ignore_other_bots = ignore_other_bots
        self.backfill_on_join = backfill_on_join
        actions.history_importers[PLATFORM] = self.import_history  # the admin `backfill` command
        install_retry_handlers(client, sleep)  # 429 (as long as Retry-After says), 5xx, dropped connections
        self.identity = BotIdentity(client)
        self.directory = SlackDirectory(client)
        self.history = SlackHistoryReader(client, self.directory, self.identity, self.wanted,
                                          Pacer(history_interval_s, sleep))
        self.deduper = EventDeduper(actions.door)
        self.executor = executor or ThreadPoolExecutor(8, thread_name_prefix="chorus-slack")
        self._socket: Any = None
        # process_before_response: acks run in the request thread (never queued behind model work);
        # slow work runs in lazy listeners on the executor.
        self.app = App(client=client, signing_secret=signing_secret or "socket-mode-needs-no-secret",
                       request_verification_enabled=bool(signing_secret), token_verification_enabled=token_verification,
                       process_before_response=True, listener_executor=self.executor, name="chorus-slack")
        self.app.use(self._dedupe)
        self.app.event("message")(self._on_message)
        self.app.event("app_mention")(ack=self._ack, lazy=[self._on_mention])
        self.app.event("member_joined_channel")(self._on_member_joined)
        self.app.command(command)(ack=self._ack, lazy=[self._on_command])

    # ------------------------------------------------------------------ helpers
    @property
    def bot_user_id(self) -> str | None:
        return self.identity.user_id

    @property
    def base_url(self) -> str:
        return self.identity.base_url

    def wanted(self, event: dict) -> bool:
        """Never our own messages; other bots' only if configured."""
        return is_wanted(event, self.identity.known_user_id, ignore_other_bots=self.ignore_other_bots)

    def render(self, reply: Reply) -> list[str]:
        text = reply.text
        links = [f"<{message_link(self.base_url, c.channel, c.msg_id)}|[{c.n}]>" for c in reply.citations
                 if c.platform == PLATFORM]
        if links:
            text += "\nSources: " + " ".join(links)
        return split_for_chat(text, MAX_CHARS)

    @staticmethod
    def _team(body: dict) -> str:
        return body.get("team_id") or (body.get("team") or {}).get("id") or body.get("event", {}).get("team") or ""

    # ------------------------------------------------------------------ middleware and listeners
    def _dedupe(self, body: dict, next: Callable[[], None]) -> BoltResponse | None:  # noqa: A002 (Bolt's name)
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if event_id and not self.deduper.first_time(event_id):
            log.info("slack %s: event %s already handled (a retry); dropped", self._team(body), event_id)
            return BoltResponse(status=200, body="")
        next()
        return None

    def _ack(self, ack: Callable[..., None]) -> None:
        ack()

    def _on_message(self, body: dict, event: dict) -> None:
        team = self._team(body)
        try:
            subtype = event.get("subtype")
            channel = event.get("channel", "")
            if subtype == "message_changed":
                new = event.get("message") or {}
                if not self.wanted(new):
                    return
                text = self.directory.plain_text(new.get("text") or "")
                changed = self.actions.edited(PLATFORM, team, channel, new.get("ts", ""), text,
                                              float((new.get("edited") or {}).get("ts") or event.get("ts") or 0)
                                              or None)
                log.debug("slack %s/%s: edit of %s %s", team, channel, new.get("ts"),
                          "applied" if changed else "ignored")
            elif subtype == "message_deleted":
                n = self.actions.deleted(PLATFORM, team, channel, [event.get("deleted_ts", "")])
                log.info("slack %s/%s: deleted message %s (%d forgotten)", team, channel, event.get("deleted_ts"), n)
            elif self.wanted(event):
                msg = event_to_model(event, team, self.directory, self.bot_user_id)
                if msg is not None:
                    self.actions.remember(msg)
        except Exception:  # the event boundary: log with traceback, keep serving
            log.exception("slack %s/%s: message event failed", team, event.get("channel"))

    def _on_mention(self, body: dict, event: dict, context: Any) -> None:
        team, channel = self._team(body), event.get("channel", "")
        try:
            bot_id = context.get("bot_user_id") or self.bot_user_id
            msg = event_to_model(event, team, self.directory, bot_id) if self.wanted(event) else None
            if msg is None:
                return
            self.actions.remember(msg)
            bot_id = context.get("bot_user_id") or self.bot_user_id or "-"
            question = self.directory.plain_text(re.sub(rf"<@{re.escape(bot_id)}(\|[^>]*)?>", " ",
                                                        event.get("text") or ""))
            inv = Invoker(ScopeKey.of(msg), msg.author_id, msg.author_name, is_dm=msg.is_dm,
                          channel_name=msg.channel_name)
            log.info("slack %s/%s: mention from %s", team, channel, msg.author_id)
            reply = guarded("slack mention", lambda: self.actions.ask(inv, " ".join(question.split()), asked_in=msg))
            thread_ts = event.get("thread_ts") or event["ts"]
            if reply.dm:
                self.deliver_dm(team, msg.author_id, reply)
                reply = Reply("I sent your catch-up to you in a direct message.", ephemeral=True,
                              data={"catchup": None})
            for chunk in self.render(reply):
                if reply.ephemeral and "catchup" in reply.data:  # only the asker sees a catch-up
                    self.client.chat_postEphemeral(channel=channel, user=msg.author_id, thread_ts=thread_ts,
                                                   text=chunk, unfurl_links=False, unfurl_media=False)
                else:
                    self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=chunk,
                                                 unfurl_links=False, unfurl_media=False)
        except Exception:  # the event boundary
            log.exception("slack %s/%s: mention failed", team, channel)

    def _on_member_joined(self, body: dict, event: dict) -> None:
        team, channel = self._team(body), event.get("channel", "")
        # Off by default: history is imported when an admin asks (`/chorus backfill`).
        if event.get("user") and event.get("user") == self.bot_user_id and self.backfill_on_join:
            log.info("slack %s/%s: joined; backfilling history", team, channel)
            threading.Thread(target=self._backfill_guarded, args=(team, [(channel, "", False)]),
                             name="chorus-slack-backfill", daemon=True).start()

    def _invoker(self, body: dict) -> Invoker:
        team, channel, user_id = self._team(body), body.get("channel_id", ""), body.get("user_id", "")
        user = self.directory.user(user_id)
        is_dm = body.get("channel_name") == "directmessage" or channel.startswith("D")
        return Invoker(ScopeKey(PLATFORM, team, channel), user_id, user.name, is_admin=user.is_admin and not is_dm,
                       is_dm=is_dm, channel_name="" if is_dm else body.get("channel_name", ""))

    def _on_command(self, body: dict, respond: Callable[..., Any]) -> None:
        """``/chorus WORDS``: the command table's text commands (``bot.command_table.run_text``)."""
        team, channel = self._team(body), body.get("channel_id", "")
        try:
            inv = self._invoker(body)
            text = body.get("text") or ""
            log.info("slack %s/%s: %s %s by %s", team, channel, body.get("command"), text.split(" ")[0] or "help",
                     inv.user_id)
            reply = guarded(f"slack {self.command}",
                            lambda: run_text(self.actions, inv, text, parse_link=parse_link))
            self._deliver(inv, reply, respond)
        except Exception:  # the event boundary
            log.exception("slack %s/%s: command failed", team, channel)

    def _deliver(self, inv: Invoker, reply: Reply, respond: Callable[..., Any]) -> None:
        """Answer a command through its response_url; a file goes to the user's own DM only."""
        if reply.dm:
            self.deliver_dm(inv.key.workspace, inv.user_id, reply)
            reply = Reply("I sent your catch-up to you in a direct message.", ephemeral=True)
        kind = "ephemeral" if reply.ephemeral else "in_channel"
        chunks = self.render(reply)
        if reply.attachment is not None:
            dm = self.client.conversations_open(users=inv.user_id)["channel"]["id"]
            self.client.files_upload_v2(channel=dm, content=reply.attachment.decode("utf-8"),
                                        filename=reply.attachment_name or "chorus.json",
                                        title=reply.attachment_name or "chorus export",
                                        initial_comment=reply.text)
            chunks = [reply.text + "\nI sent the file to you in a direct message."]
        for chunk in chunks[:5]:  # a response_url takes at most five answers
            respond(text=chunk, response_type=kind, replace_original=False)

    # ------------------------------------------------------------------ direct messages
    def deliver_dm(self, workspace: str, user_id: str, reply: Reply) -> None:
        """Send ``reply`` to the user's DM with the bot (the digest scheduler calls this from its thread)."""
        dm = self.client.conversations_open(users=user_id)["channel"]["id"]
        for chunk in self.render(reply):
            self.client.chat_postMessage(channel=dm, text=chunk, unfurl_links=False, unfurl_media=False)

    def dm_contains(self, workspace: str, user_id: str, marker: str, after_ts: float) -> bool:
        """Whether the bot's DM with the user holds a message of the bot's containing ``marker``."""
        dm = self.client.conversations_open(users=user_id)["channel"]["id"]
        page = self.client.conversations_history(channel=dm, oldest=f"{after_ts:.6f}", limit=200)
        me = self.identity.known_user_id
        return any(marker in (m.get("text") or "") and (m.get("user") == me or m.get("bot_id"))
                   for m in page.get("messages") or [])

    # ------------------------------------------------------------------ backfill
    def list_channels(self) -> list[tuple[str, str, bool]]:
        """(id, name, is_dm) of every conversation the bot is a member of."""
        return self.history.list_channels()

    def backfill(self, team: str, channels: list[tuple[str, str, bool]], *,
                 progress: Any = None, max_pages: int | None = None, since: float | None = None) -> BackfillResult:
        """Import the history of channels, oldest first, resuming from each channel's cursor; messages
        older than ``since`` are not stored."""
        self.identity.load()
        streams = [SlackHistory(self.history, team, cid, name, is_dm) for cid, name, is_dm in channels]
        backfiller = Backfiller(self.actions.door, default_opt_in=self.actions.default_opt_in, since=since,
                                **({"progress": progress} if progress is not None else {}))
        result = asyncio.run(backfiller.run(streams, max_pages=max_pages))
        log.info("slack backfill of %s: %s", team, result.summary())
        return result

    def import_history(self, inv: Invoker, since: float | None) -> None:
        """Start importing one channel's history in the background (the admin `backfill` command)."""
        threading.Thread(target=self._backfill_guarded, args=(inv.key.workspace, [(inv.key.channel, inv.channel_name,
                                                                                   inv.is_dm)], since),
                         name="chorus-slack-backfill", daemon=True).start()

    def _backfill_guarded(self, team: str, channels: list[tuple[str, str, bool]], since: float | None = None) -> None:
        try:
            self.backfill(team, channels, since=since)
        except Exception:  # a background thread boundary
            log.exception("slack %s: backfill failed", team)

    # ------------------------------------------------------------------ serving
    def start_socket_mode(self, app_token: str) -> None:
        """Connect over Socket Mode (no public URL needed); returns once connected."""
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        self._socket = SocketModeHandler(self.app, app_token)
        self._socket.connect()
        log.info("slack connected over Socket Mode")

    async def start_http(self, host: str = "0.0.0.0", port: int = 3000, path: str = "/slack/events") -> Any:
        """Serve the Events API and slash commands over HTTP (``adapters.slack.http``); returns the runner."""
        return await serve_http(self.app, host, port, path)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self.executor.shutdown(wait=True, cancel_futures=True)  # work in flight finishes, queued work is dropped
