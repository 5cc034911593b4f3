"""The one internal message model every adapter translates to."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .errors import InputError

MAX_ID_LEN = 256
MAX_NAME_LEN = 256


def _clean_id(value: object, what: str, allow_empty: bool = False) -> str:
    text = clean_text("" if value is None else str(value))
    if not text and not allow_empty:
        raise InputError(f"{what} is empty; every message needs a {what}")
    if len(text) > MAX_ID_LEN:
        raise InputError(f"{what} is {len(text)} characters long; the limit is {MAX_ID_LEN}")
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Drop NUL bytes (SQLite C APIs truncate at them) but keep all other text as typed.

    Lone UTF-16 surrogates (JSON allows "\\ud83d" alone) cannot be stored as UTF-8: a pair
    becomes the character it encodes, a lone half becomes U+FFFD, instead of failing the write.
    """
    text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
    return text


# The owner of records about the whole group (decisions, plans, norms) rather than one member.
GROUP = "GROUP"

@dataclass(frozen=True)
class Message:
    """A chat message as Chorus sees it, whatever platform it came from.

    ``channel`` is the memory scope; a thread keeps its parent's ``channel`` and
    names itself in ``thread``. A DM is its own channel with ``is_dm`` set.
    """

    platform: str
    workspace: str
    channel: str
    msg_id: str
    author_id: str
    author_name: str
    text: str
    ts: float
    thread: str = ""
    reply_to: str | None = None
    is_dm: bool = False
    is_bot: bool = False
    channel_name: str = ""
    session_hint: int | None = None
    # Addressed to Chorus (an @mention or a command): kept for the record, never evidence or writer input.
    to_bot: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "platform", _clean_id(self.platform, "platform"))
        object.__setattr__(self, "workspace", _clean_id(self.workspace, "workspace", allow_empty=True))
        object.__setattr__(self, "channel", _clean_id(self.channel, "channel"))
        object.__setattr__(self, "msg_id", _clean_id(self.msg_id, "message id"))
        object.__setattr__(self, "author_id", _clean_id(self.author_id, "author id"))
        name = clean_text(str(self.author_name or "")).strip()[:MAX_NAME_LEN] or self.author_id
        object.__setattr__(self, "author_name", name)
        object.__setattr__(self, "thread", _clean_id(self.thread, "thread", allow_empty=True))
        if not isinstance(self.text, str):
            raise InputError("message text must be a string")
        object.__setattr__(self, "text", clean_text(self.text))
        try:
            ts = float(self.ts)
        except (TypeError, ValueError):
            raise InputError(f"message timestamp {self.ts!r} is not a number") from None
        if ts != ts or ts in (float("inf"), float("-inf")):
            raise InputError("message timestamp is not finite")
        object.__setattr__(self, "ts", ts)

    @property
    def when(self) -> datetime:
        return datetime.fromtimestamp(self.ts, tz=UTC)


@dataclass(frozen=True)
class ScopeKey:
    """Where memory lives: one channel (or DM) of one workspace on one platform."""

    platform: str
    workspace: str
    channel: str

    @classmethod
    def of(cls, msg: Message) -> ScopeKey:
        return cls(msg.platform, msg.workspace, msg.channel)


@dataclass
class StoredMessage:
    """A message row read back from Track 1."""

    id: int
    scope_id: int
    platform: str
    workspace: str
    channel: str
    thread: str
    msg_id: str
    author_id: str
    author_name: str
    text: str
    ts: float
    session: int
    turn: int
    reply_to: str | None = None
    edited: bool = False
    to_bot: bool = False

    @property
    def when(self) -> datetime:
        return datetime.fromtimestamp(self.ts, tz=UTC)

    def citation(self) -> str:
        """A stable, human-readable reference to this message."""
        return f"{self.platform}:{self.channel}/{self.msg_id}"


@dataclass
class SearchHit:
    """One Track 1 search result with the scores that put it there."""

    message: StoredMessage
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None
    via: str = "hybrid"
