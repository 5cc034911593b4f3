"""Reading Slack history for the backfiller: conversations, forward pages, thread replies, paced.

History calls are Tier 3 (about 50 a minute), so every call waits its turn in one
``Pacer``; messages pass the same filter and translation as live events.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient

from bot.backfill import Page
from memory.models import ScopeKey

from .events import event_to_model
from .links import PLATFORM
from .users import BotIdentity, SlackDirectory

HISTORY_INTERVAL_S = 1.2


class Pacer:
    """Spaces calls out by ``interval_s``, across threads."""

    def __init__(self, interval_s: float = HISTORY_INTERVAL_S, sleep: Callable[[float], None] = time.sleep) -> None:
        self.interval_s = interval_s
        self.sleep = sleep
        self._last_call = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            wait = self._last_call + self.interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            self._last_call = time.monotonic()


class SlackHistoryReader:
    """Pages of one workspace's history, as the live adapter would have stored them."""

    def __init__(self, client: WebClient, directory: SlackDirectory, identity: BotIdentity,
                 wanted: Callable[[dict], bool], pacer: Pacer) -> None:
        self.client = client
        self.directory = directory
        self.identity = identity
        self.wanted = wanted
        self.pacer = pacer

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

    def page(self, team: str, channel: str, is_dm: bool, after: str | None, limit: int) -> Page:
        """The messages after ``after`` (a ts), oldest first, with their threads' replies."""
        # With `oldest` and no `latest`, Slack returns the messages closest to `oldest`: a forward page.
        self.pacer.wait()
        resp = self.client.conversations_history(channel=channel, oldest=after or "1", inclusive=False, limit=limit)
        raw = sorted(resp.get("messages") or [], key=lambda m: float(m["ts"]))
        items = list(raw)
        for parent in raw:
            if parent.get("reply_count") and parent.get("thread_ts") == parent.get("ts"):
                items += self._replies(channel, parent["ts"])
        msgs = []
        for item in sorted(items, key=lambda m: float(m["ts"])):
            event = {**item, "channel": channel, "channel_type": "im" if is_dm else "channel"}
            if self.wanted(event):
                m = event_to_model(event, team, self.directory, self.identity.user_id)
                if m is not None:
                    msgs.append(m)
        newest = raw[-1]["ts"] if raw else after
        return Page(msgs, newest, more=bool(resp.get("has_more")) and bool(raw), fetched=len(items))

    def _replies(self, channel: str, thread_ts: str) -> list[dict]:
        out: list[dict] = []
        cursor = None
        while True:
            self.pacer.wait()
            resp = self.client.conversations_replies(channel=channel, ts=thread_ts, limit=200,
                                                     **({"cursor": cursor} if cursor else {}))
            out += [m for m in resp.get("messages") or [] if m.get("ts") != thread_ts]
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return out


class SlackHistory:
    """One channel's history for the backfiller, paged forward from a ts, threads included."""

    def __init__(self, reader: SlackHistoryReader, team: str, channel: str, name: str = "",
                 is_dm: bool = False) -> None:
        self.reader = reader
        self.team = team
        self.channel = channel
        self.key = ScopeKey(PLATFORM, team, channel)
        self.stream = ""
        self.channel_name = name
        self.is_dm = is_dm
        self.label = f"slack {team}/#{name or channel}"

    async def fetch_after(self, after: str | None, limit: int) -> Page:
        return await asyncio.to_thread(self.reader.page, self.team, self.channel, self.is_dm, after, limit)
