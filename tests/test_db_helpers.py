"""The shared query helpers: rows mapped into dataclasses by column name, and IN-list chunks."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memory.db import chunked, connect, marks, named, select_into


@dataclass
class _Thing:
    id: int
    name: str
    flag: bool
    tags: list = field(default_factory=list)


def test_select_into_maps_by_name_not_position() -> None:
    conn = connect(":memory:")
    rows = select_into(conn, _Thing, "SELECT 1 AS flag, 'a' AS name, 7 AS id", convert={"flag": bool})
    assert rows == [_Thing(7, "a", True)] and rows[0].flag is True and rows[0].tags == []


def test_select_into_refuses_a_query_that_skips_a_field() -> None:
    conn = connect(":memory:")
    with pytest.raises(ValueError, match="_Thing"):
        select_into(conn, _Thing, "SELECT 7 AS id, 1 AS flag")


def test_named_rows_and_chunks() -> None:
    conn = connect(":memory:")
    assert dict(named(conn, "SELECT 1 AS a, 2 AS b")[0]) == {"a": 1, "b": 2}
    assert [len(c) for c in chunked(range(1201))] == [500, 500, 201]
    assert list(chunked([])) == [] and marks([1, 2, 3]) == "?,?,?"
