"""/timeline, /profile and the inspector's person page on the demo chat, before and after the writer ran.

Before any writer window the channel has messages and no records: the answers must come from the
messages, cited, and say so. After the writer (a scripted model behind the LLM protocol; the cue
proposer files the demo's decision and rule) they come from records, each citing its message.
"""
from __future__ import annotations

import io
import json

import pytest

from adapters.console import ConsoleChat
from bot.app import Bot
from bot.config import Settings
from bot.inspect_metadata import QUERIES
from memory.db import sqlite3
from memory.llm.fake import ScriptedLLM
from memory.models import Message
from memory.records import GROUP, NewRecord
from memory.store import Store
from memory.writer.writer import Writer, WriterConfig


@pytest.fixture
def demo(tmp_path, embedder):
    settings = Settings()
    settings.store.path = str(tmp_path / "demo.db")
    bot = Bot(settings, store=Store(tmp_path / "demo.db", embedder=embedder), load_models=False)
    chat = ConsoleChat(bot, stdout=io.StringIO(), channel="general")
    assert chat.load_demo() == 14
    yield bot, chat.key
    bot.close()


def run_writer(bot: Bot) -> None:
    """The real Writer with a model that proposes nothing, after the analysis pass as the bot's schedule runs
    them: only the group state's and the cue proposer's records commit."""
    bot.analyse_pending(limit=None)
    writer = Writer(bot.store, ScriptedLLM(['{"actions": []}'] * 10), records=bot.records,
                    config=WriterConfig(extractive=True))
    results = writer.run_pending(force=True)
    assert results and all(r.status == "committed" for r in results)
    assert bot.records.count() > 0


def cited_texts(bot: Bot, reply) -> list[str]:
    return [m.text for m in bot.store.messages([c.message_id for c in reply.citations])]


def test_timeline_before_the_writer_answers_from_the_messages(demo):
    bot, key = demo
    assert bot.records.count() == 0
    reply = bot.timeline(key, "dinner")
    assert "no memory records about 'dinner' yet" not in reply.text.lower()
    first = reply.text.splitlines()[0]
    assert "not read 14" in first and "messages" in first and "No memory records" in first
    texts = cited_texts(bot, reply)
    assert any("end-of-season dinner" in t for t in texts) and any(t.startswith("Decision: pizza") for t in texts)
    stamps = [c.ts for c in reply.citations]
    assert stamps == sorted(stamps)  # time order, numbered in that order
    assert [c.n for c in reply.citations] == list(range(1, len(reply.citations) + 1))
    for c in reply.citations:
        assert f"[{c.n}]" in reply.text
    # Nothing in the chat is about spaceships: no neighbours listed just because search returns some.
    none = bot.timeline(key, "spaceship")
    assert none.citations == [] and "Nothing here is about 'spaceship'" in none.text


def test_timeline_after_the_writer_reads_records_and_lists_unread_messages(demo):
    bot, key = demo
    run_writer(bot)
    reply = bot.timeline(key, "dinner")
    assert reply.text.startswith("Timeline for dinner (memory records")
    assert reply.data["chains"] and ("(group decision)" in reply.text or "(group plan)" in reply.text)
    decision = next(line for line in reply.text.splitlines() if "Decision: pizza" in line)
    assert decision.split(" ", 2)[2].startswith("Maya: “Decision: pizza")  # the speaker, not the bot, says it
    # A new message on the topic the writer has not read yet is shown after the records, as a message.
    bot.store.ingest([Message("console", "local", "general", "late-1", "sam", "Sam",
                              "Can we move the dinner to Saturday instead?", 1_741_800_000.0)], embed=True)
    later = bot.timeline(key, "dinner")
    tail = later.text.split("Not in memory yet", 1)
    assert len(tail) == 2 and "move the dinner to Saturday" in tail[1]


def test_timeline_shows_an_update_chain_old_then_new(demo):
    bot, key = demo
    run_writer(bot)
    sid = bot.store.scope_id(key)
    first = next(r for r in bot.records.heads([sid]) if r.content.startswith("Decision: pizza"))
    late = bot.store.ingest([Message("console", "local", "general", "late-2", "maya", "Maya",
                                     "New plan: the pizza dinner moves to Saturday the 15th at 7pm.", 1_741_900_000.0)],
                            embed=True)
    assert late.inserted == 1
    mid = bot.store.find(key, "late-2").id
    with bot.store.write() as conn:
        bot.records.insert(conn, NewRecord(scope_id=sid, layer="group_interaction", utype="decision", owner=GROUP,
                                           source="maya", content="New plan: the pizza dinner moves to Saturday "
                                           "the 15th at 7pm.", ts=1_741_900_000.0, session=9, turn=1,
                                           confidence=1.0, message_ids=[mid], verification={}, updates=first.id),
                           run_id=None, model="test", vector=bot.store.embedder.embed(["New plan"])[0])
    lines = bot.timeline(key, "pizza dinner").text.splitlines()
    old = next(i for i, line in enumerate(lines) if "Decision: pizza" in line)
    new = next(i for i, line in enumerate(lines) if "New plan" in line)
    assert old < new and "was)" in lines[old] and "now)" in lines[new]


