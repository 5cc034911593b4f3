"""The adaptive reader's tool loop, driven by a scripted model behind the LLM protocol, on real SQLite stores."""
from __future__ import annotations

import json
import re
import time

import pytest

from memory.errors import ModelUnavailableError
from memory.llm.fake import ScriptedLLM
from memory.models import ScopeKey
from memory.query.reader import Reader, ReaderConfig
from memory.query.reader_tools import call_schema
from memory.question import Question
from memory.records import NewRecord, Records
from memory.search import Searcher
from tests.conftest import msg


def asked(text: str, stems: list[str] | None = None) -> Question:
    """The Question the reader is handed (the reply's analysis; here only its words, time and topic stems)."""
    return Question(text=text, asked_at=time.time(), stems=stems or [])


def call(tool: str, **args) -> str:
    return json.dumps({"tool": tool, **args})


def ids_in(prompt: str, author: str, *, latest: bool = True) -> list[int]:
    """Message ids tool results showed for ``author``: in the latest result, or anywhere in the transcript."""
    text = prompt.rsplit("Result of", 1)[-1] if latest else prompt
    return sorted({int(i) for i in re.findall(rf"#(\d+) {author} @", text)})


@pytest.fixture
def chat_store(store):
    store.ingest([
        msg(1, "I moved the band rehearsal to next Friday", author="Ann", ts=1_741_176_000),  # Wed 2025-03-05
        msg(2, "Works for me, I'll bring the drums", author="Ben", ts=1_741_176_060),
        msg(3, "Remember the blue van needs new tyres", author="Cy", ts=1_741_176_120),
        msg(4, "Who has the spare amplifier?", author="Ben", ts=1_741_176_180),
        msg(5, "I have the spare amplifier in my garage", author="Ann", ts=1_741_176_240),
    ])
    sid = store.scopes()[0].id
    key = ScopeKey("console", "w", "general")
    records = Records(store)
    first = store.find(key, "1").id
    with store.write() as conn:
        records.insert(conn, NewRecord(sid, "per_speaker_core", "fact", "ann", "ann",
                                       "Ann keeps the spare amplifier in her garage", 1_741_176_240.0, 1, 5, 1.0,
                                       [store.find(key, "5").id], {}), run_id=None, model="t", vector=None)
        records.insert(conn, NewRecord(sid, "group_interaction", "decision", "GROUP", "ann",
                                       "Band rehearsal moved to next Friday", 1_741_176_000.0, 1, 1, 1.0,
                                       [first], {}), run_id=None, model="t", vector=None)
    return store, sid, records


def reader_for(store, records, responses, **kw) -> tuple[Reader, ScriptedLLM]:
    llm = ScriptedLLM(responses, chat_template=kw.pop("chat", True))
    return Reader(store, Searcher(store), records, llm, config=ReaderConfig(**kw)), llm


def test_search_then_answer_cites_what_the_tool_showed(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [
        call("search_evidence", query="spare amplifier", k=3),
        lambda p: call("answer", text="Ann has it in her garage.", cite=ids_in(p, "Ann") + [999]),
    ])
    result = reader.read([sid], asked("Who has the spare amplifier?"))
    assert result.stopped == "answered" and result.rounds == 2
    assert [m.text for m in result.cited] == ["I have the spare amplifier in my garage"]
    assert any("999" in n for n in result.notes)  # a citation of a message no tool showed is dropped
    first = result.tool_log[0]
    assert first.tool == "search_evidence" and first.ok and first.message_ids
    assert first.args == {"query": "spare amplifier", "k": 3}
    assert llm.calls[0].messages is not None and llm.calls[0].priority == "interactive"
    assert llm.calls[0].json_schema == call_schema(allow_answer=False)  # the first turn must look something up
    assert llm.calls[1].json_schema == call_schema()
    assert result.prompt_tokens > 0 and result.completion_tokens > 0


def test_lookup_phrase_finds_exact_words(chat_store):
    store, sid, records = chat_store
    reader, _ = reader_for(store, records, [
        call("lookup_phrase", phrase="blue van"),
        lambda p: call("answer", text="Cy said it.", cite=ids_in(p, "Cy")),
    ])
    result = reader.read([sid], asked("Who said 'blue van'?"))
    assert result.tool_log[0].ok and "Remember the blue van" in result.tool_log[0].result
    assert [m.author_name for m in result.cited] == ["Cy"]


