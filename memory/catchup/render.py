"""A digest as chat text: a header, one group per kind, one cited line per item, and what was left out.

Each line quotes the messages it rests on as they read now, with [n] markers the adapters turn into
links; a change reads "was: ... [1] -> now: ... [2]". The text is the same on every surface.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from ..models import StoredMessage
from .digest import KINDS, Digest, DigestLine
from .since import describe

HEADINGS = {"decision": "Decisions", "change": "Changes", "plan": "Plans", "norm": "Rules",
            "task": "Who took on what", "question": "Questions to you nobody answered",
            "mention": "For you"}
EXCERPT_CHARS = 140
assert set(HEADINGS) == set(KINDS)


@dataclass
class Rendered:
    """The digest's text, the message cited by each [n] (in order), and each line's own text and numbers."""

    text: str
    cited: list[StoredMessage]
    lines: list[tuple[str, list[int]]]  # (line text, the [n] numbers it cites) for the support check


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit - 1)
    return flat[: cut if cut > limit // 2 else limit - 1].rstrip() + "…"


def render(digest: Digest, *, tz: tzinfo = UTC, where: str = "", since_note: str = "",
           all_hint: str = "`/catchup all`", footer: str = "", summaries: Mapping[str, str] | None = None) -> Rendered:
    """The text of a digest (``where``: '#general'; ``since_note``: why it starts when it does;
    ``summaries``: a checked model sentence per kind, shown under its heading)."""
    since = describe(datetime.fromtimestamp(digest.since, UTC), tz)
    place = f" in {where}" if where else ""
    note = f" ({since_note})" if since_note else ""
    numbers: dict[int, int] = {}
    cited: list[StoredMessage] = []

    def quote(mid: int) -> str:
        m = digest.messages[mid]
        if mid not in numbers:
            numbers[mid] = len(numbers) + 1
            cited.append(m)
        return f"{m.author_name}: “{excerpt(m.text)}” [{numbers[mid]}]"

    if digest.quiet:
        text = f"Nothing new for you{place} since {since}{note}: no decisions, plans, norms or mentions."
        return Rendered(text + (f"\n{footer}" if footer else ""), [], [])
    out = [f"Since {since}{note}{place}:"]
    lines: list[tuple[str, list[int]]] = []
    current = ""
    for ln in digest.lines:
        if ln.kind != current:
            current = ln.kind
            out.append(f"{HEADINGS[ln.kind]}:")
            if summaries and ln.kind in summaries:
                out.append(f"  In short: {summaries[ln.kind]}")
        body = _line(ln, quote)
        out.append(f"- {body}")
        lines.append((body, [numbers[m] for m in ln.cited if m in numbers]))
    if digest.more:
        out.append(f"…and {digest.more} more: {all_hint}")
    if digest.capped:
        out.append(f"(only the newest {digest.scanned} messages of that time were read)")
    if footer:
        out.append(footer)
    return Rendered("\n".join(out), cited, lines)


def _line(ln: DigestLine, quote: Callable[[int], str]) -> str:
    was = " / ".join(quote(m) for m in ln.was_ids)  # numbered first: the older message reads first
    new = " / ".join(quote(m) for m in ln.message_ids)
    return f"was: {was} → now: {new}" if was else new
