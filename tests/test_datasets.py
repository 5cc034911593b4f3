"""Dataset loaders against the real published files in ../shared/data, plus the jsonl format."""
from __future__ import annotations

import json
import re

import pytest

from memory.datasets import Conversation, data_dir, dump_jsonl, load_dataset, read_jsonl
from memory.datasets.friendsqa import question_category
from memory.datasets.locomo import parse_evidence, parse_locomo_time
from memory.errors import DatasetError
from memory.models import Message

DATA = data_dir()


def _real(name: str, rel: str) -> list[Conversation]:
    if not (DATA / rel).exists():
        pytest.skip(f"real {name} data not found at {DATA / rel} (set CHORUS_DATA_DIR)")
    return load_dataset(name)


@pytest.fixture(scope="module")
def locomo() -> list[Conversation]:
    return _real("locomo", "locomo/locomo10.json")


@pytest.fixture(scope="module")
def socialmem() -> list[Conversation]:
    return _real("socialmem", "socialmembench")


@pytest.fixture(scope="module")
def friendsqa() -> list[Conversation]:
    return _real("friendsqa", "friendsqa/friendsqa_dev.json")


def _evidence_resolves(convs: list[Conversation]) -> bool:
    return all(e in c.msg_ids for c in convs for q in c.questions for e in q.evidence)


# ---- LoCoMo ----------------------------------------------------------------

def test_locomo_counts(locomo):
    assert len(locomo) == 10
    assert sum(len(c.messages) for c in locomo) == 5882
    assert sum(len(c.questions) for c in locomo) == 1986
    adversarial = [q for c in locomo for q in c.questions if q.adversarial]
    assert len(adversarial) == 446
    assert all(q.category == "5" and q.answer is None and q.extra["adversarial_answer"] for q in adversarial)
    assert {q.category for c in locomo for q in c.questions} == {"1", "2", "3", "4", "5"}
    assert all(q.answer for c in locomo for q in c.questions if not q.adversarial)


def test_locomo_evidence(locomo):
    # The README's 9 odd raw ids: 6 are glued or mistyped and recovered; 3 name no turn
    # (conv-42 "D10:19" and "D", conv-47 "D4:36").
    assert sum(c.dropped_evidence for c in locomo) == 3
    assert _evidence_resolves(locomo)
    by_id = {c.id: c for c in locomo}
    q43 = next(q for q in by_id["conv-43"].questions if "D:11:26" in q.extra["raw_evidence"])
    assert "D11:26" in q43.evidence
    q26 = next(q for q in by_id["conv-26"].questions if q.extra["raw_evidence"] == ["D8:6; D9:17"])
    assert q26.evidence == ["D8:6", "D9:17"]


def test_locomo_messages(locomo):
    conv = locomo[0]
    assert conv.id == "conv-26" and conv.speakers == ["Caroline", "Melanie"]
    first, second = conv.messages[0], conv.messages[1]
    assert (first.platform, first.workspace, first.channel, first.msg_id) == ("locomo", "", "conv-26", "D1:1")
    assert first.author_id == first.author_name == "Caroline" and first.session_hint == 1
    assert first.ts == parse_locomo_time("1:56 pm on 8 May, 2023")
    assert second.ts - first.ts == 30
    captioned = [m for c in locomo for m in c.messages if "blip_caption" in m.extra]
    assert captioned and all("[shares a photo: " in m.text for m in captioned)
    assert all(len({m.msg_id for m in c.messages}) == len(c.messages) for c in locomo)


def test_locomo_parsers():
    assert parse_locomo_time("1:56 pm on 8 May, 2023") == 1683554160.0
    assert parse_locomo_time("12:05 am on 1 January, 2023") == 1672531500.0
    assert parse_locomo_time("sometime") is None
    assert parse_evidence(["D9:1 D4:4", "D30:05", "D"]) == (["D9:1", "D4:4", "D30:5"], 1)


