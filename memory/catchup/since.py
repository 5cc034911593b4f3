"""The start of a catch-up: a date, weekday, "yesterday", "since Monday" or a duration such as "3d".

Resolved against the moment of asking in the workspace's time zone. A day without a time of day
means the start of that day ("since Monday" is Monday 00:00, not Monday at the current clock time).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dateparser

from ..errors import TimeExpressionError

# dateparser has no compact "3d" / "2h" form: these few units are parsed here.
_DURATION = re.compile(r"^(?:last |past )?(\d{1,4})\s*(m|min|mins|minutes?|h|hrs?|hours?|d|days?|w|wks?|weeks?)$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_LEAD = re.compile(r"^(?:since|from|after|starting)\s+", re.I)
_HAS_CLOCK = re.compile(r"\d{1,2}[:.]\d{2}|\d\s*(?:am|pm)\b|\b(?:noon|midnight|ago|hours?|minutes?|now)\b", re.I)
MAX_CHARS = 80


def zone(name: str) -> tzinfo:
    """A time zone by IANA name ("Europe/Berlin"); a clear error for an unknown one."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise TimeExpressionError(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'") from None


def parse_duration(text: str) -> timedelta | None:
    """'3d', '2h', '1w', '90 min', 'last 3 days' as a duration; None when the text is not one."""
    m = _DURATION.match(text.strip().lower())
    if not m:
        return None
    return timedelta(seconds=int(m.group(1)) * _UNIT_S[m.group(2)[0]])


def resolve_since(text: str, now: datetime, tz: tzinfo) -> datetime:
    """The moment ``text`` names, as an aware datetime, relative to ``now`` in ``tz``.

    Raises ``TimeExpressionError`` for text that names no time, or a time after ``now``.
    """
    if now.tzinfo is None:
        raise ValueError("now must be time-zone aware")
    raw = " ".join(text.split())
    words = _LEAD.sub("", raw).strip(" .?!")
    if not words:
        raise TimeExpressionError("say since when, e.g. `yesterday`, `Monday`, `2026-03-02` or `3d`")
    if len(words) > MAX_CHARS:
        raise TimeExpressionError(f"that time is {len(words)} characters long; say it in a few words (e.g. `3d`)")
    local_now = now.astimezone(tz)
    span = parse_duration(words)
    if span is not None:
        if span <= timedelta(0):
            raise TimeExpressionError(f"{raw!r} is no time ago; try e.g. `1d`")
        return local_now - span
    try:
        found = dateparser.parse(words, languages=["en"], settings={
            "PREFER_DATES_FROM": "past", "RELATIVE_BASE": local_now.replace(tzinfo=None),
            "RETURN_AS_TIMEZONE_AWARE": False, "PREFER_DAY_OF_MONTH": "first"})
    except (ValueError, OverflowError, TypeError):  # dateparser raises on some odd text instead of answering None
        found = None
    if found is None:
        raise TimeExpressionError(f"I can't read {raw!r} as a time; try `yesterday`, `Monday`, `2026-03-02` or `3d`")
    when = found.replace(tzinfo=tz)
    if not _HAS_CLOCK.search(words):
        when = when.replace(hour=0, minute=0, second=0, microsecond=0)
    if when > local_now:
        raise TimeExpressionError(f"{raw!r} is in the future ({when:%a %d %b %Y %H:%M}); there is nothing to catch "
                                  "up on yet")
    return when


def describe(when: datetime, tz: tzinfo) -> str:
    """A short label for a moment in the workspace's time zone: 'Mon 30 Nov 09:00'."""
    local = when.astimezone(tz)
    return f"{local:%a} {local.day} {local:%b %Y %H:%M}"
