"""Per-query fusion, chat signals, and the offline tuner scoring exactly what the searcher does."""
from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from evaluation.features import DatasetFeatures, _conversation
from evaluation.lodo import batch, score_hybrid
from memory.datasets.base import Conversation, Question
from memory.fusion import FusionParams, fuse, lexical_weight, replies_of, spread_authors, with_context
from memory.models import ScopeKey
from memory.search import Searcher
from memory.signals import dense_query, read_question
from tests.conftest import msg

T0 = datetime(2024, 3, 11, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("method", ["score", "rrf"])
def test_both_halves_agreeing_beats_one_half(method):
    lex = np.array([3.0, 3.0, 0.0, 0.0])
    lex_in = np.array([True, True, False, False])
    sem = np.array([0.9, 0.1, 0.9, 0.3])
    sem_in = np.array([True, False, True, True])
    fused = fuse(lex, lex_in, sem, sem_in, FusionParams(method=method))
    assert fused[0] > fused[1] and fused[0] > fused[2]


def test_weight_falls_back_to_the_half_that_has_evidence():
    p = FusionParams(lexical=0.5)
    none = np.zeros(3, dtype=bool)
    some = np.ones(3, dtype=bool)
    assert lexical_weight(np.zeros(3), none, np.ones(3), some, p) == 0.0  # no word matched
    assert lexical_weight(np.ones(3), some, np.zeros(3), none, p) == 1.0  # no vectors
    peaked = np.array([1.0] + [0.0] * 11)
    flat = np.ones(12)
    adaptive = FusionParams(lexical=0.5, adapt=0.5)
    assert lexical_weight(peaked, np.ones(12, bool), flat, np.ones(12, bool), adaptive) > 0.5
    assert lexical_weight(flat, np.ones(12, bool), peaked, np.ones(12, bool), adaptive) < 0.5


def test_out_of_pool_rows_are_never_ranked_but_lift_their_neighbours():
    lex = np.array([0.0, 2.0, 0.0])
    lex_in = np.array([False, True, False])
    sem = np.array([0.5, 0.2, 0.5])
    sem_in = np.array([True, False, True])
    parent = np.array([1, -1, -1])  # row 0 replies to row 1
    p = FusionParams(method="score", parent_words=0.5)
    fused = fuse(lex, lex_in, sem, sem_in, p, parent=parent)
    assert fused[0] > fused[2]  # same meaning; row 0's parent matched the words
    fused = fuse(lex, np.zeros(3, bool), sem, sem_in, p, parent=parent)
    assert np.isneginf(fused[1])


def test_short_messages_borrow_their_parents_meaning():
    cos = np.array([0.8, 0.1, 0.1])
    prev = np.array([-1, 0, 0])
    chars = np.array([60, 3, 200])
    lifted = with_context(cos, prev, chars, 0.5, 40)
    assert lifted[1] == pytest.approx(0.5) and lifted[2] == pytest.approx(0.1) and lifted[0] == pytest.approx(0.8)


def test_first_reply_is_the_earliest_child():
    assert replies_of(np.array([-1, 0, 0, 2])).tolist() == [1, -1, 3, -1]


def test_spread_promotes_each_authors_best_into_the_top_k():
    order = [10, 11, 12, 13, 14]
    authors = ["a", "a", "a", "b", "c"]
    assert spread_authors(order, authors, ["a", "b", "c"], 3) == [10, 13, 14, 11, 12]
    assert spread_authors(order, authors, ["a", "b"], 5) == order  # already inside the top k


def test_signals_read_names_each_and_dates():
    people = [("priya", ["Priya Shah"]), ("tom", ["Tom"])]

    def sig(question: str):
        return read_question(question, people, T0)

    assert sig("What did Priya say about the venue?").authors == ["priya"]
    assert sig("was it tom's idea").authors == ["tom"]
    assert sig("what about the venue").authors == []
    assert sig("What does each of us think about pizza?").each
    assert not sig("What does Tom think about pizza?").each
    (start, end), = sig("what happened last week?").periods
    assert end - start == 7 * 86400 and end <= T0
    (start, end), = sig("what did we plan in March 2023?").periods
    assert datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d") == "2023-03-01"
    assert datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d") == "2023-04-01"
    assert sig("may I ask what you think?").periods == []
    assert dense_query("When did Mel paint a sunrise?") == "Mel paint sunrise?"


LINES = [
    ("bob", "Is the offsite in Lisbon confirmed?"),
    ("alice", "yes!"),
    ("carol", "I adopted a kitten named Biscuit"),
    ("priya", "The venue changed to the old library"),
    ("dave", "Lisbon has great food, I went in 2019"),
    ("priya", "I prefer the train over flying"),
    ("bob", "I would rather fly to save time"),
    ("carol", "Honestly any way is fine with me"),
]


@pytest.fixture
def chat(vstore):
    vstore.ingest([msg(i, t, author=a, ts=T0 - 3 * 86400 + i * 60) for i, (a, t) in enumerate(LINES, 1)])
    return vstore


def _scope(store):
    return [store.scope_id(ScopeKey("console", "w", "general"))]


def test_named_author_is_lifted(chat):
    s = Searcher(chat)
    q = "what did priya say about Lisbon"
    base = [h.message.msg_id for h in s.search(_scope(chat), q, k=8, params=FusionParams(method="score"))]
    boosted = [h.message.msg_id
               for h in s.search(_scope(chat), q, k=8, params=FusionParams(method="score", author=1.0))]
    assert {base[0], base[1]} == {"1", "5"}  # the Lisbon messages, by bob and dave
    assert {boosted[0], boosted[1]} == {"4", "6"}  # priya's own messages once her name counts


def test_short_reply_found_through_its_parent(chat):
    s = Searcher(chat)
    q = "who confirmed the Lisbon offsite"
    plain = [h.message.msg_id for h in s.search(_scope(chat), q, k=8, params=FusionParams(method="score"))]
    lifted = [h.message.msg_id for h in s.search(_scope(chat), q, k=8,
                                                 params=FusionParams(method="score", parent_words=0.6))]
    assert lifted.index("2") < plain.index("2") and lifted.index("2") <= 1


def test_each_member_question_reaches_everyone(chat):
    s = Searcher(chat)
    q = "how does each person want to travel"
    hits = s.search(_scope(chat), q, k=5, params=FusionParams(method="score", each=True))
    assert {h.message.author_id for h in hits} == {"alice", "bob", "carol", "dave", "priya"}


def test_offline_scoring_is_what_the_searcher_returns(chat):
    """The tuner's numpy scoring and Searcher.search agree question by question."""
    questions = [Question(str(n), q, None, "c", [e]) for n, (q, e) in enumerate([
        ("who confirmed the Lisbon offsite", "2"), ("what did priya say about travel", "6"),
        ("how does each person want to travel", "7"), ("what happened to the venue last week", "4"),
        ("a pet cat", "3")])]
    conv = Conversation("c", [], questions)
    s = Searcher(chat)
    feats = DatasetFeatures("t", [_conversation(chat, s, conv, T0)], "test")
    b = batch(feats)
    params = [FusionParams(), FusionParams(method="score", author=0.3, dates=0.2, each=True, parent_words=0.3,
                                           parent_meaning=0.2, reply_words=0.2, length=0.4, context=0.3, pool=3),
              FusionParams(method="rrf", rrf_k=3, rewrite=True, author_column=1.0, reply_meaning=0.3, pool=4)]
    for p in params:
        offline = score_hybrid(b, p)
        for i, q in enumerate(questions):
            ids = [h.message.msg_id for h in s.search(_scope(chat), q.question, k=10, asked_at=T0, params=p)]
            for k in (5, 10):
                assert offline[k][i] == (1.0 if q.evidence[0] in ids[:k] else 0.0), (p, q.question, k)
