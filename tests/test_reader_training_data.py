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


def test_a_replay_set_holds_the_round_and_a_seeded_sample_of_the_rest(tmp_path):
    from evaluation.reader_rounds import before_round, in_round, replay_set

    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "last_before.json").write_text('{"band": "band_r002", "my_chat": "my_chat_r010"}')

    def q(qid: str, source: str = "chats") -> QuestionRows:
        return QuestionRows(qid, source, qid.rpartition("_r")[0], "when?", "answerable", "when", False, [])

    before = {"band": "band_r002", "my_chat": "my_chat_r010"}
    assert in_round("band_r003", before) and not in_round("band_r002", before)
    assert in_round("my_chat_r011", before) and not in_round("my_chat_r009", before)
    assert not in_round("s01_e01_q3", before) and not in_round("cafe_r050", before)
    qs = [q(f"band_r{i:03d}") for i in range(1, 6)] + [q(f"old_r{i:03d}") for i in range(20)]
    qs.append(q("band_r004", source="friendsqa"))  # another source's id never counts as the round's
    chosen = replay_set(qs, 2, "r1", checks=tmp_path)
    ids = [x.qid for x in chosen if x.source == "chats" and x.qid.startswith("band")]
    assert ids[:3] == ["band_r003", "band_r004", "band_r005"]
    assert len(chosen) == 9 and chosen == replay_set(qs, 2, "r1", checks=tmp_path)
    assert not any(x.source == "friendsqa" for x in chosen[:3])
    kept = before_round(qs, "r1", checks=tmp_path)  # a run started before the round never sees it
    assert [x.qid for x in kept if x.qid.startswith("band")] == ["band_r001", "band_r002", "band_r004"]


def test_a_later_round_changes_neither_an_earlier_replay_nor_what_came_before(tmp_path, monkeypatch):
    from evaluation import reader_rounds
    from evaluation.reader_rounds import before_round, replay_set

    monkeypatch.setattr(reader_rounds, "ROUNDS", ("r1", "r2"))
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "last_before.json").write_text('{"band": "band_r002"}')

    def q(qid: str) -> QuestionRows:
        return QuestionRows(qid, "chats", qid.rpartition("_r")[0], "when?", "answerable", "when", False, [])

    qs = [q(f"band_r{i:03d}") for i in range(1, 5)] + [q(f"old_r{i:03d}") for i in range(20)]
    first = replay_set(qs, 2, "r1", checks=tmp_path)
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "last_before.json").write_text('{"band": "band_r004"}')
    qs += [q("band_r005"), q("band_r006")]
    assert replay_set(qs, 2, "r1", checks=tmp_path) == first
    assert [x.qid for x in replay_set(qs, 1, "r2", checks=tmp_path)][:2] == ["band_r005", "band_r006"]
    assert not {"band_r003", "band_r005"} & {x.qid for x in before_round(qs, "r1", checks=tmp_path)}


def test_forms_are_counted_declined_per_form_at_the_threshold():
    from evaluation.reader_compare import crowded, form_declines
    from evaluation.reader_eval import Scored

    def s(question: str, kind: str, p: float) -> Scored:
        return Scored(QuestionRows("q", "chats", "c", question, kind, "", False, []), [p], [""])

    scored = [s("What time is dinner?", "answerable", 0.01), s("what time is lunch?", "answerable", 0.9),
              s("What time does the bus leave?", "near_miss", 0.02), s("Who's bringing cake?", "answerable", 0.01),
              s("How much is the rent?", "off_topic", 0.8), s("how much was it?", "counterfactual", 0.0)]
    forms = form_declines(scored, 0.05)
    assert forms["what time"] == {"answerable": 2, "false_declines": 1, "unanswerable": 1, "declined": 1}
    assert forms["who is"] == {"answerable": 1, "false_declines": 1, "unanswerable": 0, "declined": 0}
    assert forms["how much"] == {"answerable": 0, "false_declines": 0, "unanswerable": 1, "declined": 0}
    assert crowded(forms) == {"answerable": 2, "false_declines": 1, "unanswerable": 2, "declined": 1}


