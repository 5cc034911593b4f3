"""Who is who on Slack: the bot's own identity, people's display names and admin flags, channel names.

Every lookup is a Web API call, so answers are cached (names for an hour); a failed
lookup falls back to the id and is logged, never raised into an event.
"""
from __future__ import annotations

import html
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)
T = TypeVar("T")

NAME_TTL_S = 3600.0
DEFAULT_BASE_URL = "https://slack.com/"
_USER_REF = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL_REF = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_URL_REF = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")


@dataclass
class SlackUser:
    name: str
    is_admin: bool
    is_bot: bool


class BotIdentity:
    """The bot's own user id and the workspace's base URL, from ``auth.test`` on first use."""

    def __init__(self, client: WebClient) -> None:
        self.client = client
        self.known_user_id: str | None = None  # None until auth.test has answered
        self._base_url: str | None = None

    @property
    def user_id(self) -> str | None:
        if self.known_user_id is None:
            self.load()
        return self.known_user_id

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            self.load()
        return self._base_url or DEFAULT_BASE_URL

    def load(self) -> None:
        try:
            info = self.client.auth_test()
            self._base_url, self.known_user_id = info.get("url") or DEFAULT_BASE_URL, info.get("user_id")
        except SlackApiError as exc:
            log.warning("slack auth.test failed: %s", exc.response.get("error"))
            self._base_url = DEFAULT_BASE_URL


class SlackDirectory:
    """Display names and admin flags from ``users.info`` (and channel names), cached for an hour."""

    def __init__(self, client: WebClient, *, ttl_s: float = NAME_TTL_S) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self._users: dict[str, tuple[SlackUser, float]] = {}
        self._channels: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def user(self, user_id: str) -> SlackUser:
        return self._cached(self._users, user_id, self._fetch_user)

    def channel_name(self, channel_id: str) -> str:
        return self._cached(self._channels, channel_id, self._fetch_channel_name)

    def _cached(self, table: dict[str, tuple[T, float]], key: str, fetch: Callable[[str], T]) -> T:
        """``table``'s fresh answer for ``key``, else ``fetch(key)`` outside the lock, kept for ``ttl_s``."""
        now = time.monotonic()
        with self._lock:
            hit = table.get(key)
        if hit and hit[1] > now:
            return hit[0]
        value = fetch(key)
        with self._lock:
            table[key] = (value, now + self.ttl_s)
        return value

    def _fetch_user(self, user_id: str) -> SlackUser:
        try:
            info = self.client.users_info(user=user_id).get("user") or {}
            profile = info.get("profile") or {}
            return SlackUser(profile.get("display_name") or profile.get("real_name") or info.get("real_name")
                             or info.get("name") or user_id,
                             bool(info.get("is_admin") or info.get("is_owner") or info.get("is_primary_owner")),
                             bool(info.get("is_bot")))
        except SlackApiError as exc:
            log.warning("slack users.info %s failed (%s); using the id as the name", user_id, exc.response.get("error"))
            return SlackUser(user_id, False, False)

    def _fetch_channel_name(self, channel_id: str) -> str:
        try:
            return (self.client.conversations_info(channel=channel_id).get("channel") or {}).get("name") or ""
        except SlackApiError as exc:
            log.debug("slack conversations.info %s failed: %s", channel_id, exc.response.get("error"))
            return ""

    def plain_text(self, text: str) -> str:
        """Slack markup as people read it: <@U1> becomes @Name, links keep their label and address."""
        text = _USER_REF.sub(lambda m: "@" + self.user(m.group(1)).name, text)
        text = _CHANNEL_REF.sub(lambda m: "#" + (m.group(2) or self.channel_name(m.group(1)) or m.group(1)), text)
        text = _URL_REF.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
        return html.unescape(text)
