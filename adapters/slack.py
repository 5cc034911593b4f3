"""Slack adapter (slack-bolt): Socket Mode by default, HTTP Events API as an option.

``message`` events (thread replies, ``message_changed``, ``message_deleted``) and
``app_mention`` reach the bot; one slash command (``/chorus ask ...``) carries every
command. Commands and mentions are acknowledged at once and answered by a lazy
listener in a worker thread, so an ack never waits on a model. Slack re-delivers
events it thinks were missed; those are dropped by event id.
"""
from __future__ import annotations

import asyncio
import html
import logging
import re
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from slack_bolt import App, BoltRequest, BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.actions import Actions, Invoker, guarded
from bot.replies import Reply, split_for_chat
from memory.models import Message, ScopeKey
from memory.store import Store

from .backfill import Backfiller, BackfillResult, Page
from .slack_retry import install_retry_handlers

log = logging.getLogger(__name__)

PLATFORM = "slack"
MAX_CHARS = 3900  # Slack's advice for one message's text is 4,000 characters
NEW_MESSAGE_SUBTYPES = (None, "thread_broadcast", "file_share", "me_message", "bot_message")
NAME_TTL_S = 3600.0
_LINK = re.compile(r"/archives/([A-Z0-9]+)/p(\d{10})(\d{6})")
_BARE_TS = re.compile(r"^\d{10}\.\d{6}$")
_USER_REF = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL_REF = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_URL_REF = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")


def parse_link(text: str) -> tuple[str, str] | None:
    """(channel, message ts) from a Slack message link, or ('', ts) from a bare ts."""
    text = text.strip().strip("<>").split("|")[0]
    m = _LINK.search(text)
    if m:
        return m.group(1), f"{m.group(2)}.{m.group(3)}"
    if _BARE_TS.match(text):
        return "", text
    return None


def message_link(base_url: str, channel: str, ts: str) -> str:
    return f"{base_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"


@dataclass
class SlackUser:
    name: str
    is_admin: bool
    is_bot: bool


class SlackDirectory:
    """Display names and admin flags from ``users.info`` (and channel names), cached for an hour."""

    def __init__(self, client: WebClient, *, ttl_s: float = NAME_TTL_S) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self._users: dict[str, tuple[SlackUser, float]] = {}
        self._channels: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def user(self, user_id: str) -> SlackUser:
        now = time.monotonic()
        with self._lock:
            hit = self._users.get(user_id)
        if hit and hit[1] > now:
            return hit[0]
        try:
            info = self.client.users_info(user=user_id).get("user") or {}
            profile = info.get("profile") or {}
            user = SlackUser(profile.get("display_name") or profile.get("real_name") or info.get("real_name")
                             or info.get("name") or user_id,
                             bool(info.get("is_admin") or info.get("is_owner") or info.get("is_primary_owner")),
                             bool(info.get("is_bot")))
        except SlackApiError as exc:
            log.warning("slack users.info %s failed (%s); using the id as the name", user_id, exc.response.get("error"))
            user = SlackUser(user_id, False, False)
        with self._lock:
            self._users[user_id] = (user, now + self.ttl_s)
        return user

    def channel_name(self, channel_id: str) -> str:
        now = time.monotonic()
        with self._lock:
            hit = self._channels.get(channel_id)
        if hit and hit[1] > now:
            return hit[0]
        try:
            name = (self.client.conversations_info(channel=channel_id).get("channel") or {}).get("name") or ""
        except SlackApiError as exc:
            log.debug("slack conversations.info %s failed: %s", channel_id, exc.response.get("error"))
            name = ""
        with self._lock:
            self._channels[channel_id] = (name, now + self.ttl_s)
        return name

    def plain_text(self, text: str) -> str:
        """Slack markup as people read it: <@U1> becomes @Name, links keep their label and address."""
        text = _USER_REF.sub(lambda m: "@" + self.user(m.group(1)).name, text)
        text = _CHANNEL_REF.sub(lambda m: "#" + (m.group(2) or self.channel_name(m.group(1)) or m.group(1)), text)
        text = _URL_REF.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
        return html.unescape(text)


