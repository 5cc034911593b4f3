"""Torch-free parts of the reader's training and choice: question-form weights and the each-member floor."""
from __future__ import annotations

import pytest

from evaluation.about_choice import choose, errors
from evaluation.question_forms import FORM_FLOOR, form_weights, question_form
from evaluation.reader_data import QuestionRows


def q(text: str, kind: str) -> QuestionRows:
    return QuestionRows(qid=text, source="chats", conversation="c", question=text, kind=kind, category="when",
                        author_span=False, rows=[])


@pytest.mark.parametrize(("text", "form"), [("What time is dinner?", "what time"), ("what's the plan?", "what is"),
                                            ("How much did it cost", "how much"), ("who?", "who")])
def test_a_question_s_form_is_its_first_two_words(text, form):
    assert question_form(text) == form


def test_unanswerables_are_weighed_down_only_where_they_outnumber_their_form():
    qs = ([q(f"what time is thing {i}?", "answerable") for i in range(5)]
          + [q(f"what time is other {i}?", "near_miss") for i in range(20)]
          + [q(f"how much is thing {i}?", "answerable") for i in range(10)]
          + [q(f"how much is other {i}?", "near_miss") for i in range(10)]
          + [q("what time is it hidden?", "counterfactual")])
    w = form_weights(qs)
    assert w[:5] == [1.0] * 5  # answerables keep their weight
    assert w[5:25] == [pytest.approx((5 + 5) / 20)] * 20  # 20 near misses against 5 answerables (+5 prior)
    assert w[25:45] == [1.0] * 20  # balanced form: untouched
    assert w[-1] == 1.0  # counterfactuals are not labelled unanswerables
    lone = form_weights([q(f"has anyone seen {i}?", "near_miss") for i in range(100)])
    assert set(lone) == {FORM_FLOOR}  # a form with no answerables at all keeps the floor


def test_the_floor_counts_wrong_silences_and_wrong_speakers_and_picks_the_fewest():
    members = {"ana", "ben", "cy"}
    rows = [(members, {"ana", "ben"}, {"ana": 0.9, "ben": 0.3, "cy": 0.2}),
            (members, {"cy"}, {"ana": 0.1, "cy": 0.4})]
    assert errors(rows, 0.5) == {"false_silent": 2, "false_spoke": 0}  # ben and cy called silent
    assert errors(rows, 0.25) == {"false_silent": 0, "false_spoke": 0}
    assert errors(rows, 0.01) == {"false_silent": 0, "false_spoke": 2}  # cy (first), ana (second) over-counted
    chosen, table = choose(rows)
    assert chosen == 0.3 and sum(table["0.25"].values()) == 0  # ties go to the higher floor


def test_quotes_beside_the_lead_follow_the_reply_order_and_the_floor():
    from evaluation.quote_support import extras, table
    from evaluation.reader_data import Row
    from evaluation.reader_eval import Scored

    rows = [Row("a", "A: x", "", 0, rank=0, rerank=1.0), Row("b", "B: y", "", 1, rank=1, rerank=0.0),
            Row("c", "C: z", "", 0, rank=2, rerank=0.0), Row("d", "D: w", "", 1, rank=3, rerank=-1.0)]
    q = QuestionRows("q1", "chats", "c1", "when?", "answerable", "when", False, rows)
    s = Scored(q, [0.2, 0.95, 0.6, 0.3], ["", "", "", ""])
    # the lead is b (highest logit), then c and d by P, a last; the floor drops what is below it
    assert extras(s, 0.0, 0.25) == [2, 3]
    assert extras(s, 0.0, 0.5) == [2]
    assert extras(s, 0.0, 0.99) == []
    low, high = table([s], 0.0, (0.25, 0.5))
    assert (low["quotes"], low["supporting"]) == (2, 1) and (high["quotes"], high["supporting"]) == (1, 0)
