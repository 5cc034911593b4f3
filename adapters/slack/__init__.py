"""Slack adapter (slack-bolt): Socket Mode by default, HTTP Events API as an option.

``message`` events (thread replies, ``message_changed``, ``message_deleted``) and
``app_mention`` reach the bot; one slash command (``/chorus ask ...``) carries every
command of the command table. Split by concept, like bolt-python's own adapters:
``adapter`` (the Bolt App and its listeners), ``events`` (which events are kept, and
as what; retries dropped by event id), ``history`` (backfill reading), ``users`` (names,
admin flags, the bot's identity), ``links``, ``http`` (the Events API bridge) and
``retry`` (slack_sdk's retry handlers).
"""
from .adapter import MAX_CHARS, SlackAdapter
from .events import EventDeduper, event_to_model
from .history import SlackHistory, SlackHistoryReader
from .links import PLATFORM, message_link, parse_link
from .users import SlackDirectory, SlackUser

__all__ = ["MAX_CHARS", "PLATFORM", "EventDeduper", "SlackAdapter", "SlackDirectory", "SlackHistory",
           "SlackHistoryReader", "SlackUser", "event_to_model", "message_link", "parse_link"]
