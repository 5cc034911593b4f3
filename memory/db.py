"""Opening the one SQLite file: extension-capable SQLite, WAL, busy timeout, sqlite-vec.

This is the only place that loads sqlite-vec or chooses the SQLite driver. It also
holds the two query helpers every reader shares: rows by column name (``named``)
and id lists cut into IN (...) lists (``chunked`` and ``marks``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, Sized, TypeVar

from .errors import StoreError

try:  # pysqlite3-binary ships a modern SQLite that can load extensions.
    import pysqlite3.dbapi2 as sqlite3  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised only on machines without it
    import sqlite3  # type: ignore[no-redef]

import sqlite_vec

BUSY_TIMEOUT_MS = 10_000
Connection = Any  # pysqlite3 and sqlite3 connections share the DB-API shape
Row = sqlite3.Row
# Ids per IN (...) list: well under SQLite's bound-variable limit, and one statement per chunk stays cheap.
CHUNK = 500

T = TypeVar("T")


def connect(path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Connection:
    """Open (creating if needed) a store file with the settings every caller needs."""
    target = str(path)
    if target != ":memory:":
        parent = Path(target).expanduser().resolve().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for the store {target}: {exc}") from exc
    try:
        conn = sqlite3.connect(target, timeout=busy_timeout_ms / 1000, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {target}: {exc}") from exc
    try:
        if not hasattr(conn, "enable_load_extension"):
            raise StoreError(
                "this Python's sqlite3 cannot load extensions, so sqlite-vec cannot work; "
                "install pysqlite3-binary (scripts/setup.sh does)")
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if target != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"the store {target} could not switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -65536")
    except sqlite3.OperationalError as exc:
        conn.close()
        raise StoreError(f"cannot prepare the store {target}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def named(conn: Connection, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
    """A query's rows addressable by column name (``row["ts"]``), so mapping them into
    dataclasses does not depend on the order of the SELECT list."""
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur.execute(sql, args).fetchall()


def chunked(items: Iterable[T], n: int = CHUNK) -> Iterator[list[T]]:
    """``items`` in lists of at most ``n``, one IN (...) list each."""
    seq = items if isinstance(items, (list, tuple)) else list(items)
    for i in range(0, len(seq), n):
        yield list(seq[i:i + n])


def marks(items: Sized) -> str:
    """The ``?,?,?`` placeholders of an IN (...) list for ``items``."""
    return ",".join("?" * len(items))


def sqlite_version(conn: Connection) -> str:
    return conn.execute("select sqlite_version()").fetchone()[0]


OperationalError = sqlite3.OperationalError
IntegrityError = sqlite3.IntegrityError
DatabaseError = sqlite3.DatabaseError