def test_the_persons_round_is_read_by_premise_and_scored_by_decline():
    from evaluation.reader_data import Row
    from evaluation.reader_eval import Scored
    from evaluation.round_check import persons as figures
    from evaluation.round_check import premises

    kinds = premises()
    assert sum(k == "wrong_person" for k in kinds.values()) >= 300
    assert sum(k == "right_person" for k in kinds.values()) >= 200

    def s(qid: str, kind: str, probs: list[float], gold: int | None) -> Scored:
        rows = [Row(f"c{i}", "A: x", "", int(i == gold), rank=i, rerank=0.0) for i in range(len(probs))]
        return Scored(QuestionRows(qid, "chats", "c", "what did sam say?", kind, "who", False, rows), probs,
                      [""] * len(probs))

    scored = [s("w1", "near_miss", [0.01, 0.02], None), s("w2", "near_miss", [0.9, 0.1], None),
              s("r1", "answerable", [0.2, 0.95], 1), s("r2", "answerable", [0.01, 0.02], 0)]
    f = figures(scored, {"w1": "wrong_person", "w2": "wrong_person", "r1": "right_person", "r2": "right_person"},
                threshold=0.05, weight=0.0)
    assert f["wrong_person_declined"] == 0.5 and f["right_person_false_declines"] == 0.5
    assert f["right_person_cite_hit1"] == 0.5  # r1's reader order leads with its gold row, r2's does not
    assert f["decline_auc"] == 0.625  # 0.95 beats both near misses; 0.02 ties one and loses to the other


def test_the_states_round_counts_which_message_leads_and_the_unsettled_declined():
    from evaluation.reader_data import Row
    from evaluation.reader_eval import Scored
    from evaluation.round_check import states

    def s(qid: str, kind: str, probs: list[float], gold: int | None) -> Scored:
        rows = [Row(f"c{i}", "A: x", "", int(i == gold), rank=i, rerank=0.0) for i in range(len(probs))]
        return Scored(QuestionRows(qid, "chats", "c", "where's dinner?", kind, "current", False, rows), probs,
                      [""] * len(probs))

    scored = [s("n1", "answerable", [0.9, 0.3], 0), s("n2", "answerable", [0.9, 0.3], 1),
              s("b1", "answerable", [0.01, 0.02], 1), s("u1", "near_miss", [0.01, 0.02], None),
              s("u2", "near_miss", [0.6, 0.02], None)]
    kinds = {"n1": "now", "n2": "now", "b1": "before", "u1": "unsettled", "u2": "unsettled"}
    f = states(scored, kinds, {"n2": {"c0"}, "b1": {"c0"}}, threshold=0.05, weight=0.0)
    assert (f["now"], f["now_cite_hit1"], f["now_decoy_first"], f["now_false_declines"]) == (2, 0.5, 0.5, 0.0)
    assert (f["before_cite_hit1"], f["before_decoy_first"], f["before_false_declines"]) == (1.0, 0.0, 1.0)
    assert f["unsettled"] == 2 and f["unsettled_declined"] == 0.5