def event_to_model(event: dict, team: str, directory: SlackDirectory,
                   bot_user_id: str | None = None) -> Message | None:
    """A Slack message event as a Chorus ``Message``; None for joins, topic changes and empty events."""
    if event.get("subtype") not in NEW_MESSAGE_SUBTYPES:
        return None
    author = event.get("user") or event.get("bot_id")
    ts = event.get("ts")
    if not author or not ts:
        return None
    text = directory.plain_text(event.get("text") or "")
    names = [f"[attachment: {f.get('name') or f.get('title') or 'file'}]" for f in event.get("files") or []]
    text = "\n".join([text, *names]).strip() if names else text
    if not text.strip():
        return None
    channel = event["channel"]
    thread_ts = event.get("thread_ts") or ""
    thread = thread_ts if thread_ts and thread_ts != ts else ""
    is_bot = bool(event.get("bot_id")) or event.get("subtype") == "bot_message"
    user = directory.user(author) if event.get("user") else SlackUser(event.get("username") or author, False, True)
    is_dm = event.get("channel_type") == "im"
    # Slack delivers a mention both as a message and as app_mention: either way it is bot traffic.
    to_bot = bool(bot_user_id) and f"<@{bot_user_id}" in (event.get("text") or "")
    return Message(PLATFORM, team, channel, ts, author, user.name, text, float(ts), thread=thread,
                   reply_to=thread or None, is_dm=is_dm, is_bot=is_bot or user.is_bot,
                   channel_name="" if is_dm else directory.channel_name(channel), to_bot=to_bot)


class EventDeduper:
    """Remembers handled event ids for a day so Slack's retries are answered once."""

    def __init__(self, store: Store, *, keep_s: float = 86400.0) -> None:
        self.store = store
        self.keep_s = keep_s
        self._since_prune = 0

    def first_time(self, event_id: str) -> bool:
        now = time.time()
        with self.store.write() as conn:
            fresh = conn.execute("INSERT OR IGNORE INTO processed_events(platform, event_id, created_at) "
                                 "VALUES (?,?,?)", (PLATFORM, event_id, now)).rowcount > 0
            self._since_prune += 1
            if self._since_prune >= 1000:
                conn.execute("DELETE FROM processed_events WHERE created_at < ?", (now - self.keep_s,))
                self._since_prune = 0
        return fresh


class SlackHistory:
    """One channel's history for the backfiller, paged forward from a ts, threads included."""

    def __init__(self, adapter: "SlackAdapter", team: str, channel: str, name: str = "", is_dm: bool = False) -> None:
        self.adapter = adapter
        self.team = team
        self.channel = channel
        self.key = ScopeKey(PLATFORM, team, channel)
        self.stream = ""
        self.channel_name = name
        self.is_dm = is_dm
        self.label = f"slack {team}/#{name or channel}"

    async def fetch_after(self, after: str | None, limit: int) -> Page:
        return await asyncio.to_thread(self._fetch, after, limit)

    def _fetch(self, after: str | None, limit: int) -> Page:
        client = self.adapter.client
        # With `oldest` and no `latest`, Slack returns the messages closest to `oldest`: a forward page.
        self.adapter.pace()
        resp = client.conversations_history(channel=self.channel, oldest=after or "1", inclusive=False, limit=limit)
        raw = sorted(resp.get("messages") or [], key=lambda m: float(m["ts"]))
        items = list(raw)
        for parent in raw:
            if parent.get("reply_count") and parent.get("thread_ts") == parent.get("ts"):
                items += self._replies(parent["ts"])
        msgs = []
        for item in sorted(items, key=lambda m: float(m["ts"])):
            event = {**item, "channel": self.channel, "channel_type": "im" if self.is_dm else "channel"}
            if self.adapter.wanted(event):
                m = event_to_model(event, self.team, self.adapter.directory, self.adapter.bot_user_id)
                if m is not None:
                    msgs.append(m)
        newest = raw[-1]["ts"] if raw else after
        return Page(msgs, newest, more=bool(resp.get("has_more")) and bool(raw), fetched=len(items))

    def _replies(self, thread_ts: str) -> list[dict]:
        out: list[dict] = []
        cursor = None
        while True:
            self.adapter.pace()
            resp = self.adapter.client.conversations_replies(channel=self.channel, ts=thread_ts, limit=200,
                                                             **({"cursor": cursor} if cursor else {}))
            out += [m for m in resp.get("messages") or [] if m.get("ts") != thread_ts]
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return out


