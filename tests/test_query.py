"""Query pipeline: the question analysis, date resolution, rows per person, composition, citation post-check."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.llm.fake import ScriptedLLM
from memory.models import ScopeKey
from memory.query.answer import Answerer
from memory.query.dates import annotate, find_dates
from memory.question import ALL, analyse
from memory.records import GROUP, NewRecord, Records
from memory.search import Searcher
from memory.store import Person
from tests._shared import real_dataset
from tests.conftest import msg

ROSTER = [Person(1, "u1", "Maya", ["May"], 5, 0, 0), Person(1, "u2", "Leo Park", [], 3, 0, 0),
          Person(1, "u3", "Priya", [], 2, 0, 0)]
WED = datetime(2025, 3, 5, 12, tzinfo=UTC).timestamp()


def project(question: str, roster=ROSTER, **kw):
    return analyse(question, roster, asked_at=WED, **kw)


@pytest.mark.parametrize("question, rows, tense", [
    ("What does Maya think about the venue?", ["u1"], "head"),
    ("What did May say about pizza?", ["u1"], "head"),
    ("What did Leo's sister do?", ["u2"], "head"),
    ("What does each person think about the venue?", [ALL], "head"),
    ("What did we decide about dinner?", [ALL, GROUP], "head"),
    ("Who never brought snacks?", [ALL, GROUP], "head"),
    ("What did Maya originally want?", ["u1"], "full"),
    ("How did Priya's view change?", ["u3"], "full"),
    ("What did Maya and Priya say on 8 May, 2023?", ["u1", "u3"], "full"),
    ("What are the team's rules for game night, Leo?", ["u2", GROUP], "head"),
])
def test_rows_and_tense(question, rows, tense):
    p = project(question)
    assert p.rows == rows and p.tense == tense, p.reasons


@pytest.mark.parametrize("question, attribution", [
    ("Someone said the rooftop bar is too loud. Who said it?", True),
    ("Who suggested the library cafe?", True),
    ("Both Maya and Priya turned the trip down. Who gave money as the reason?", True),
    ("Both Maya and Priya like hiking. Whose reason was the view?", True),
    ("Who is bringing snacks?", False),  # a person is asked for, but not for something they said
    ("What did Maya say about pizza?", False),
])
def test_who_said_questions_put_verbatim_messages_first(question, attribution):
    """Person rows would crowd the verbatim message out of a small budget (docs/writer.md)."""
    assert project(question).attribution == attribution


def test_issue_and_topic_drop_names_and_question_words():
    p = project("What does Maya think about the dinner venue?")
    assert p.issue == "dinner venue" and p.stems == ["dinner", "venu"]
    assert "Maya" not in p.dense_text and "venue" in p.dense_text


@pytest.mark.parametrize("question, kind", [
    ("Who is giving Leo lifts to the station?", "person"),
    ("When is the rehearsal?", "time"),
    ("What time does the train leave?", "time"),
    ("What's the Airbnb check-in time?", "time"),
    ("Where are we meeting?", "place"),
    ("Why did Priya leave early?", "reason"),
    ("How much is the deposit?", "amount"),
    ("How long is the drive?", "amount"),
    ("Did the migration go out OK?", "yesno"),
    ("What does Maya think about the venue?", "stance"),
    ("What did she bring?", "thing"),
])
def test_expected_kind_of_answer(question, kind):
    assert project(question).kind == kind


def test_people_come_from_the_roster_and_ner_never_from_capitals():
    """"What's", "Airbnb" or a sentence's first word are not people; a member's possessive is."""
    q = project("What's the Airbnb check-in time?", known=lambda words: set(words))
    assert q.named == [] and q.unknown == [] and q.rows == [ALL, GROUP]
    q = project("Did Leo's sister come?")
    assert q.named == ["u2"]
    q = project("@u3 what did you bring?")
    assert q.named == ["u3"]


def test_names_the_chat_never_uses_are_unknown_and_those_it_uses_are_mentioned():
    used = {"carol"}
    q = project("What did Carol say about the budget?", known=lambda words: {w for w in words if w in used})
    assert q.mentioned == ["Carol"] and q.unknown == []
    q = project("What did Zelda say about the budget?", known=lambda words: {w for w in words if w in used})
    assert q.unknown == ["Zelda"] and q.named == []


CHANNEL = [Person(1, "kenjiwork", "kenji|work", [], 9, 0, 0), Person(1, "tessr", "Tess_R", [], 4, 0, 0),
           Person(1, "dave1", "dave_1", [], 2, 0, 0), Person(1, "dave2", "dave|afk", [], 2, 0, 0),
           Person(1, "mkowal", "mkowal", [], 3, 0, 0)]


def test_a_decorated_nick_is_called_by_its_stem():
    """In a help channel "kenji" is kenji|work; a stem two nicks share ("dave") names neither."""
    assert project("what did kenji suggest for the boot loop?", roster=CHANNEL).named == ["kenjiwork"]
    assert project("did Tess get wifi working?", roster=CHANNEL).named == ["tessr"]
    assert project("what did dave say?", roster=CHANNEL, known=lambda words: set(words)).named == []
    assert project("what did mkowal paste?", roster=CHANNEL).named == ["mkowal"]


def test_the_reader_reads_a_nick_stem_as_the_nick():
    assert project("is Tess's wifi fixed?", roster=CHANNEL).reader_text == "is Tess_R's wifi fixed?"
    asked = project("what did kenji and @mkowal say?", roster=CHANNEL)
    assert asked.reader_text == "what did kenji|work and @mkowal say?"
    assert project("what did Maya say?").reader_text == "what did Maya say?"  # a whole name stays as asked


def test_first_person_means_the_asker():
    assert project("What did I promise to bring?", asker_id="u3").people == ["u3"]
    assert project("What did I promise to bring?").people == []


@pytest.mark.parametrize("text, start, days", [
    ("next Thursday", "2025-03-06", 1),
    ("in May", "2024-05-01", 31),
    ("Christmas Eve", "2024-12-24", 1),
    ("yesterday", "2025-03-04", 1),
    ("March 2023", "2023-03-01", 31),
])
def test_time_pins_resolve_against_the_asking_time(text, start, days):
    q = project(f"What did we plan for {text}?", roster=[p for p in ROSTER if p.person_id != "u1"])
    assert q.pins, q.reasons
    pin = q.pins[0]
    assert datetime.fromtimestamp(pin.start, tz=UTC).strftime("%Y-%m-%d") == start
    assert round((pin.end - pin.start) / 86400) == days


def test_each_and_absent_forms():
    assert project("What does each of us think about the venue?").each
    assert project("Who hasn't paid the deposit yet?").absent
    assert not project("Who paid the deposit?").absent
    assert project("How did the plan change?").change
    assert project("what did we decide?").group_ask


def test_relative_dates_resolve_against_message_time():
    assert [r.label() for r in find_dates("next Friday", WED)] == ["2025-03-07 (Fri)"]
    assert [r.label() for r in find_dates("last Friday", WED)] == ["2025-02-28 (Fri)"]
    assert [r.label() for r in find_dates("yesterday", WED)] == ["2025-03-04 (Tue)"]
    assert [r.label() for r in find_dates("next month", WED)] == ["2025-04-01..2025-04-30"]
    assert "[= 2025-03-07 (Fri)]" in annotate("see you next Friday", WED)


def seed_records(store, records):
    sid = store.scopes()[0].id
    with store.write() as conn:
        rows = conn.execute("SELECT id, author_id, text, ts FROM messages WHERE scope_id = ?", (sid,)).fetchall()
        by_author = {}
        for mid, author, text, ts in rows:
            by_author.setdefault(author, (mid, text, ts))
        for author, (mid, text, ts) in by_author.items():
            records.insert(conn, NewRecord(sid, "per_speaker_core", "stance", author, author, text[:150], ts, 1, 1, 1.0,
                                           [mid], {}), run_id=None, model="test", vector=None)
    return sid


def test_per_person_question_has_a_row_for_every_member(tmp_path, embedder):
    conv = next(c for c in real_dataset("socialmem") if len(c.speakers) == 5)
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest(conv.messages)
    records = Records(store)
    sid = seed_records(store, records)
    roster = store.roster(sid)
    assert len([p for p in roster if not p.is_bot]) == 5
    answerer = Answerer(store, Searcher(store), records, None)
    pack, prompt, _ = answerer.prepare([sid], "What does each person think about the plan?")
    person_rows = [r for r in pack.rows if r.key != GROUP]
    assert {r.key for r in person_rows} == {p.person_id for p in roster}
    assert all(not r.empty for r in person_rows)
    assert all(r.name in prompt for r in person_rows)
    store.close()


def test_empty_row_falls_back_then_says_no_record(vstore):
    vstore.ingest([msg(1, "I love climbing and bouldering", author="Ann"), msg(2, "I only like chess", author="Ben"),
                   msg(3, "hello", author="Cy")])
    records = Records(vstore)
    sid = vstore.scopes()[0].id
    with vstore.write() as conn:
        records.insert(conn, NewRecord(sid, "per_speaker_core", "fact", "ann", "ann", "Ann loves climbing", 1.0,
                                       1, 1, 1.0, [vstore.find(ScopeKey("console", "w", "general"), "1").id], {}),
                       run_id=None, model="t", vector=None)
    pack, prompt, _ = Answerer(vstore, Searcher(vstore), records, None).prepare([sid], "Who likes climbing?")
    rows = {r.key: r for r in pack.rows}
    assert rows["ann"].items and rows["ann"].items[0].record.content == "Ann loves climbing"
    assert rows["ben"].fallback is not None and rows["ben"].fallback.message.msg_id == "2"
    assert "Ann: now: Ann loves climbing" in prompt


def test_row_items_that_repeat_an_excerpt_point_at_it(vstore):
    vstore.ingest([msg(1, "I love climbing and bouldering", author="Ann"), msg(2, "I only like chess", author="Ben")])
    records = Records(vstore)
    sid = vstore.scopes()[0].id
    with vstore.write() as conn:  # an extractive record: the message's own words
        records.insert(conn, NewRecord(sid, "per_speaker_core", "fact", "ann", "ann", "I love climbing and  bouldering",
                                       1.0, 1, 1, 1.0, [vstore.find(ScopeKey("console", "w", "general"), "1").id], {}),
                       run_id=None, model="t", vector=None)
    pack, prompt, _ = Answerer(vstore, Searcher(vstore), records, None).prepare(
        [sid], "What does everyone think of climbing and chess?")
    n_ann = next(c.n for c in pack.excerpts if c.message.msg_id == "1")
    n_ben = next(c.n for c in pack.excerpts if c.message.msg_id == "2")
    assert f"Ann: now: as quoted in [{n_ann}]" in prompt and f"Ben: said [{n_ben}]" in prompt
    evidence = prompt.split("\nQuestion:")[0]
    assert evidence.count("bouldering") == 1 and evidence.count("chess") == 1  # each said once, in the excerpts


def test_full_tense_shows_history_and_group_row_separate(store):
    store.ingest([msg(1, "I want a big party for the anniversary", author="Mum"),
                  msg(2, "Actually a quiet dinner is better for the anniversary", author="Mum"),
                  msg(3, "Decision: dinner at Luigi's for the anniversary", author="Dad")])
    records = Records(store)
    key = ScopeKey("console", "w", "general")
    sid = store.scopes()[0].id
    ids = [store.find(key, str(i)).id for i in (1, 2, 3)]
    with store.write() as conn:
        first = records.insert(conn, NewRecord(sid, "per_speaker_core", "stance", "mum", "mum",
                                               "Mum wants a big party for the anniversary", 1.0, 1, 1, 1, [ids[0]], {}),
                               run_id=None, model="t", vector=None)
        records.insert(conn, NewRecord(sid, "per_speaker_core", "stance", "mum", "mum",
                                       "Mum prefers a quiet dinner for the anniversary", 2.0, 1, 2, 1, [ids[1]], {},
                                       updates=first), run_id=None, model="t", vector=None)
        records.insert(conn, NewRecord(sid, "group_interaction", "decision", GROUP, "dad",
                                       "Dinner at Luigi's for the anniversary", 3.0, 1, 3, 1, [ids[2]], {}),
                       run_id=None, model="t", vector=None)
    answerer = Answerer(store, Searcher(store), records, None)
    pack, prompt, _ = answerer.prepare([sid], "What did Mum originally want for the anniversary?")
    assert "Mum: now: Mum prefers a quiet dinner" in prompt
    assert "Mum: earlier" in prompt and "big party" in prompt
    pack, prompt, _ = answerer.prepare([sid], "What did we decide for the anniversary?")
    assert "GROUP: now: Dinner at Luigi's" in prompt


def test_model_sentence_citing_a_message_the_reply_does_not_show_is_dropped(vstore):
    vstore.ingest([msg(1, "The rehearsal is on Thursday at 8pm", author="Ann")])
    sid = vstore.scopes()[0].id
    llm = ScriptedLLM(["It is on Thursday at 8pm [1][7]."])
    ans = Answerer(vstore, Searcher(vstore), Records(vstore), llm, policy="model").answer(
        [sid], "When is the rehearsal?")
    assert ans.cited == [1] and "[7]" not in ans.text and not ans.generated
    assert any("[7]" in n for n in ans.notes)
    assert llm.calls[0].priority == "interactive" and "[1] Ann" in llm.calls[0].prompt


def test_model_sentence_shown_only_when_supported(vstore):
    vstore.ingest([msg(1, "The rehearsal is on Thursday at 8pm", author="Ann")])
    sid = vstore.scopes()[0].id
    good = Answerer(vstore, Searcher(vstore), Records(vstore),
                    ScriptedLLM(["Ann said the rehearsal is on Thursday at 8pm [1]."]),
                    policy="model").answer([sid], "When is the rehearsal?")
    assert good.generated and good.text.startswith("Ann said the rehearsal is on Thursday at 8pm [1].")
    bad = Answerer(vstore, Searcher(vstore), Records(vstore), ScriptedLLM(["The rehearsal is on Friday at 9pm [1]."]),
                   policy="model").answer([sid], "When is the rehearsal?")
    assert not bad.generated and "Friday" not in bad.text and "9pm" not in bad.text
    uncited = Answerer(vstore, Searcher(vstore), Records(vstore), ScriptedLLM(["It is on Thursday at 8pm."]),
                       policy="model").answer([sid], "When is the rehearsal?")
    assert not uncited.generated and "cites no message" in uncited.notes[-1]


def test_answer_abstains_without_evidence(store):
    ans = Answerer(store, Searcher(store), Records(store), ScriptedLLM([])).answer([], "What is Bob's cat called?")
    assert ans.abstained and not ans.cited and "[1]" not in ans.text


@pytest.mark.parametrize("question, reads", [
    ("where are we climbing on sunday now?", True),  # a place, and a version named
    ("who is bringing the trophies?", True),  # an owner: what a plan holds
    ("what time is dinner?", True),
    ("what was the original venue?", True),  # the first version
    ("what's the rule on borrowing pads now?", True),  # a thing, with a version named
    ("what's the rule on borrowing pads?", False),  # a thing, no version: the reader's order stands
    ("why did the trip get moved to the sunday?", False),  # a reason: no version of a plan holds it
    ("what does Priya think of the friday rule now?", False),  # a view
    ("how much is the fee?", False),
])
def test_a_chain_answers_a_plan_s_value_or_a_named_version_never_a_reason(question, reads):
    assert project(question).reads_chain is reads
