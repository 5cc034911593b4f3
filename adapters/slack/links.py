"""Slack message links: reading one a user pasted, and writing one for a cited message."""
from __future__ import annotations

import re

PLATFORM = "slack"
_LINK = re.compile(r"/archives/([A-Z0-9]+)/p(\d{10})(\d{6})")
_BARE_TS = re.compile(r"^\d{10}\.\d{6}$")


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