class SlackAdapter:
    """Wires a Bolt ``App`` to ``Actions``: events and commands in, replies out."""

    def __init__(self, actions: Actions, client: WebClient, *, signing_secret: str | None = None,
                 command: str = "/chorus", ignore_other_bots: bool = True, backfill_on_join: bool = True,
                 token_verification: bool = True, executor: Executor | None = None,
                 sleep: Callable[[float], None] = time.sleep, history_interval_s: float = 1.2) -> None:
        self.actions = actions
        self.client = client
        self.command = command
        self.ignore_other_bots = ignore_other_bots
        self.backfill_on_join = backfill_on_join
        self.sleep = sleep
        install_retry_handlers(client, sleep)  # 429 (as long as Retry-After says), 5xx, dropped connections
        self.history_interval_s = history_interval_s
        self.directory = SlackDirectory(client)
        self.deduper = EventDeduper(actions.store)
        self.executor = executor or ThreadPoolExecutor(8, thread_name_prefix="chorus-slack")
        self._base_url: str | None = None
        self._bot_user_id: str | None = None
        self._last_call = 0.0
        self._pace_lock = threading.Lock()
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
        if self._bot_user_id is None:
            self._load_identity()
        return self._bot_user_id

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            self._load_identity()
        return self._base_url or "https://slack.com/"

    def _load_identity(self) -> None:
        try:
            info = self.client.auth_test()
            self._base_url, self._bot_user_id = info.get("url") or "https://slack.com/", info.get("user_id")
        except SlackApiError as exc:
            log.warning("slack auth.test failed: %s", exc.response.get("error"))
            self._base_url = "https://slack.com/"

    def pace(self) -> None:
        """Space history calls out (Tier 3 allows about 50 a minute)."""
        with self._pace_lock:
            wait = self._last_call + self.history_interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            self._last_call = time.monotonic()

    def wanted(self, event: dict) -> bool:
        """Never our own messages; other bots' only if configured."""
        if event.get("user") and event.get("user") == self._bot_user_id:
            return False
        if (event.get("bot_id") or event.get("subtype") == "bot_message") and self.ignore_other_bots:
            return False
        return True

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
            for chunk in self.render(reply):
                self.client.chat_postMessage(channel=channel, thread_ts=event.get("thread_ts") or event["ts"],
                                             text=chunk, unfurl_links=False, unfurl_media=False)
        except Exception:  # the event boundary
            log.exception("slack %s/%s: mention failed", team, channel)

    def _on_member_joined(self, body: dict, event: dict) -> None:
        team, channel = self._team(body), event.get("channel", "")
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
        team, channel = self._team(body), body.get("channel_id", "")
        try:
            inv = self._invoker(body)
            text = body.get("text") or ""
            log.info("slack %s/%s: %s %s by %s", team, channel, body.get("command"), text.split(" ")[0] or "help",
                     inv.user_id)
            reply = guarded(f"slack {self.command}",
                            lambda: self.actions.run_text(inv, text, parse_link=parse_link))
            self._deliver(inv, reply, respond)
        except Exception:  # the event boundary
            log.exception("slack %s/%s: command failed", team, channel)

    def _deliver(self, inv: Invoker, reply: Reply, respond: Callable[..., Any]) -> None:
        """Answer a command through its response_url; a file goes to the user's own DM only."""
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

    # ------------------------------------------------------------------ backfill
    def list_channels(self) -> list[tuple[str, str, bool]]:
        """(id, name, is_dm) of every conversation the bot is a member of."""
        out: list[tuple[str, str, bool]] = []
        cursor = None
        while True:
            resp = self.client.conversations_list(exclude_archived=True, types="public_channel,private_channel,im",
                                                  limit=200, **({"cursor": cursor} if cursor else {}))
            for ch in resp.get("channels") or []:
                if ch.get("is_member") or ch.get("is_im"):
                    out.append((ch["id"], ch.get("name") or "", bool(ch.get("is_im"))))
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return out

    def backfill(self, team: str, channels: list[tuple[str, str, bool]], *,
                 progress: Any = None, max_pages: int | None = None) -> BackfillResult:
        """Import the history of channels, oldest first, resuming from each channel's cursor."""
        self._load_identity()
        streams = [SlackHistory(self, team, cid, name, is_dm) for cid, name, is_dm in channels]
        backfiller = Backfiller(self.actions.store, default_opt_in=self.actions.default_opt_in,
                                **({"progress": progress} if progress is not None else {}))
        result = asyncio.run(backfiller.run(streams, max_pages=max_pages))
        log.info("slack backfill of %s: %s", team, result.summary())
        return result

    def _backfill_guarded(self, team: str, channels: list[tuple[str, str, bool]]) -> None:
        try:
            self.backfill(team, channels)
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
        """Serve the Events API and slash commands over HTTP (aiohttp); returns the runner to clean up."""
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            raw = await request.text()
            req = BoltRequest(body=raw, query=request.query_string,
                              headers={k.lower(): v for k, v in request.headers.items()})
            resp = await asyncio.get_running_loop().run_in_executor(None, self.app.dispatch, req)
            headers = {k: v for k, v in resp.first_headers_without_set_cookie().items()
                       if k.lower() not in ("content-length",)}
            return web.Response(status=resp.status, body=resp.body.encode() if isinstance(resp.body, str)
                                else resp.body, headers=headers)

        web_app = web.Application()
        web_app.router.add_post(path, handle)
        runner = web.AppRunner(web_app)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        log.info("slack HTTP mode listening on %s:%d%s", host, port, path)
        return runner

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self.executor.shutdown(wait=True, cancel_futures=True)  # work in flight finishes, queued work is dropped
