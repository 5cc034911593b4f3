"""Relative and explicit dates in chat text, resolved against the time they were said.

"next Friday" said on Wednesday 2025-03-05 means 2025-03-07; "yesterday" in a
message from 8 May 2023 means 7 May 2023. Used to annotate evidence and to pin
questions to a point in time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
_MONTH_RE = "|".join(m[:3] + r"[a-z]*" for m in MONTHS)

_RELATIVE = re.compile(
    r"\b(?P<simple>today|tonight|yesterday|tomorrow|the day before yesterday|the day after tomorrow)\b"
    r"|\b(?P<dir>last|next|this|coming|past)\s+(?P<unit>week(?:end)?|month|year|"
    + "|".join(WEEKDAYS) + r")\b"
    r"|\b(?P<n>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+(?P<nunit>days?|weeks?|months?|years?)\s+"
    r"(?P<ago>ago|from now|later)\b",
    re.I)
_EXPLICIT = re.compile(
    rf"\b(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<m1>{_MONTH_RE}),?\s+(?P<y1>\d{{4}})\b"
    rf"|\b(?P<m2>{_MONTH_RE})\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y2>\d{{4}})\b"
    rf"|\b(?P<y3>\d{{4}})-(?P<mo3>\d{{2}})-(?P<d3>\d{{2}})\b",
    re.I)
_WORDNUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}


@dataclass(frozen=True)
class DateRef:
    """A date expression found in text: [start, end) as dates, and its words."""

    text: str
    start: date
    end: date  # exclusive

    def label(self) -> str:
        if self.end - self.start == timedelta(days=1):
            return self.start.strftime("%Y-%m-%d (%a)")
        return f"{self.start:%Y-%m-%d}..{self.end - timedelta(days=1):%Y-%m-%d}"


def _month(name: str) -> int:
    return next(i for i, m in enumerate(MONTHS, 1) if name.lower().startswith(m[:3]))


def _add_months(d: date, n: int) -> date:
    y, m = divmod(d.month - 1 + n, 12)
    return date(d.year + y, m + 1, 1)


def _resolve(match: re.Match, today: date) -> DateRef | None:
    words = match.group(0)
    one = timedelta(days=1)
    if match.group("simple"):
        w = match.group("simple").lower()
        offset = {"today": 0, "tonight": 0, "yesterday": -1, "tomorrow": 1, "the day before yesterday": -2,
                  "the day after tomorrow": 2}[w]
        d = today + timedelta(days=offset)
        return DateRef(words, d, d + one)
    if match.group("dir"):
        direction = match.group("dir").lower()
        unit = match.group("unit").lower()
        sign = -1 if direction in ("last", "past") else (0 if direction == "this" else 1)
        if unit in WEEKDAYS:
            target = WEEKDAYS.index(unit)
            delta = target - today.weekday()
            if sign > 0:
                delta = delta if delta > 0 else delta + 7
            elif sign < 0:
                delta = delta if delta < 0 else delta - 7
            d = today + timedelta(days=delta)
            return DateRef(words, d, d + one)
        if unit == "week":
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=sign)
            return DateRef(words, monday, monday + timedelta(days=7))
        if unit == "weekend":
            saturday = today - timedelta(days=today.weekday()) + timedelta(days=5, weeks=sign)
            return DateRef(words, saturday, saturday + timedelta(days=2))
        if unit == "month":
            first = _add_months(today.replace(day=1), sign)
            return DateRef(words, first, _add_months(first, 1))
        if unit == "year":
            first = date(today.year + sign, 1, 1)
            return DateRef(words, first, date(first.year + 1, 1, 1))
    if match.group("n"):
        raw = match.group("n").lower()
        n = int(raw) if raw.isdigit() else _WORDNUM[raw]
        unit = match.group("nunit").lower().rstrip("s")
        sign = -1 if match.group("ago").lower() == "ago" else 1
        if unit == "day":
            d = today + timedelta(days=sign * n)
            return DateRef(words, d, d + one)
        if unit == "week":
            d = today + timedelta(weeks=sign * n)
            monday = d - timedelta(days=d.weekday())
            return DateRef(words, monday, monday + timedelta(days=7))
        if unit == "month":
            first = _add_months(today.replace(day=1), sign * n)
            return DateRef(words, first, _add_months(first, 1))
        first = date(today.year + sign * n, 1, 1)
        return DateRef(words, first, date(first.year + 1, 1, 1))
    return None


def find_dates(text: str, said_at: float) -> list[DateRef]:
    """Every date expression in ``text``, resolved against the moment it was said."""
    today = datetime.fromtimestamp(said_at, tz=UTC).date()
    found: list[DateRef] = []
    for m in _RELATIVE.finditer(text):
        ref = _resolve(m, today)
        if ref:
            found.append(ref)
    for m in _EXPLICIT.finditer(text):
        try:
            if m.group("d1"):
                d = date(int(m.group("y1")), _month(m.group("m1")), int(m.group("d1")))
            elif m.group("d2"):
                d = date(int(m.group("y2")), _month(m.group("m2")), int(m.group("d2")))
            else:
                d = date(int(m.group("y3")), int(m.group("mo3")), int(m.group("d3")))
        except ValueError:
            continue
        found.append(DateRef(m.group(0), d, d + timedelta(days=1)))
    return found


def annotate(text: str, said_at: float) -> str:
    """``text`` with each relative date followed by the date it means, e.g. 'next Friday [= 2025-03-07 (Fri)]'."""
    refs = [r for r in find_dates(text, said_at) if not _EXPLICIT.fullmatch(r.text)]
    out = text
    for ref in sorted(refs, key=lambda r: -len(r.text)):
        out = out.replace(ref.text, f"{ref.text} [= {ref.label()}]", 1)
    return out
