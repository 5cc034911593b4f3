"""The labelled training data: the checker catches what would teach the models something false, and every
file in the repository passes it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.labels_check import check_chat, check_questions
from evaluation.reader_labels import CHATS_DIR, QUESTIONS_DIR, load

CHAT = {
    "speakers": [{"id": "ana", "name": "Ana"}, {"id": "ben", "name": "Ben"}],
    "sessions": [{"turns": [
        {"turn": "t_s01_t001", "speaker": "Ana", "speaker_id": "ana", "content": "gig is Sat 14 March at the Kestrel",
         "ts": "2026-02-01T10:00:00Z", "reply_to": None,
         "act": {"kind": "plan", "topic": "gig", "owner": "GROUP", "changes": None, "answers": None,
                 "confirms": None}},
        {"turn": "t_s01_t002", "speaker": "Ben", "speaker_id": "ben", "content": "moved to the 21st, same place",
         "ts": "2026-02-01T10:05:00Z", "reply_to": None,
         "act": {"kind": "change", "topic": "gig", "owner": "GROUP", "changes": "t_s01_t001", "answers": None,
                 "confirms": None}},
    ]}],
    "qa_pairs": [],
}


def line(**kw) -> str:
    base = {"id": "t_r001", "question": "when's the gig now?", "kind": "answerable", "category": "current",
            "turn": "t_s01_t002", "span": "the 21st", "also": [], "stale": ["t_s01_t001"]}
    return json.dumps({**base, **kw})


def test_a_good_line_passes():
    problems, counts = check_questions([line()], CHAT, "t")
    assert problems == [] and counts["answerable"] == 1


@pytest.mark.parametrize("change, expect", [
    ({"span": "the 22nd"}, "not an exact part"),
    ({"turn": "t_s09_t001"}, "not in the chat"),
    ({"id": "x_r001"}, "id should look like"),
    ({"kind": "maybe"}, "kind must be"),
    ({"stale": ["t_s01_t002"]}, "repeats the answering turn"),
    ({"decoys": ["t_s01_t002"]}, "repeats the answering turn"),
    ({"decoys": ["t_s01_t001"], "also": ["t_s01_t001"]}, "decoys and also share"),
    ({"decoys": ["t_s07_t001"]}, "not in the chat"),
    ({"span_is_author": True, "span": "Ana"}, "not the speaker"),
    ({"kind": "near_miss", "topic_turns": []}, "topic_turns missing"),
    ({"kind": "near_miss", "topic_turns": ["t_s01_t001"], "tempting": "Sunday", "why": "x"}, "tempting"),
    ({"category": "each", "per_member": {"ana": ["t_s01_t002"], "ben": []}}, "is by ben"),
])
def test_the_checker_names_what_is_wrong(change, expect):
    problems, _ = check_questions([line(**change)], CHAT, "t")
    assert any(expect in p for p in problems), problems


def test_a_repeated_question_and_bad_json_are_caught():
    problems, _ = check_questions([line(), line(id="t_r002"), "{not json"], CHAT, "t")
    assert any("repeats an earlier one" in p for p in problems)
    assert any("not JSON" in p for p in problems)


def test_chat_checks_links_point_back_and_changes_name_their_plan():
    bad = json.loads(json.dumps(CHAT))
    bad["sessions"][0]["turns"][1]["act"]["changes"] = None
    bad["sessions"][0]["turns"][0]["act"]["confirms"] = "t_s01_t002"
    problems, _ = check_chat(bad, "t")
    assert any("a change needs the turn it changes" in p for p in problems)
    assert any("must name an earlier turn" in p for p in problems)


def test_every_labelled_file_in_the_repository_passes():
    files = sorted(QUESTIONS_DIR.glob("*.jsonl"))
    assert len(files) >= 27
    for f in files:
        chat = json.loads((CHATS_DIR / f"{f.stem}.json").read_text("utf-8"))
        problems, _ = check_questions(f.read_text("utf-8").splitlines(), chat, f.stem)
        assert problems == [], (f.name, problems[:3])
    for f in sorted(CHATS_DIR.glob("*.json")):
        problems, _ = check_chat(json.loads(f.read_text("utf-8")), f.stem)
        assert problems == [], (f.name, problems[:3])


def test_labelled_chats_load_with_their_answers_in_the_chat():
    convs = load(["chats"])
    total = near = 0
    for lc in convs:
        ids = lc.conv.msg_ids
        for q in lc.questions:
            total += 1
            near += q.kind == "near_miss"
            assert set(q.gold) <= ids and set(q.topic) <= ids, q.id
            assert q.kind != "answerable" or q.gold, q.id
    assert total >= 3000 and near >= 1000


def _texts(files) -> set[str]:
    out = set()
    for f in files:
        for s in json.loads(f.read_text("utf-8")).get("sessions", []):
            out |= {" ".join(t["content"].split()).casefold() for t in s["turns"] if len(t["content"]) > 40}
    return out


def test_no_blind_message_is_in_the_training_chats():
    data = Path(__file__).parent / "data"
    blind = _texts(p for d in ("blind", "longblind", "catchup") for p in (data / d).glob("*.json"))
    assert blind and not blind & _texts(CHATS_DIR.glob("*.json"))


def test_decoys_are_read_as_what_does_not_answer_and_stale_turns_stay_neither():
    from evaluation.reader_labels import _from_line

    by_turn = {t["turn"]: t for t in CHAT["sessions"][0]["turns"]}
    plain = _from_line(json.loads(line()), by_turn, "chats")
    assert plain.ignore == {"t_s01_t001"} and plain.topic == []
    states = _from_line(json.loads(line(decoys=["t_s01_t001"], premise="now")), by_turn, "chats")
    assert states.topic == ["t_s01_t001"] and states.ignore == set() and list(states.gold) == ["t_s01_t002"]


def test_chat_checks_that_each_member_questions_list_turn_ids_per_member():
    bad = json.loads(json.dumps(CHAT))
    bad["qa_pairs"] = [{"id": "t_q01", "category": "each", "question": "what did everyone say about the gig?",
                        "evidence_anchors": [], "per_member": {"ana": "she's in", "ben": ["t_s01_t001"]}}]
    problems, _ = check_chat(bad, "t")
    assert any("should be a list of turn ids" in p for p in problems)
    assert any("is by ana, not ben" in p for p in problems)
