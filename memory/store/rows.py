"""What the store hands back: its dataclasses, and message rows mapped into them by column name.

Every read that builds a ``StoredMessage`` selects ``MESSAGE_COLUMNS`` (aliased to the
field names) through ``select_messages``, and scopes and the roster go through
``db.select_into`` the same way, so a SELECT list and its dataclass never drift apart by position.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..db import Connection, select_into
from ..models import ScopeKey, StoredMessage
from ..tally import Tally

MESSAGE_COLUMNS = (
    "m.id, m.scope_id, s.platform, s.workspace, s.channel, m.thread, m.msg_id, m.author_id, "
    "m.author_name, m.text, m.ts, m.session, m.turn, m.reply_to, m.edited_at IS NOT NULL AS edited, "
    "m.bot_traffic AS to_bot")
MESSAGE_SOURCE = "FROM messages m JOIN scopes s ON s.id = m.scope_id"


def select_messages(conn: Connection, tail: str, args: Sequence[Any] = ()) -> list[StoredMessage]:
    """Messages of ``SELECT MESSAGE_COLUMNS FROM messages m JOIN scopes s ... <tail>`` (WHERE, ORDER, LIMIT)."""
    return select_into(conn, StoredMessage, f"SELECT {MESSAGE_COLUMNS} {MESSAGE_SOURCE} {tail}", args,
                       convert={"edited": bool, "to_bot": bool})


@dataclass
class IngestResult(Tally):
    """What one ingest (or an embedding pass) did, summed over its batches."""

    inserted: int = 0
    duplicates: int = 0
    skipped: int = 0
    embedded: int = 0
    reused_vectors: int = 0


PERSON_COLUMNS = "scope_id, person_id, display_name, aliases, n_messages, first_ts, last_ts, is_bot"


@dataclass
class Person:
    """A roster entry: someone who has spoken in a scope."""

    scope_id: int
    person_id: str
    display_name: str
    aliases: list[str]
    n_messages: int
    first_ts: float
    last_ts: float
    is_bot: bool = False

    def names(self) -> list[str]:
        return [self.display_name, *self.aliases]


SCOPE_COLUMNS = "id, platform, workspace, channel, name, is_dm, opted_out"


@dataclass
class Scope:
    """One channel (or DM) memory lives in."""

    id: int
    platform: str
    workspace: str
    channel: str
    name: str
    is_dm: bool
    opted_out: bool

    @property
    def key(self) -> ScopeKey:
        return ScopeKey(self.platform, self.workspace, self.channel)

    def label(self) -> str:
        shown = self.name or self.channel
        return f"{self.platform}:{self.workspace + '/' if self.workspace else ''}{shown}"