def test_read_current_state_of_a_person_and_a_topic(chat_store):
    store, sid, records = chat_store
    reader, _ = reader_for(store, records, [
        call("read_current_state", about="Ann"),
        call("read_current_state", about="rehearsal"),
        lambda p: call("answer", text="Rehearsal moved.", cite=ids_in(p, "Ann")),
    ])
    result = reader.read([sid], asked("What is the current plan?"))
    person, topic = result.tool_log[0], result.tool_log[1]
    assert person.ok and "spare amplifier in her garage" in person.result and "rests on #" in person.result
    assert topic.ok and "Band rehearsal moved to next Friday" in topic.result
    assert result.cited and result.cited[0].text.startswith("I moved the band rehearsal")


def test_resolve_date_against_the_message_time(chat_store):
    store, sid, records = chat_store
    first = store.find(ScopeKey("console", "w", "general"), "1").id
    reader, _ = reader_for(store, records, [
        call("resolve_date", expression="next Friday", message_id=first),
        call("resolve_date", expression="next Friday", message_id=424242),
        call("answer", text="Friday 7 March 2025.", cite=[first]),
    ])
    result = reader.read([sid], asked("When is the rehearsal?"))
    assert result.tool_log[0].ok and "2025-03-07" in result.tool_log[0].result
    assert not result.tool_log[1].ok and "not in this channel" in result.tool_log[1].error
    assert [m.id for m in result.cited] == [first]


def test_unknown_tool_and_bad_arguments_are_logged_and_shown_to_the_model(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [
        call("delete_everything"),
        call("search_evidence", query="", k=99),
        "this is not json",
        call("answer", text="I could not find it.", cite=[]),
    ])
    result = reader.read([sid], asked("Anything about cats?"))
    unknown, bad, garbage = result.tool_log[:3]
    assert not unknown.ok and "unknown tool 'delete_everything'" in unknown.error
    assert not bad.ok and "bad arguments for search_evidence" in bad.error and "query" in bad.error
    assert not garbage.ok and "JSON" in garbage.error
    assert "Tool error: unknown tool" in llm.calls[1].prompt  # the model is told what went wrong
    assert "not a valid tool call" in llm.calls[3].prompt
    assert result.stopped == "answered" and result.cited == []
    assert any("cites no message" in n for n in result.notes)


def test_an_answer_before_any_lookup_is_refused(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [
        call("answer", text="Ann, surely.", cite=[]),
        call("lookup_phrase", phrase="spare amplifier"),
        lambda p: call("answer", text="Ann has it.", cite=ids_in(p, "Ann")),
    ])
    result = reader.read([sid], asked("Who has the spare amplifier?"))
    assert not result.tool_log[0].ok and "look something up first" in result.tool_log[0].error
    assert result.stopped == "answered" and result.text == "Ann has it." and result.cited


def test_round_budget_forces_an_answer_with_tools_disallowed(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [call("search_evidence", query="drums")] * 2 + [
        lambda p: call("answer", text="Ben brings drums.", cite=ids_in(p, "Ben", latest=False))], max_rounds=2)
    result = reader.read([sid], asked("Who brings the drums?"))
    assert result.rounds == 3 and result.stopped == "rounds" and result.cited
    assert llm.calls[2].json_schema == call_schema(allow_tools=False)
    assert "last lookup" in llm.calls[2].prompt
    # the second search left out what the first one had shown
    assert not set(result.tool_log[0].message_ids) & set(result.tool_log[1].message_ids)


def test_token_budget_exhaustion_stops_without_an_answer(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [call("search_evidence", query="amplifier garage van drums")] * 5,
                             token_budget=700, max_tokens_per_call=120)
    result = reader.read([sid], asked("Tell me everything"))
    assert result.text == "" and result.cited == [] and result.stopped == "tokens"
    assert len(llm.calls) < 5 and any("token budget" in n for n in result.notes)


def test_a_tool_call_in_the_forced_last_round_gives_no_answer(chat_store):
    store, sid, records = chat_store
    reader, _ = reader_for(store, records, [call("search_evidence", query="van")] * 2, max_rounds=1)
    result = reader.read([sid], asked("Which van?"))
    assert not result.answered and "only the answer tool" in result.tool_log[-1].error