def test_profile_before_the_writer_shows_their_messages(demo):
    bot, key = demo
    reply = bot.profile(key, "Leo")
    first = reply.text.splitlines()[0]
    assert first.startswith("No memory records about Leo are written yet") and "4 of their messages" in first
    texts = cited_texts(bot, reply)
    assert len(texts) == 5 and "Leo has the spare key now" in texts[-1]  # Sam's message naming him, last
    assert reply.text.index("Messages of others that name them") < reply.text.index("spare key")
    assert {c.author for c in reply.citations[:4]} == {"Leo"}
    assert reply.data["records"] == []


@pytest.mark.parametrize("person", ["Maya", "Leo", "Priya", "Sam"])
def test_profile_after_the_writer_reads_right_for_each_member(demo, person):
    bot, key = demo
    run_writer(bot)
    reply = bot.profile(key, person)
    pid = person.casefold()
    lines = reply.text.splitlines()
    assert lines[0] == f"What I remember about {person}:"
    sid = bot.store.scope_id(key)
    own = bot.records.heads([sid], owners=[pid]) + [r for r in bot.records.heads([sid], owners=[GROUP])
                                                     if r.source == pid]
    shown = {tuple(ids) for ids in reply.data["records"] + reply.data["group_records"]}
    # The reply names records by their messages' platform ids, which match the person's own records.
    by_ids = {tuple(m.msg_id for m in bot.store.messages(r.sources)): r for r in own}
    assert shown and shown <= set(by_ids)
    records = [by_ids[ids] for ids in shown]
    assert all(r.owner == pid or (r.owner == GROUP and r.source == pid) for r in records)
    # Every record line cites the message it rests on; a quoted message is quoted under its speaker's name.
    for line in lines[1:]:
        if line.startswith("- "):
            assert line.rstrip().endswith("]"), line
    for c in reply.citations:
        assert f"[{c.n}]" in reply.text
    section = "own"
    for line in lines[1:]:
        if line.startswith("What others said"):
            section = "others"
        elif line.startswith("Group plans"):
            section = "group"
        elif line.startswith("- “") or (line.startswith("- ") and section == "own" and "“" in line):
            assert line.startswith(f"- {person}: “"), line
    if person == "Maya":
        assert "Group plans, decisions and rules they voiced:" in reply.text and "Decision: pizza" in reply.text
    if person == "Leo":
        assert "Rule for the night" in reply.text.split("Group plans", 1)[1]


def _person_page(path, person: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = conn.execute(QUERIES["person"]["sql"], {"person": person, "scope": ""})
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur]
    finally:
        conn.close()


def test_inspector_person_page_before_and_after_the_writer(demo, tmp_path):
    bot, key = demo
    path = tmp_path / "demo.db"
    before = _person_page(path, "Leo")
    assert len(before) == 4 and {r["why"] for r in before} == {"their message"}
    assert {r["state"] for r in before} == {"not yet read by the writer"} and all(r["record"] is None for r in before)
    assert json.loads(before[0]["source_messages"])[0]["author"] == "Leo"
    run_writer(bot)
    leo = _person_page(path, "leo")  # by id as well as by name
    assert leo and all(r["record"] is not None for r in leo)  # the writer read everything: no waiting rows
    whys = [r["why"] for r in leo]
    assert "voiced by them" in whys and whys.index("voiced by them") > whys.index("about them")
    sam = _person_page(path, "Sam")
    about_leo = [r for r in sam if r["owner"] == "Leo"]
    for r in about_leo:
        assert r["why"] == "said by them about Leo"
    for r in leo:
        if r["source"] != "Leo" and r["owner"] == "Leo":
            assert r["why"] == f"about them, said by {r['source']}"


def test_a_message_the_analysis_pass_filed_is_not_listed_again_as_unread(demo):
    """Before the writer runs, the analysis pass has filed the dinner decision as a group record: the timeline
    shows it once, as the record, not again among the messages the writer has not read."""
    bot, key = demo
    bot.analyse_pending(limit=None)
    reply = bot.timeline(key, "dinner")
    assert reply.data["chains"], reply.text
    assert sum("Decision: pizza" in line for line in reply.text.splitlines()) == 1, reply.text
    assert "end-of-season dinner" in reply.text  # an unfiled message on the topic is still listed
