"""Platform-neutral replies that adapters render (text, citations, structured items)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Citation:
    """A numbered reference [n] to a stored message."""

    n: int
    message_id: int
    platform: str
    workspace: str
    channel: str
    msg_id: str
    author: str
    ts: float
    excerpt: str

    def label(self) -> str:
        return f"[{self.n}] {self.author}: {self.excerpt}"


@dataclass
class Reply:
    """What the bot says back: text with [n] markers plus the citations they point to."""

    text: str
    citations: list[Citation] = field(default_factory=list)
    ephemeral: bool = False
    data: dict = field(default_factory=dict)
    attachment_name: str | None = None
    attachment: bytes | None = None
    dm: bool = False  # send it to the asker's direct messages (the surface confirms privately where it was asked)


def split_for_chat(text: str, limit: int) -> list[str]:
    """Split text into chunks of at most ``limit`` characters, preferring line and word breaks."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit + 1)
        if cut <= 0:
            cut = rest.rfind(" ", 0, limit + 1)
        if cut <= 0:
            cut = limit
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest or not chunks:
        chunks.append(rest)
    return chunks


def cut_for_chat(text: str, limit: int) -> str:
    """Cut a long answer to ``limit`` characters at a word break, marking the cut."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > limit // 2 else limit - 1].rstrip() + "…"