# ---- SocialMemBench ----------------------------------------------------------

def test_socialmem_counts(socialmem):
    assert len(socialmem) == 10
    assert sum(len(c.messages) for c in socialmem) == 582
    assert sum(len(c.questions) for c in socialmem) == 77
    assert sum(c.dropped_evidence for c in socialmem) == 0
    for conv in socialmem:
        ids = conv.msg_ids
        assert len(ids) == len(conv.messages)
        for q in conv.questions:
            assert q.evidence and all(e in ids for e in q.evidence), q.id
            assert re.fullmatch(r"Q[1-9]", q.category)
            assert q.answer and not q.adversarial
        assert all(m.reply_to in ids for m in conv.messages if m.reply_to is not None)
        assert {m.session_hint for m in conv.messages} == {1, 2, 3, 4, 5}
        assert 4 <= len(conv.speakers) <= 5


def test_socialmem_single_file_and_choices(socialmem):
    one = load_dataset("socialmem", DATA / "socialmembench" / "social_grp_0d1e2f3a.json")
    assert len(one) == 1 and one[0].id == "grp_0d1e2f3a" and one[0].messages[0].channel == "grp_0d1e2f3a"
    choice = [q for c in socialmem for q in c.questions if q.extra.get("options")]
    assert choice and all(q.extra["correct_option"] in q.extra["options"] for q in choice)


# ---- FriendsQA ---------------------------------------------------------------

def test_friendsqa_episodes(friendsqa):
    assert [c.id for c in friendsqa] == ["s01_e23", "s01_e24", "s02_e23", "s02_e24", "s03_e23",
                                         "s03_e24", "s03_e25", "s04_e23", "s04_e24"]
    scenes = {m.extra["scene"] for c in friendsqa for m in c.messages}
    assert len(scenes) == 136
    assert sum(len(c.messages) for c in friendsqa) == 2847
    assert sum(len(c.questions) for c in friendsqa) == 1182
    assert sum(c.dropped_evidence for c in friendsqa) == 0
    for conv in friendsqa:
        ids = conv.msg_ids
        assert len(ids) == len(conv.messages)
        hints = [m.session_hint for m in conv.messages]
        assert hints == sorted(hints)  # scenes joined in order
        assert all(b.ts > a.ts for a, b in zip(conv.messages, conv.messages[1:]))
        for q in conv.questions:
            assert q.evidence and all(e in ids for e in q.evidence), q.id
            assert q.category in {"what", "who", "where", "why", "how", "when", "other"}


def test_friendsqa_messages(friendsqa):
    conv = friendsqa[0]
    m0, m1 = conv.messages[0], conv.messages[1]
    assert m0.msg_id == "s01_e23_c01_u000" and m0.channel == "s01_e23" and m1.ts - m0.ts == 20
    gap = next(b.ts - a.ts for a, b in zip(conv.messages, conv.messages[1:]) if a.session_hint != b.session_hint)
    assert gap == 3600
    multi = next(m for c in friendsqa for m in c.messages if len(m.extra["speakers"]) > 1)
    assert " & " in multi.author_name and multi.author_id == re.sub(r"[^a-z0-9]+", "_", multi.author_name.lower())
    speaker_q = [q for c in friendsqa for q in c.questions if q.extra["is_speaker"]]
    assert speaker_q and all(q.category for q in speaker_q)


def test_question_category():
    assert question_category("s01_e23_c06_Why_Paraphrased", "For what reason ...") == "why"
    assert question_category("x", "Whom did Ross call ?") == "who"
    assert question_category("x", "Did Ross call ?") == "other"


# ---- jsonl and errors --------------------------------------------------------