def test_model_failure_ends_the_loop_cleanly(chat_store):
    store, sid, records = chat_store
    reader, _ = reader_for(store, records, [call("search_evidence", query="van"),
                                            ModelUnavailableError("server answered HTTP 503")])
    result = reader.read([sid], asked("Which van?"))
    assert result.stopped == "model_error" and not result.answered and "503" in result.notes[0]


def test_completion_form_renders_the_transcript_as_one_prompt(chat_store):
    store, sid, records = chat_store
    reader, llm = reader_for(store, records, [
        call("search_evidence", query="amplifier"),
        lambda p: call("answer", text="Ann.", cite=ids_in(p, "Ann")),
    ], chat=False)
    result = reader.read([sid], asked("Who has the amplifier?"))
    assert result.form == "completion" and result.cited
    assert llm.calls[1].messages is None and llm.calls[1].prompt.endswith("Call: ")
    assert "Result of search_evidence" in llm.calls[1].prompt


def test_tools_never_leave_the_question_scope(store):
    store.ingest([msg(1, "secret plan in the other channel", author="Eve", channel="other"),
                  msg(2, "nothing to see here", author="Ann")])
    general = store.scope_id(ScopeKey("console", "w", "general"))
    other_msg = store.find(ScopeKey("console", "w", "other"), "1").id
    reader, _ = reader_for(store, Records(store), [
        call("lookup_phrase", phrase="secret plan"),
        call("resolve_date", expression="today", message_id=other_msg),
        call("answer", text="Nothing.", cite=[other_msg]),
    ])
    result = reader.read([general], asked("What is the secret plan?"))
    assert "no message contains" in result.tool_log[0].result
    assert not result.tool_log[1].ok and result.cited == []


@pytest.mark.model
def test_real_model_drives_the_tool_loop_end_to_end(vstore):
    """SmolLM2-135M-Instruct through its chat template: the loop ends inside its budgets, every round is
    logged, and whatever it cites is a message a tool showed it. (Answer quality is not asserted: a 135M model
    is far below what the reader is meant for; docs/models.md reports what it did.)"""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by scripts/setup.sh")
    from pathlib import Path

    from memory.datasets.jsonl import read_jsonl
    from memory.llm.default_model import smollm2_path
    from memory.llm.llama import LlamaCppLLM

    vstore.ingest(read_jsonl(Path(__file__).resolve().parents[1] / "bot" / "demo" / "demo.jsonl"))
    sid = vstore.scopes()[0].id
    llm = LlamaCppLLM(smollm2_path(), n_ctx=8192)
    try:
        reader = Reader(vstore, Searcher(vstore), Records(vstore), llm,
                        config=ReaderConfig(max_rounds=4, token_budget=6000))
        result = reader.read([sid], asked("Which restaurant did the team pick for the dinner?"))
    finally:
        llm.close()
    assert result.form == "chat" and 1 <= result.rounds <= 5
    assert result.prompt_tokens + result.completion_tokens <= 6000 + 160
    assert len(result.tool_log) == result.rounds
    shown = {i for c in result.tool_log for i in c.message_ids}
    assert all(m.id in shown for m in result.cited)
    print(f"\nreader: stopped={result.stopped} rounds={result.rounds} tokens={result.prompt_tokens}+"
          f"{result.completion_tokens} seconds={result.seconds:.1f} answer={result.text!r} "
          f"cited={[m.id for m in result.cited]}")
    for c in result.tool_log:
        print(f"  round {c.round}: {c.tool} {c.args} ok={c.ok} {c.error or c.result[:120]!r} ({c.seconds:.1f}s)")


def test_answer_is_handed_to_the_support_check_with_its_citations(chat_store):
    from memory.query.support import check_sentence

    store, sid, records = chat_store
    reader, _ = reader_for(store, records, [
        call("search_evidence", query="spare amplifier", k=3),
        lambda p: call("answer", text=f"Ann has the spare amplifier in her garage (#{ids_in(p, 'Ann')[0]}).",
                       cite=ids_in(p, "Ann")),
    ])
    result = reader.read([sid], asked("Who has the spare amplifier?"))
    sentence, texts, names = result.for_support_check()
    assert "#" not in sentence and sentence.endswith("[1]") and texts[1].startswith("Ann: I have the spare")
    assert check_sentence(sentence, texts, known_names=names).ok
    result.text = "Ben has the spare amplifier in Paris."
    assert not check_sentence(*result.for_support_check()[:2], known_names=names).ok


