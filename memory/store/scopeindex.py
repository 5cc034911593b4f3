"""One FTS5 index per scope, so every text statistic a reply reads comes from the scopes it may see.

FTS5's ``bm25()`` ranks with whole-table statistics (rows, average length, how many rows hold
each term). With every scope in one table, a channel's ranking moved when another channel's
messages changed, and a word's document count told anyone which words a private channel holds.
Each scope therefore gets its own contentless table (``messages_fts_s<id>``, ``records_fts_s<id>``)
and an ``fts5vocab`` view of it, created by the write path the first time the scope has something to
index. A search runs over the tables of the scopes it may see and nothing else; statistics are
summed over the same tables (`TermStats`). Migration 0008 moved the old shared tables into these.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..db import Connection, chunked, marks
from .base import StoreBase

TOKENIZE = "porter unicode61 remove_diacritics 2"


@dataclass(frozen=True)
class Family:
    """One kind of indexed text (messages or records): table names and columns per scope."""

    prefix: str
    columns: tuple[str, ...]

    def table(self, scope_id: int) -> str:
        return f"{self.prefix}_fts_s{int(scope_id)}"

    def vocab(self, scope_id: int) -> str:
        return f"{self.prefix}_vocab_s{int(scope_id)}"

    def ddl(self, scope_id: int) -> list[str]:
        cols = ", ".join(self.columns)
        return [f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table(scope_id)} USING fts5 ({cols}, content = '', "
                f"contentless_delete = 1, tokenize = '{TOKENIZE}')",
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.vocab(scope_id)} USING fts5vocab("
                f"{self.table(scope_id)}, 'row')"]


MESSAGES = Family("messages", ("text", "author_name"))
RECORDS = Family("records", ("content",))


@dataclass
class TermStats:
    """Document counts over a set of scopes: ``n`` documents, ``df[term]`` of them holding the term."""

    n: int = 0
    df: dict[str, int] = field(default_factory=dict)


def indexed_scopes(conn: Connection, fam: Family, scope_ids: Iterable[int]) -> list[int]:
    """Those of ``scope_ids`` (in the given order, once each) that have an index table."""
    wanted = list(dict.fromkeys(int(s) for s in scope_ids))
    if not wanted:
        return []
    names = {fam.table(s): s for s in wanted}
    have = {r[0] for r in conn.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks(names)})", list(names))}
    return [s for s in wanted if fam.table(s) in have]


def ensure(conn: Connection, fam: Family, scope_ids: Iterable[int]) -> None:
    """Create the index tables of these scopes if missing (inside the caller's write transaction)."""
    wanted = set(int(s) for s in scope_ids)
    for sid in sorted(wanted - set(indexed_scopes(conn, fam, wanted))):
        for statement in fam.ddl(sid):
            conn.execute(statement)


def insert(conn: Connection, fam: Family, rows: Sequence[tuple]) -> None:
    """Index ``rows`` of (scope id, rowid, *column values), each in its own scope's table."""
    by_scope: dict[int, list[tuple]] = defaultdict(list)
    for sid, rowid, *values in rows:
        by_scope[int(sid)].append((int(rowid), *values))
    ensure(conn, fam, by_scope)
    cols = ", ".join(fam.columns)
    for sid, items in by_scope.items():
        conn.executemany(f"INSERT INTO {fam.table(sid)} (rowid, {cols}) VALUES (?, {marks(fam.columns)})", items)


def delete(conn: Connection, fam: Family, pairs: Iterable[tuple[int, int]]) -> None:
    """Remove the index rows of (scope id, rowid) pairs; a scope without a table has none."""
    by_scope: dict[int, list[int]] = defaultdict(list)
    for sid, rowid in pairs:
        by_scope[int(sid)].append(int(rowid))
    for sid in indexed_scopes(conn, fam, by_scope):
        for chunk in chunked(by_scope[sid]):
            conn.execute(f"DELETE FROM {fam.table(sid)} WHERE rowid IN ({marks(chunk)})", chunk)


def rowids(conn: Connection, fam: Family, scope_id: int) -> list[int]:
    """Every indexed rowid of one scope (integrity checks and tests)."""
    if not indexed_scopes(conn, fam, [scope_id]):
        return []
    return [int(r[0]) for r in conn.execute(f"SELECT rowid FROM {fam.table(scope_id)}")]


def _varint(buf: bytes, i: int = 0) -> int:
    """SQLite's big-endian varint (FTS5 writes its averages record with it); no library reads it."""
    value = 0
    for n in range(9):
        byte = buf[i + n]
        if n == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return value


def documents(conn: Connection, fam: Family, scope_id: int) -> int:
    """Rows BM25 counts for one scope: FTS5's own total, read from its averages record in O(1).

    FTS5 does not lower this total when a contentless row is deleted, so it counts rows ever
    indexed in the scope (as ``bm25()`` does); it depends on nothing outside the scope.
    """
    return _total_rows(conn, fam, scope_id) if indexed_scopes(conn, fam, [scope_id]) else 0


def _total_rows(conn: Connection, fam: Family, scope_id: int) -> int:
    row = conn.execute(f"SELECT block FROM {fam.table(scope_id)}_data WHERE id = 1").fetchone()
    return _varint(bytes(row[0])) if row and row[0] else 0


def term_stats(conn: Connection, fam: Family, scope_ids: Iterable[int], terms: Sequence[str]) -> TermStats:
    """Documents and per-term document counts summed over ``scope_ids`` only (terms as stored: stems)."""
    out = TermStats(df={t: 0 for t in terms})
    wanted = list(dict.fromkeys(terms))
    for sid in indexed_scopes(conn, fam, scope_ids):
        out.n += _total_rows(conn, fam, sid)
        for chunk in chunked(wanted) if wanted else []:
            for term, doc in conn.execute(f"SELECT term, doc FROM {fam.vocab(sid)} WHERE term IN ({marks(chunk)})",
                                          chunk):
                out.df[term] = out.df.get(term, 0) + int(doc)
    return out


def vocabulary(conn: Connection, fam: Family, scope_ids: Iterable[int], terms: Sequence[str]) -> set[str]:
    """Which of ``terms`` (stems) occur in the indexed text of ``scope_ids``."""
    stats = term_stats(conn, fam, scope_ids, terms)
    return {t for t, d in stats.df.items() if d > 0}


def drop(conn: Connection, fam: Family, scope_id: int) -> None:
    """Drop a scope's index tables (reindexing from scratch)."""
    conn.execute(f"DROP TABLE IF EXISTS {fam.vocab(scope_id)}")
    conn.execute(f"DROP TABLE IF EXISTS {fam.table(scope_id)}")


class ScopeStats(StoreBase):
    """The store's text statistics, always over a given list of scopes (those an asker may see)."""

    def term_stats(self, scope_ids: Sequence[int], stems: Sequence[str]) -> TermStats:
        """Messages indexed in ``scope_ids`` and how many hold each stem (IDF, term pruning)."""
        with self.read() as conn:
            return term_stats(conn, MESSAGES, scope_ids, stems)

    def vocabulary(self, scope_ids: Sequence[int], stems: Sequence[str]) -> set[str]:
        """Which of ``stems`` occur in the messages of ``scope_ids`` ("is this a word the chat uses?")."""
        with self.read() as conn:
            return vocabulary(conn, MESSAGES, scope_ids, stems)

    def indexed_messages(self, scope_ids: Sequence[int]) -> int:
        """Messages BM25 counts in ``scope_ids`` (see `documents`)."""
        with self.read() as conn:
            return sum(_total_rows(conn, MESSAGES, s) for s in indexed_scopes(conn, MESSAGES, scope_ids))