def test_jsonl_round_trip(tmp_path):
    msgs = [
        Message("slack", "T1", "C1", "1.0", "U1", "Ann", "hello", 1700000000.5, session_hint=1),
        Message("slack", "T1", "C1", "2.0", "U2", "Bob", "hi ☃", 1700000060.0, thread="1.0",
                reply_to="1.0", is_bot=True, extra={"k": [1, 2]}),
    ]
    path = tmp_path / "t.jsonl"
    assert dump_jsonl(msgs, path) == 2
    back = read_jsonl(path)
    assert back == msgs and [m.extra for m in back] == [{}, {"k": [1, 2]}]
    convs = load_dataset("jsonl", path)
    assert len(convs) == 1 and convs[0].id == "C1" and convs[0].speakers == ["Ann", "Bob"]


def test_jsonl_defaults_and_times(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"speaker": "Ann", "text": "a"}\n\n'
                    '{"speaker": "Bob", "text": "b", "ts": "2024-05-01T10:00:00Z"}\n'
                    '{"speaker": "Ann", "text": "c"}\n'
                    '{"speaker": "Cy", "text": "d", "ts": 1714557700, "channel": "other"}\n')
    msgs = read_jsonl(path)
    assert [m.msg_id for m in msgs] == ["1", "3", "4", "5"]
    assert (msgs[0].platform, msgs[0].channel, msgs[0].author_id) == ("import", "import", "Ann")
    assert msgs[1].ts == 1714557600.0 and msgs[0].ts < msgs[1].ts < msgs[2].ts
    assert len(load_dataset("jsonl", path)) == 2


@pytest.mark.parametrize("line, problem", [
    ('{"speaker": "Bob", "text": "hi"', "not valid JSON"),
    ('{"text": "hi"}', "missing required key 'speaker'"),
    ('{"speaker": "Bob", "text": "hi", "ts": "yesterday"}', "neither ISO 8601 nor unix seconds"),
    ('["Bob", "hi"]', "expected a JSON object"),
    ('{"speaker": "Bob", "text": "again", "id": "1"}', "already used on line 1"),
])
def test_jsonl_malformed_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"speaker": "Ann", "text": "fine"}\n\n' + line + "\n")
    with pytest.raises(DatasetError) as err:
        read_jsonl(path)
    assert "line 3" in str(err.value) and problem in str(err.value)


def test_wrong_format_files(tmp_path):
    social = tmp_path / "net.json"
    social.write_text(json.dumps({"schema": "x", "sessions": []}))
    with pytest.raises(DatasetError, match=r"net\.json: missing key 'qa_pairs'"):
        load_dataset("socialmem", social)
    with pytest.raises(DatasetError, match="missing key 'data'") as err:
        load_dataset("friendsqa", social)
    assert str(social) in str(err.value)
    with pytest.raises(DatasetError, match="expected a JSON list"):
        load_dataset("locomo", social)
    broken = tmp_path / "locomo.json"
    broken.write_text(json.dumps([{"sample_id": "s", "qa": []}]))
    with pytest.raises(DatasetError, match="sample 0: missing key 'conversation'"):
        load_dataset("locomo", broken)
    notjson = tmp_path / "x.json"
    notjson.write_text("speaker,text\n")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_dataset("friendsqa", notjson)
    with pytest.raises(DatasetError, match="not found"):
        load_dataset("locomo", tmp_path / "missing.json")
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("squad", social)
    with pytest.raises(DatasetError, match="line 1: missing required key 'speaker'"):
        load_dataset("jsonl", social)  # a one-line JSON object of another format


def test_real_benchmark_file_is_not_jsonl():
    path = DATA / "locomo" / "locomo10.json"
    if not path.exists():
        pytest.skip(f"real LoCoMo data not found at {path}")
    with pytest.raises(DatasetError, match="line 1: not valid JSON"):
        load_dataset("jsonl", path)


def test_data_dir_override(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(DatasetError, match="CHORUS_DATA_DIR"):
        load_dataset("locomo")
    (tmp_path / "socialmembench").mkdir()
    with pytest.raises(DatasetError, match="no SocialMemBench"):
        load_dataset("socialmem")
