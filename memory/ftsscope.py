"""One read transaction around a search that reads several scopes' FTS5 tables.

Each scope has its own FTS5 table (memory/store/scopeindex.py); a search lists the tables of the
scopes it may see and queries each, inside one snapshot, so a scope or message written meanwhile
cannot appear in one table's results and not another's.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .db import Connection


@contextmanager
def snapshot(conn: Connection) -> Iterator[Connection]:
    """One read transaction (a consistent WAL snapshot) unless the connection is already in one."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
