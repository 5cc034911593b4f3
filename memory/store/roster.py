"""The roster: who has spoken in a scope, under which names (kept up to date by ingest)."""
from __future__ import annotations

import json

from ..db import select_into
from ..errors import InputError
from .base import StoreBase
from .rows import PERSON_COLUMNS, Person


class Roster(StoreBase):
    """Roster reads and the one roster edit a person can make: adding an alias."""

    def roster(self, scope_id: int) -> list[Person]:
        """Everyone who has spoken in the scope, in the order they first spoke."""
        with self.read() as conn:
            return select_into(conn, Person, f"SELECT {PERSON_COLUMNS} FROM people WHERE scope_id = ? "
                               "ORDER BY first_ts", (scope_id,), convert={"aliases": json.loads, "is_bot": bool})

    def add_alias(self, scope_id: int, person_id: str, alias: str) -> None:
        """Another name a person goes by in the scope (what questions and records may call them)."""
        alias = alias.strip()
        if not alias:
            raise InputError("an alias cannot be empty")
        with self.write() as conn:
            row = conn.execute("SELECT aliases FROM people WHERE scope_id = ? AND person_id = ?",
                               (scope_id, person_id)).fetchone()
            if row is None:
                raise InputError(f"{person_id} has not spoken in this channel, so has no roster entry")
            aliases = json.loads(row[0])
            if alias not in aliases:
                aliases.append(alias)
            conn.execute("UPDATE people SET aliases = ? WHERE scope_id = ? AND person_id = ?",
                         (json.dumps(aliases), scope_id, person_id))