def test_the_askers_round_counts_answers_and_the_askers_own_words_leading():
    """Part A5: a question whose best-reading message is the asker's own problem is led by a decoy."""
    from evaluation.reader_data import Row
    from evaluation.reader_eval import Scored
    from evaluation.round_check import askers

    def s(qid: str, probs: list[float], gold: int) -> Scored:
        rows = [Row(f"c{i}", "A: x", "", int(i == gold), rank=i, rerank=0.0) for i in range(len(probs))]
        return Scored(QuestionRows(qid, "chats", "c", "why did it fail?", "answerable", "why", False, rows), probs,
                      [""] * len(probs))

    scored = [s("a1", [0.9, 0.3], 1), s("a2", [0.2, 0.8], 1), s("a3", [0.01, 0.02], 0), s("x", [0.9, 0.1], 1)]
    kinds = {"a1": "asker", "a2": "asker", "a3": "asker", "x": "now"}
    f = askers(scored, kinds, {"a1": {"c0"}, "a2": {"c0"}, "a3": {"c1"}}, threshold=0.05, weight=0.0)
    assert f["asker"] == 3 and f["asker_cite_hit1"] == 1 / 3 and f["asker_decoy_first"] == 2 / 3
    assert f["asker_false_declines"] == 1 / 3


def test_the_shipping_rule_is_checked_condition_by_condition():
    from evaluation.reader_compare import rule

    def run(cite: float, auc: float, fq_auc: float, decoy: float, before: float, wrong: float, twins_fd: float):
        return {"validation": {"chats": {"cite_hit1": cite, "decline_auc_labelled": auc},
                               "friendsqa": {"decline_auc_labelled": fq_auc}},
                "rounds": {"states": {"now_decoy_first": decoy, "before_cite_hit1": before},
                           "persons": {"wrong_person_declined": wrong, "right_person": 40,
                                       "right_person_false_declines": twins_fd}}}

    base = run(0.688, 0.860, 0.875, 0.36, 0.42, 0.13, 3 / 40)
    better = run(0.70, 0.87, 0.870, 0.30, 0.42, 0.20, 4 / 40)
    assert all(met for *_, met in rule(base, better, 0.683, 0.680))
    worse = run(0.70, 0.87, 0.860, 0.36, 0.40, 0.13, 5 / 40)
    failed = [cond for cond, _, _, met in rule(base, worse, 0.683, 0.677) if not met]
    assert failed == ["LoCoMo cite-hit@1 at most 0.5 points lower", "FriendsQA labelled AUC at most 0.01 lower",
                      "state now: led by a decoy less often", "state before: cited first no less often",
                      "wrong-person near misses declined more", "right-person twins falsely declined: at most one more"]


def test_the_next_rule_keeps_the_large_sets_and_bounds_the_rounds_by_noise():
    from evaluation.reader_compare import rule_next

    def run(cite: float, decoy: float, before: float, wrong: float, twins_fd: float):
        return {"validation": {"chats": {"cite_hit1": cite, "decline_auc_labelled": 0.86},
                               "friendsqa": {"decline_auc_labelled": 0.875}},
                "rounds": {"states": {"now_decoy_first": decoy, "before_cite_hit1": before},
                           "persons": {"wrong_person_declined": wrong, "right_person": 128,
                                       "right_person_false_declines": twins_fd}}}

    base = run(0.678, 0.338, 0.423, 0.135, 21 / 128)
    tied = run(0.679, 0.338, 0.40, 0.135, 24 / 128)  # a tie on decoys and wrong persons, 3 more twins
    assert len(rule_next(base, tied, 0.683, 0.686)) == 8
    assert all(met for *_, met in rule_next(base, tied, 0.683, 0.686))
    worse = run(0.677, 0.38, 0.37, 0.13, 25 / 128)
    failed = [cond for cond, _, _, met in rule_next(base, worse, 0.683, 0.686) if not met]
    assert failed == ["chats cite-hit@1 at least", "state now: led by a decoy at most 3 points more often",
                      "state before: cited first at most 4 points less often",
                      "wrong-person near misses declined at least as often",
                      "right-person twins falsely declined: at most three more"]


