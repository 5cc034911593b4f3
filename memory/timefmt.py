"""Human-readable times for evidence lines and replies (UTC, minute precision)."""
from __future__ import annotations

from datetime import UTC, datetime


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M")
