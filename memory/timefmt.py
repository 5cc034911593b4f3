"""Human-readable times for evidence lines and replies (UTC, minute precision)."""
from __future__ import annotations

from datetime import datetime, timezone


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
