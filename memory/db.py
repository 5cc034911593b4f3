"""Opening the one SQLite file: extension-capable SQLite, WAL, busy timeout, sqlite-vec.

This is the only place that loads sqlite-vec or chooses the SQLite driver. It also
holds the query helpers every reader shares: rows mapped by column name into a
dataclass (``select_into``) or read by name (``named``), and id lists cut into
IN (...) lists (``chunked`` and ``marks``).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import fields
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import StoreError

try:  # pysqlite3-binary ships a modern SQLite that can load extensions.
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - exercised only on machines without it
    import sqlite3

import sqlite_vec

BUSY_TIMEOUT_MS = 10_000
Connection = Any  # pysqlite3 and sqlite3 connections share the DB-API shape
if TYPE_CHECKING:
    from sqlite3 import Row  # pysqlite3's Row is the stdlib's, built against a newer SQLite
else:
    Row = sqlite3.Row
# Ids per IN (...) list: well under SQLite's bound-variable limit, and one statement per chunk stays cheap.
CHUNK = 500

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")


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


def select_into(conn: Connection, cls: type[D], sql: str, args: Sequence[Any] = (), *,
                convert: Mapping[str, Callable[[Any], Any]] | None = None) -> list[D]:
    """The rows of ``sql`` as instances of the dataclass ``cls``, each field filled from the column of its name.

    The SELECT must name (or alias) a column for every field up to the last one it fills; fields after
    that keep their defaults. ``convert`` turns a stored value into the field's type (``bool``,
    ``json.loads``). Columns are matched to fields once per query, so a row costs what positional
    indexing did.
    """
    cur = conn.execute(sql, args)
    columns = [d[0] for d in cur.description]
    wanted = [f.name for f in fields(cls) if f.init]
    n = 0
    while n < len(wanted) and wanted[n] in columns:
        n += 1
    missing = [name for name in wanted[n:] if name in columns]
    if missing or n == 0:
        raise ValueError(f"{cls.__name__}: the query names {columns}, which do not fill its fields in order")
    index = [columns.index(name) for name in wanted[:n]]
    pick = itemgetter(*index) if n > 1 else (lambda row: (row[index[0]],))
    fixes = [(wanted.index(name), fn) for name, fn in (convert or {}).items()]
    out: list[D] = []
    for row in cur:
        values = pick(row)
        if fixes:
            values = list(values)
            for i, fn in fixes:
                values[i] = fn(values[i])
        out.append(cls(*values))
    return out


def outgrown(n: int, at: int, share: float = 0.05) -> bool:
    """Whether a store whose newest message id is ``n`` has grown past ``share`` (or shrunk) since a
    cache of rough counts was taken at ``at``: such counts only steer speed, so a little stale will do."""
    return n > at * (1 + share) or n < at


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
