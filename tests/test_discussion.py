"""Each member's view is read from the whole discussion: a member who answered without naming the topic spoke."""
from __future__ import annotations

from memory.models import Message, ScopeKey
from memory.query.discussion import AFTER, BEFORE, discussion, on_topic, views
from memory.store import Store

KEY = ScopeKey("console", "w", "hall")
T0 = 1_760_000_000.0
CHAT = [
    ("jo", "raffle tonight at the hall, tickets are 2 quid"),
    ("sam", "i'll bring the float"),
    ("ana", "can't make it, sorry"),
    ("jo", "raffle went brilliantly, thanks all! still counting the money"),
    ("ben", "what are we doing about the leaky roof in the hall?"),
    ("ana", "patch it ourselves, a tarp and some sealant"),
    ("sam", "get a roofer, patching never lasts"),
    ("kim", "agree with sam"),
    ("lee", "whatever is cheapest honestly"),
    ("ben", "ok I'll call a roofer tomorrow"),
    ("jo", "quiz night is on the 14th at 7"),
    ("jo", "quiz moved to the 21st, hall is double booked"),
]
MEMBERS = ["jo", "sam", "ana", "ben", "kim", "lee"]


def roof(m) -> float:
    """Stands in for words and meaning: these tests are about structure."""
    return 1.0 if "roof" in m.text else 0.0


def stored(tmp_path):
    store = Store(tmp_path / "d.db")
    store.ingest([Message(KEY.platform, KEY.workspace, KEY.channel, str(i), who, who.capitalize(), text,
                          T0 + i * 60) for i, (who, text) in enumerate(CHAT)])
    return store


def test_a_short_answer_in_the_run_after_the_question_is_on_topic(tmp_path):
    store = stored(tmp_path)
    msgs = store.recent(store.scope_id(KEY), 50)
    got = {v.person_id: v for v in views(msgs, on_topic(msgs, roof, {}), MEMBERS)}
    assert got["lee"].message is not None and got["lee"].message.text == "whatever is cheapest honestly"
    assert got["kim"].message is not None and got["ana"].message.text.startswith("patch it")
    assert got["sam"].message.text.startswith("get a roofer")  # the direct one over "i'll bring the float"
    assert got["jo"].message is None and got["jo"].wrote  # wrote in the session, never about the roof
    store.close()


def test_an_off_topic_turn_ends_the_run_and_links_carry_the_topic(tmp_path):
    store = stored(tmp_path)
    msgs = store.recent(store.scope_id(KEY), 50)
    # Without the question, "patch it ourselves" says nothing about the roof by itself.
    no_question = [m for m in msgs if "leaky roof" not in m.text]
    scores = on_topic(no_question, roof, {})
    patch = next(m for m in msgs if m.text.startswith("patch it"))
    assert scores[patch.id] == 0
    # The analysis pass linked Kim's agreement to Sam's message: on topic whatever the run.
    kim = next(m for m in msgs if m.text == "agree with sam")
    sam = next(m for m in msgs if m.text.startswith("get a roofer"))
    assert on_topic(no_question, roof, {kim.id: sam.id})[kim.id] > 0
    # After the run ends (an off-topic turn), a short line is no answer: "quiz night ..." is not about the roof.
    quiz = next(m for m in msgs if m.text.startswith("quiz night"))
    assert on_topic(msgs, roof, {})[quiz.id] == 0
    store.close()


def test_the_discussion_is_the_session_run_around_the_anchors(tmp_path):
    store = stored(tmp_path)
    msgs = store.recent(store.scope_id(KEY), 50)
    question = next(m for m in msgs if "leaky roof" in m.text)
    got = discussion(store, [question])
    assert [m.turn for m in got] == list(range(question.turn - BEFORE, question.turn + AFTER + 1))
    assert "quiz moved to the 21st, hall is double booked" not in [m.text for m in got]
    store.close()
