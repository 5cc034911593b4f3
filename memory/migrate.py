"""Ordered, named schema migrations recorded in a table.

Each file in the ``migrations`` package (``NNNN_name.sql``) runs once, inside its
own transaction, and is recorded in ``_migrations``. A released migration is never
edited: changes come as a new file. A change SQL alone cannot state (one table per
existing scope, 0008) is a ``NNNN_name.py`` file defining ``upgrade(conn)``, run the
same way: inside the migration's transaction, recorded under the same name.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import resources

from .db import Connection, DatabaseError
from .errors import StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.(sql|py)$")
# First line of a migration that rebuilds a table other tables reference (SQLite's documented procedure:
# foreign keys off outside the transaction, the table rebuilt inside it, then checked and switched back on).
REBUILD_MARK = "-- chorus: rebuilds a referenced table"


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str  # the script, or a Python migration's source (``kind == "py"``)
    kind: str = "sql"

    @property
    def key(self) -> str:
        return f"{self.number:04d}_{self.name}"


def available() -> list[Migration]:
    """All migrations shipped with this version, in order."""
    found: list[Migration] = []
    for entry in resources.files("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8"), match.group(3)))
    found.sort(key=lambda m: m.number)
    numbers = [m.number for m in found]
    if len(set(numbers)) != len(numbers):
        raise StoreError(f"two migrations share a number: {numbers}")
    return found


def applied(conn: Connection) -> list[str]:
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    return [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name")]


def newer_and_pending(done: set[str]) -> tuple[list[str], list[Migration]]:
    """Applied migrations this Chorus does not know (a newer one wrote the file), and known ones not applied."""
    known = available()
    return sorted(done - {m.key for m in known}), [m for m in known if m.key not in done]


def newer_store_error(unknown: list[str]) -> StoreError:
    return StoreError(f"the store was migrated by a newer Chorus ({unknown}); upgrade Chorus to open it")


def migrate(conn: Connection) -> list[str]:
    """Apply every pending migration; return the names applied now."""
    done = set(applied(conn))
    known = available()
    unknown, _ = newer_and_pending(done)
    if unknown:
        raise newer_store_error(unknown)
    ran: list[str] = []
    for mig in known:
        if mig.key in done:
            continue
        rebuild = mig.sql.startswith(REBUILD_MARK)
        if rebuild:
            conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction, so set before BEGIN
        try:
            conn.execute("BEGIN IMMEDIATE")
            if mig.kind == "py":
                run_python(conn, mig)
            else:
                for statement in split_statements(mig.sql):
                    conn.execute(statement)
            if rebuild and conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
                raise DatabaseError("the rebuilt table breaks a foreign key")
            conn.execute("INSERT INTO _migrations(name, applied_at) VALUES (?, ?)", (mig.key, time.time()))
            conn.execute("COMMIT")
        except DatabaseError as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"migration {mig.key} failed and was rolled back: {exc}") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            if rebuild:
                conn.execute("PRAGMA foreign_keys = ON")
        ran.append(mig.key)
    return ran


def run_python(conn: Connection, mig: Migration) -> None:
    """Run a Python migration's ``upgrade(conn)`` inside the caller's transaction."""
    namespace: dict = {"__name__": f"migrations.{mig.key}"}
    exec(compile(mig.sql, f"migrations/{mig.key}.py", "exec"), namespace)  # our own shipped file
    upgrade = namespace.get("upgrade")
    if not callable(upgrade):
        raise StoreError(f"migration {mig.key} defines no upgrade(conn)")
    upgrade(conn)


def split_statements(sql: str) -> list[str]:
    """Split a migration script into complete statements (a trigger body, as in 0001, contains ';')."""
    from .db import sqlite3

    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise StoreError(f"incomplete SQL statement in migration: {buf.strip()[:80]}")
    return out
