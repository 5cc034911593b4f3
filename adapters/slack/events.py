"""Slack events as Chorus sees them: which are kept, how one becomes a ``Message``, and retries dropped.

Slack re-delivers an event it thinks was missed; ``EventDeduper`` remembers event ids
in the store, so a retry after a restart is still recognised.
"""
from __future__ import annotations

from bot.door import Door
from memory.models import Message

from .links import PLATFORM
from .users import SlackDirectory, SlackUser

NEW_MESSAGE_SUBTYPES = (None, "thread_broadcast", "file_share", "me_message", "bot_message")


def is_wanted(event: dict, own_user_id: str | None, *, ignore_other_bots: bool) -> bool:
    """Never our own messages; other bots' only if configured."""
    if event.get("user") and event.get("user") == own_user_id:
        return False
    if (event.get("bot_id") or event.get("subtype") == "bot_message") and ignore_other_bots:
        return False
    return True


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
    """Answers Slack's re-deliveries once: the bot's door remembers handled event ids for a day."""

    def __init__(self, door: Door) -> None:
        self.door = door

    def first_time(self, event_id: str) -> bool:
        return self.door.first_event(PLATFORM, event_id)
