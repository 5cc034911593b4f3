"""What the store hands back: its dataclasses, and message rows mapped into them by column name.

Every read that builds a ``StoredMessage`` selects ``MESSAGE_COLUMNS`` (aliased to the
field names) through ``select_messages``, so the SELECT list and the dataclass can never
drift apart by position.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..db import Connection, Row, named
from ..models import ScopeKey, StoredMessage
from ..tally import Tally

MESSAGE_COLUMNS = (
    "m.id, m.scope_id, s.platform, s.workspace, s.channel, m.thread, m.msg_id, m.author_id, "
    "m.author_name, m.text, m.ts, m.session, m.turn, m.reply_to, m.edited_at IS NOT NULL AS edited, "
    "m.bot_traffic AS to_bot")
MESSAGE_SOURCE = "FROM messages m JOIN scopes s ON s.id = m.scope_id"


def row_to_message(row: Row) -> StoredMessage:
    """A ``StoredMessage`` from a row of ``MESSAGE_COLUMNS`` read with ``db.named``."""
    fields = dict(row)
    fields["edited"], fields["to_bot"] = bool(fields["edited"]), bool(fields["to_bot"])
    return StoredMessage(**fields)


def select_messages(conn: Connection, tail: str, args: Sequence[Any] = ()) -> list[StoredMessage]:
    """Messages of ``SELECT MESSAGE_COLUMNS FROM messages m JOIN scopes s ... <tail>`` (WHERE, ORDER, LIMIT)."""
    return [row_to_message(r) for r in named(conn, f"SELECT {MESSAGE_COLUMNS} {MESSAGE_SOURCE} {tail}", args)]


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

    @classmethod
    def from_row(cls, row: Row) -> "Person":
        """From a row of ``PERSON_COLUMNS`` (aliases are stored as a JSON list)."""
        fields = dict(row)
        fields["aliases"], fields["is_bot"] = json.loads(fields["aliases"]), bool(fields["is_bot"])
        return cls(**fields)

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

    @classmethod
    def from_row(cls, row: Row) -> "Scope":
        """From a row of ``SCOPE_COLUMNS``."""
        fields = dict(row)
        fields["is_dm"], fields["opted_out"] = bool(fields["is_dm"]), bool(fields["opted_out"])
        return cls(**fields)

    @property
    def key(self) -> ScopeKey:
        return ScopeKey(self.platform, self.workspace, self.channel)

    def label(self) -> str:
        shown = self.name or self.channel
        return f"{self.platform}:{self.workspace + '/' if self.workspace else ''}{shown}"
