"""Hybrid search: user text is always text, fusion, phrase lookup, neighbours, scope isolation."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory import ftsquery
from memory.models import ScopeKey
from memory.search import Searcher, rrf
from memory.store import Store
from tests._properties import prop
from tests.conftest import msg

FTS_SYNTAX = ['"', '""', "NEAR(a b", "NEAR", "*", "-", ":", "a:b", "(", ")", "((", "a AND", "OR OR",
              "NOT", "^start", "col:term", "{text}: x", "'", "\\", "a*", "-x", "+", "AND NOT OR", "\x00",
              "'; DROP TABLE messages; --"]


@pytest.fixture
def populated(vstore):
    lines = [
        ("alice", "Let's go hiking at Mount Tam on Saturday morning"),
        ("bob", "I can't, my sister's wedding is this weekend"),
        ("carol", "The budget for the offsite is 5000 dollars"),
        ("alice", "Remember to bring sunscreen and water"),
        ("bob", "The quarterly report deadline moved to March 14"),
        ("carol", "I adopted a kitten named Biscuit"),
    ]
    vstore.ingest([msg(i, t, author=a) for i, (a, t) in enumerate(lines, 1)])
    # Another workspace with near-identical content must never leak into results.
    vstore.ingest([msg(i, t + " (other team)", author=a, workspace="other") for i, (a, t) in enumerate(lines, 1)])
    return vstore


def scope(store, workspace="w"):
    return [store.scope_id(ScopeKey("console", workspace, "general"))]


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_fts_syntax_is_searched_as_text(populated, query):
    s = Searcher(populated)
    for mode in ("bm25", "hybrid"):
        s.search(scope(populated), query, mode=mode)
    s.phrase(scope(populated), query)


@prop(150, slow=False)
@given(st.text(max_size=80))
def test_arbitrary_text_never_breaks_fts(text):
    query = ftsquery.match_any(text)
    assert query is None or query.count('"') % 2 == 0
    from memory.db import connect

    conn = connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, author_name)")  # a scope's table (store/scopeindex.py)
    conn.execute("INSERT INTO t VALUES ('some text', 'a')")
    if query:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,)).fetchall()
    phrase = ftsquery.match_phrase(text)
    if phrase:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (f"text: ({phrase})",)).fetchall()
    conn.close()


def test_modes_find_the_right_message(populated):
    s = Searcher(populated)
    sc = scope(populated)
    assert s.search(sc, "hiking Saturday", mode="bm25")[0].message.msg_id == "1"
    assert s.search(sc, "a small cat someone got", mode="dense")[0].message.msg_id == "6"
    hits = s.search(sc, "when is the report due", mode="hybrid", k=3)
    assert hits[0].message.msg_id == "5"
    assert all(h.message.workspace == "w" for h in hits)


def test_scopes_are_isolated_in_sql(populated):
    s = Searcher(populated)
    for mode in ("bm25", "dense", "hybrid"):
        hits = s.search(scope(populated, "other"), "hiking budget kitten deadline", mode=mode, k=20)
        assert hits and all(h.message.workspace == "other" for h in hits)
    assert all(m.workspace == "other" for m in s.phrase(scope(populated, "other"), "kitten named Biscuit"))


def test_phrase_lookup_exact_and_oldest_first(populated):
    s = Searcher(populated)
    populated.ingest([msg(50, "she said: I adopted a kitten named Biscuit!", author="dave")])
    found = s.phrase(scope(populated), "adopted a KITTEN named")
    assert [m.author_name for m in found] == ["carol", "dave"]
    assert s.phrase(scope(populated), "kitten adopted") == []


def test_neighbour_expansion_stays_in_session(populated):
    s = Searcher(populated)
    hit = s.search(scope(populated), "sunscreen", mode="bm25")[0].message
    around = s.expand([hit], before=1, after=1)
    assert [m.msg_id for m in around] == ["3", "4", "5"]


def test_rrf_rewards_agreement():
    fused = rrf([1, 2, 3], [3, 4, 1])
    assert fused[0].id in (1, 3)
    assert {r.id for r in fused} == {1, 2, 3, 4}
    assert fused[0].bm25_rank is not None and fused[0].vector_rank is not None


def test_common_terms_left_out_only_when_rarer_ones_exist(store):
    from memory.search import Searcher

    store.ingest([msg(i, f"the weather is nice today number{i}" + (" zeppelin" if i == 7 else ""))
                  for i in range(6000)], embed=False)
    s = Searcher(store)
    sid = store.scopes()[0].id
    # "weather" is in every message; "zeppelin" in one: only the rare term is searched.
    assert s.selective_terms("weather zeppelin weathers", scope_ids=[sid]) == ["zeppelin"]
    assert s.selective_terms("weather weathering", scope_ids=[sid]) is None  # nothing rarer: keep the query
    # The shares are of the searched scopes only: a small channel beside the big one prunes nothing.
    store.ingest([msg(i, f"weather zeppelin {i}", workspace="small") for i in range(3)], embed=False)
    small = store.scopes()[1].id
    assert s.selective_terms("weather zeppelin weathers", scope_ids=[small]) is None
    assert s.search([sid], "weather zeppelin", mode="bm25")[0].message.msg_id == "7"


def test_vector_mirror_links_parents_and_replies_across_loads(vstore):
    """Rows loaded later still find their parent (reply-to first, else the previous turn) and set its reply."""
    from memory.vectors import VectorIndex

    vstore.ingest([msg(1, "Is the offsite in Lisbon?", author="bob"), msg(2, "yes!", author="alice")])
    index = VectorIndex(vstore)
    sid = scope(vstore)[0]
    first = index.mirror(sid)
    assert first.prev.tolist() == [-1, 0] and first.reply.tolist() == [1, -1]
    vstore.ingest([msg(3, "which hotel?", author="carol"), msg(4, "the one by the river", author="bob", reply_to="1")])
    m = index.mirror(sid)
    assert m.prev.tolist() == [-1, 0, 1, 0]  # 4 replies to 1 explicitly, not to the previous turn
    assert m.reply.tolist() == [1, 2, -1, -1]  # the first reply wins
    scores = index.scores([sid], m.matrix[0], context=1.0, short_chars=10)
    rows = scores.rows([int(i) for i in m.ids])
    assert scores.sims[rows[1]] > float(m.matrix[1] @ m.matrix[0]) + 0.5  # "yes!" borrowed its parent's match
    assert scores.rows([10**9]).tolist() == [-1]


def test_bm25_reads_only_the_searched_scopes(tmp_path):
    """Each scope has its own FTS5 table: scores, pruning and order in one scope are the same whatever
    another scope holds, and a scope added later is searched only when named."""
    stores = []
    for n, other in enumerate(([], [f"picnic plan picnic {i}" for i in range(30)])):
        st_ = Store(tmp_path / f"s{n}.db")
        st_.ingest([msg(i, f"the picnic plan number {i}", workspace="big") for i in range(1, 41)])
        st_.ingest([msg(i, t, workspace="other") for i, t in enumerate(other, 1)])
        st_.ingest([msg(i, f"the picnic plan small {i} {'plan ' * (i % 3)}", workspace="big") for i in range(41, 45)])
        stores.append(st_)
    results = []
    for st_ in stores:
        s = Searcher(st_)
        big = scope(st_, "big")
        hits = s.bm25(big, "picnic plan small", 100)
        found = st_.messages([i for i, _ in hits])
        assert len(found) == 44 and all(m.scope_id == big[0] for m in found)
        results.append(([m.msg_id for m in found], [round(score, 12) for _, score in hits]))
        assert [m.text for m in s.phrase(big, "picnic plan picnic")] == []
    assert results[0] == results[1]
    st_ = stores[1]
    st_.ingest([msg(1, "a picnic plan from a new channel", workspace="late")])
    s = Searcher(st_)
    assert len(s.bm25(scope(st_, "big"), "picnic plan", 100)) == 44
    assert len(s.bm25(scope(st_, "big") + scope(st_, "late"), "picnic plan", 100)) == 45
    for st_ in stores:
        st_.close()