def test_a_checked_reader_answer_replaces_the_draft_and_a_failing_one_does_not(chat_store):
    from memory.query.reader_reply import read_into
    from memory.query.reply import Quoted, ReplyDraft

    store, sid, records = chat_store
    other = store.recent(sid, 10)[0]

    def draft() -> ReplyDraft:
        return ReplyDraft("Here is what I found:", [Quoted(1, other, other.text)], False, "evidence")

    good, _ = reader_for(store, records, [
        call("lookup_phrase", phrase="spare amplifier"),
        lambda p: call("answer", text="Ann has the spare amplifier in her garage.", cite=ids_in(p, "Ann")),
    ])
    d = draft()
    result, check = read_into(good, d, [sid], asked("Who has the spare amplifier?", ["spare", "amplifier"]))
    assert check.ok and d.lead.startswith("Ann has the spare amplifier") and d.lead.endswith("[1]")
    assert [q.message.text for q in d.quoted] == ["I have the spare amplifier in my garage"]
    bad, _ = reader_for(store, records, [
        call("lookup_phrase", phrase="spare amplifier"),
        lambda p: call("answer", text="Cy keeps it in Paris.", cite=ids_in(p, "Ann")),
    ])
    d = draft()
    result, check = read_into(bad, d, [sid], asked("Who has the spare amplifier?", ["spare", "amplifier"]))
    assert not check.ok and d.lead == "Here is what I found:" and d.quoted[0].message.id == other.id
    assert any("reader answer not shown" in n for n in d.notes)


def test_answerer_uses_a_configured_reader_and_falls_back_when_its_answer_fails(chat_store):
    from memory.query.answer import Answerer

    store, sid, records = chat_store
    llm = ScriptedLLM([
        call("lookup_phrase", phrase="spare amplifier"),
        lambda p: call("answer", text="Ann has the spare amplifier in her garage.", cite=ids_in(p, "Ann")),
        # second question: the reader's answer fails its check, so the one-shot sentence is asked for
        call("lookup_phrase", phrase="spare amplifier"),
        call("answer", text="Nobody knows.", cite=[]),
        "I don't know.",
    ], chat_template=True)
    reader = Reader(store, Searcher(store), records, llm, config=ReaderConfig(max_rounds=2))
    answerer = Answerer(store, Searcher(store), records, llm, policy="model", reader=reader)
    ans = answerer.answer([sid], "Who has the spare amplifier?")
    assert ans.generated.startswith("Ann has the spare amplifier") and ans.support.ok and ans.model_used
    assert [m.text for m in ans.cited_messages] == ["I have the spare amplifier in my garage"]
    assert "reader" in ans.timings_ms and any(n.startswith("reader:") for n in ans.notes)
    ans = answerer.answer([sid], "Who has the spare amplifier?")
    assert any("reader answer not shown" in n for n in ans.notes)
    assert llm.remaining == 0 and llm.calls[-1].messages[0]["content"].startswith("You are Chorus")


def test_the_bot_builds_a_reader_only_when_configured(store):
    from bot.app import Bot
    from bot.config import Settings

    fake = ScriptedLLM([], chat_template=True)
    off = Bot(Settings.model_validate({"answer": {"policy": "model"}}), store=store, llm=fake, load_models=False)
    assert off.answerer().reader is None
    on = Bot(Settings.model_validate({"answer": {"policy": "model", "reader": True, "reader_rounds": 3,
                                                 "reader_token_budget": 2000}}),
             store=store, llm=fake, load_models=False)
    reader = on.answerer().reader
    assert reader is not None and reader.config.max_rounds == 3 and reader.config.token_budget == 2000
    evidence = Bot(Settings.model_validate({"answer": {"policy": "evidence", "reader": True}}), store=store,
                   llm=fake, load_models=False)
    assert evidence.answerer().reader is None  # no model sentence at all under the evidence policy