def test_unseen_chats_lend_the_rounds_every_line_that_carries_a_premise(tmp_path):
    """Chats no run has read have no round boundaries yet: a premise marks a round's line wherever it sits."""
    from evaluation.round_check import marked

    (tmp_path / "a.jsonl").write_text(
        '{"id": "a_r001", "question": "q", "kind": "answerable"}\n'
        '{"id": "a_r091", "question": "q", "kind": "near_miss", "premise": "wrong_person"}\n'
        '\n'
        '{"id": "a_r101", "question": "q", "kind": "answerable", "premise": "now", "decoys": ["a_s01_t002"]}\n',
        "utf-8")
    kinds, traps = marked(tmp_path)
    assert kinds == {"a_r091": "wrong_person", "a_r101": "now"}
    assert traps == {"a_r091": set(), "a_r101": {"a_s01_t002"}}


def test_rows_read_back_from_the_cache_carry_their_send_times_and_age_tags(tmp_path):
    """A cached row never stored its time: it is joined from the conversation as rows are read, and the tags
    are measured against the newest row the reply would read, not a gold turn added below them."""
    from evaluation.reader_data import Row, _path, cached_rows, row_ages
    from evaluation.reader_labels import LabelledConversation
    from memory.datasets.base import Conversation
    from memory.models import Message

    day = 86400.0
    msgs = [Message("eval", "w", "c", f"m{i}", "u", "Ana", f"text {i}", 1000.0 + i * day) for i in range(4)]
    lc = LabelledConversation(Conversation("c", msgs), [], "chats")
    rows = [Row("m2", "Ana: text 2", "", 1, rank=0), Row("m0", "Ana: text 0", "", 0, rank=1),
            Row("m3", "Ana: text 3", "", 0, rank=12), Row("gone", "Ana: ?", "", 0, rank=2)]
    stored = QuestionRows("q1", "chats", "c", "what?", "answerable", "what", False, rows)
    path = _path(tmp_path, lc)
    path.parent.mkdir(parents=True)
    path.write_text(stored.to_json().replace(', "ts": null', "") + "\n", "utf-8")
    (back,) = cached_rows([lc], embedder=None, cache=tmp_path)  # type: ignore[arg-type]
    assert [r.ts for r in back.rows] == [1000.0 + 2 * day, 1000.0, 1000.0 + 3 * day, None]
    assert row_ages(back, read=10) == ["newest", "days earlier", "newest", ""]


def test_whole_reply_figures_count_the_first_cited_message_by_reply_kind_and_premise():
    from evaluation.reply_eval import figures

    def rec(kind, reply, cited, gold, declined=False, premise=""):
        return {"kind": kind, "reply": reply, "cited": cited, "gold": gold, "declined": declined, "premise": premise}

    got = figures([rec("answerable", "state", ["a", "b"], ["a"], premise="now"),
                   rec("answerable", "evidence", ["c", "b", "x"], ["x"]),
                   rec("answerable", "decline", ["b"], ["b"], declined=True),
                   rec("near_miss", "decline", ["d"], [], declined=True),
                   rec("near_miss", "evidence", ["d"], [])])
    assert got["all"] == {"answerable": 3, "near_misses": 2, "cite_hit@1": 66.7, "cite_hit@3": 100.0,
                          "false_declines": 33.3, "near_misses_declined": 50.0}
    assert got["reply:state"]["cite_hit@1"] == 100.0 and got["premise:now"]["answerable"] == 1
    assert got["reply:evidence"]["cite_hit@1"] == 0.0 and got["reply:evidence"]["near_misses_declined"] == 0.0


def test_a_resumed_run_reads_the_questions_it_started_with(tmp_path):
    """A batch moved into training while a run was paused must not change what the run reads on resuming."""
    from evaluation.reader_data import started_with
    from memory.errors import DatasetError

    first = [q(f"t{i}", "answerable") for i in range(3)]
    val = [q("v0", "near_miss")]
    assert started_with(tmp_path, first, val) == (first, val)
    later = [q("new", "answerable"), *first]
    assert started_with(tmp_path, later, val) == (first, val)
    with pytest.raises(DatasetError, match="no longer labelled"):
        started_with(tmp_path, first[1:], val)
