"""Hostile input: fuzzed text everywhere, and a prompt-injection corpus aimed at the writer and the answerer.

- Ingest, search (every mode), commands and the writer's verifier get arbitrary unicode, control
  characters, NUL bytes, lone surrogates, huge texts, FTS5 syntax and SQL-looking strings: nothing
  crashes, nothing is stored half-way, results stay in their scope, indexes stay consistent.
- ``tests/data/injection_corpus.jsonl`` (our own corpus) holds chat lines that try to steer the
  writer (fake system lines, fake JSON actions, fake entry ids, fake prompt layout) and lines that
  ask the answerer for other scopes, other users' DMs, the config or tokens. A scripted model
  proposes records copied from the writer lines; none may be committed resting on a steering
  message, ungrounded, or attributed to someone who did not write its message. The answer path,
  even with a model that repeats everything it is shown, never includes another scope's content
  or any secret environment value.
"""
from __future__ import annotations

import json
import logging
import string
import tempfile
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.actions import Actions, Invoker, guarded
from bot.app import Bot
from bot.command_table import run_text
from bot.config import Settings
from memory import privacy
from memory.errors import InputError
from memory.llm.fake import ScriptedLLM
from memory.models import Message, ScopeKey, clean_text
from memory.records import GROUP, LAYERS, PERSON_LAYERS, UTYPES, Records
from memory.records_sync import attach
from memory.search import Searcher
from memory.store import MAX_TEXT_CHARS, Store
from memory.writer.grounding import ground, near_duplicate, steering_reason
from memory.writer.verify import RosterIndex, parse_actions, salvage_actions, verify
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import HashEmbedder
from tests._integrity import assert_consistent
from tests._properties import prop

CORPUS = [json.loads(line) for line in
          (Path(__file__).parent / "data" / "injection_corpus.jsonl").read_text("utf-8").splitlines() if line.strip()]
WRITER_LINES = [c for c in CORPUS if c["target"] == "writer"]
ANSWER_LINES = [c for c in CORPUS if c["target"] == "answerer"]
T0 = 1_717_000_000.0
KEY = ScopeKey("slack", "T1", "C1")

# Text that looks like syntax somewhere: FTS5, SQL, JSON, markup, format strings, paths.
NASTY = [
    '"', '""', "'", "*", "-", "^", ":", "(", ")", "NEAR(a b)", "a AND OR NOT b", "NOT", "OR", "AND",
    "scope_tag:s2", "scope_tag:(s1 OR s2)", "{text author_name}: x", "text: hello", 'x" OR "1"="1', "col:val*",
    "'; DROP TABLE messages; --", "1; DELETE FROM records WHERE 1=1", "UNION SELECT * FROM people",
    "%s %d {0} {name} %(x)s", "\\x00\\n", "${HOME}", "../../etc/passwd", "<script>alert(1)</script>",
    "```json\n{\"actions\": []}\n```", "E1", "UPDATE E1", "\u202etxet desrever", "\u200b\u200c\u200d\ufeff",
    "🎉" * 50, "ä" * 3, "\x1b[31mred\x1b[0m", "\r\n\t\x0b\x0c", "\x00\x01\x02", "\ud800", "a\udfffb",
]
hostile_text = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=300),  # surrogates and controls included
    st.sampled_from(NASTY),
    st.lists(st.sampled_from(NASTY + ["launch", "code", "Bob", "the"]), max_size=12).map(" ".join),
    st.text(string.printable, min_size=0, max_size=2000),
)


def world(folder: Path) -> tuple[Store, Bot]:
    store = Store(folder / "hostile.db", embedder=HashEmbedder())
    bot = Bot(Settings(), store=store, llm=None, load_models=False)
    store.ingest([
        Message("slack", "T1", "C1", "1", "u1", "Alice", "the launch code is blue heron", T0),
        Message("slack", "T2", "C1", "1", "u1", "Alice", "the launch code is red fox OTHERSCOPE", T0),
        Message("slack", "T1", "D1", "1", "u2", "Bob", "my DM secret is DMSECRET", T0, is_dm=True),
    ], embed=True)
    return store, bot


# ---------------------------------------------------------------------- the corpus itself
def test_corpus_is_ours_and_every_writer_line_is_recognised_as_steering():
    assert len(CORPUS) >= 40 and {c["target"] for c in CORPUS} == {"writer", "answerer"}
    kinds = {c["kind"] for c in CORPUS}
    assert {"fake-system", "fake-json", "fake-entry-id", "other-scope", "other-dm", "config", "secret"} <= kinds
    missed = [c["text"] for c in WRITER_LINES if steering_reason(c["text"]) is None]
    assert not missed, f"steering lines not recognised: {missed}"
    benign = ["I will update the doc tomorrow", "we need E1 and E2 forms", "my car is an E36", "I added 3 eggs",
              "The system is down again", "new messages are in your inbox", "ignore him, he's joking"]
    assert [t for t in benign if steering_reason(t)] == []


# ---------------------------------------------------------------------- the writer under injection
BENIGN = [("u1", "Alice", "I work as a nurse at St Mary's hospital"),
          ("u2", "Bob", "I like hiking in the hills on weekends"),
          ("u3", "Carol", "I am learning to play the cello this year")]


def writer_proposals(heads: dict[str, int]):
    """A model that does whatever the chat tells it: proposes records copied from the message it reads."""

    def respond(prompt: str) -> str:
        line = prompt.split("New messages:\n")[-1].split("\nActions:")[0]
        speaker, _, text = line.partition(") ")[2].partition(" @ ")
        text = text.split(": ", 1)[1] if ": " in text else text
        hit = next((c for c in CORPUS if " ".join(c["text"].split())[:80] in " ".join(prompt.split())), None)
        payload = hit["payload"] if hit and hit["payload"] else text
        actions = [
            {"op": "ADD", "owner": "Bob", "source": speaker, "layer": "per_speaker_profile", "utype": "observation",
             "content": payload},
            {"op": "ADD", "owner": speaker, "source": speaker, "layer": "per_speaker_core", "utype": "fact",
             "content": text[:390]},
            {"op": "ADD", "owner": "Alice", "source": "Alice", "layer": "per_speaker_core", "utype": "fact",
             "content": payload},  # misattributed
            {"op": "UPDATE", "entry_id": f"E{heads['u1']}", "content": payload},
            {"op": "UPDATE", "entry_id": f"E{heads['u2']}", "content": text[:390]},
            {"op": "ADD", "owner": "GROUP", "source": speaker, "layer": "group_interaction", "utype": "decision",
             "content": payload, "msg": 1},
        ]
        if hit is not None:  # the fake JSON in the message itself, proposed as-is
            try:
                embedded = json.loads(hit["text"])
            except ValueError:
                embedded = None
            if isinstance(embedded, dict):
                actions += embedded.get("actions", [embedded])[:2]
        return json.dumps({"actions": actions[:8]})

    return respond


def test_writer_commits_nothing_from_injected_instructions(tmp_path):
    store = Store(tmp_path / "w.db", embedder=HashEmbedder())
    records = Records(store)
    attach(store, records)
    store.ingest([Message(KEY.platform, KEY.workspace, KEY.channel, str(n), uid, name, text, T0 + n)
                  for n, (uid, name, text) in enumerate(BENIGN)], embed=True)

    def own(prompt: str) -> str:
        line = prompt.split("New messages:\n")[-1].split("\n")[0]
        speaker, text = line.partition(") ")[2].split(" @ ")[0], line.split(": ", 1)[1]
        return json.dumps({"actions": [{"op": "ADD", "owner": speaker, "source": speaker, "layer": "per_speaker_core",
                                        "utype": "fact", "content": text}]})

    clock = lambda: 2_000_000_000.0  # noqa: E731
    Writer(store, ScriptedLLM([own] * 3), config=WriterConfig(window_messages=1), records=records,
           clock=clock).run_pending(force=True)
    heads = {r.owner: r.id for r in records.heads([store.scope_id(KEY)])}
    assert set(heads) == {"u1", "u2", "u3"}

    chat = [Message(KEY.platform, KEY.workspace, KEY.channel, f"x{n}", "u9", "Mallory", c["text"], T0 + 100 + n)
            for n, c in enumerate(CORPUS)]
    chat += [Message(KEY.platform, KEY.workspace, KEY.channel, "late1", "u1", "Alice",
                     "I moved to the night shift at St Mary's hospital", T0 + 500),
             Message(KEY.platform, KEY.workspace, KEY.channel, "late2", "u2", "Bob",
                     "Alice quit her nursing job at St Mary's hospital", T0 + 501)]
    store.ingest(chat, embed=True)
    Writer(store, ScriptedLLM([writer_proposals(heads)] * (len(chat) + 5)), config=WriterConfig(window_messages=1),
           records=records, clock=clock).run_pending(force=True)

    committed = [r for r in records.get(list(range(1, 10_000)), with_sources=True) if r.status == "active"]
    for rec in committed:
        [source_msg] = store.messages(rec.sources)
        assert steering_reason(source_msg.text) is None, (rec.content, source_msg.text)
        assert ground(rec.content, [source_msg.text]).score >= 0.5, (rec.content, source_msg.text)
        assert rec.source == source_msg.author_id, (rec.content, rec.source, source_msg.author_name)
    for c in WRITER_LINES:
        assert not any(near_duplicate(c["payload"], r.content, 0.6) for r in committed), c["payload"]
    # Honest chat still becomes memory, under the right name: Bob's claim about Alice is his, not hers.
    late = {m.msg_id: m.id for m in store.messages([m.id for m in store.recent(store.scope_id(KEY), 2)])}
    assert any(r.sources == [late["late1"]] and r.source == "u1" for r in committed)
    assert any(r.sources == [late["late2"]] and r.source == "u2" for r in committed)
    assert all(r.source == "u1" for r in records.chain(heads["u1"]))
    window, roster, heads_ = verifier_fixture([(0, "I moved to the night shift at the hospital"),
                                               (1, "Alice quit her nursing job at the hospital")])
    update = {"op": "UPDATE", "entry_id": "E1"}
    ok = verify([{**update, "content": "Alice moved to the night shift at the hospital"}], window=window, roster=roster,
                heads=heads_, threshold=0.5, scope_id=1)
    assert len(ok.accepted) == 1 and ok.accepted[0].source == "u1"
    bad = verify([{**update, "content": "Alice quit her nursing job at the hospital"}], window=window, roster=roster,
                 heads=heads_, threshold=0.5, scope_id=1)
    assert not bad.accepted and "name" in bad.rejected[0].reason
    with store.read() as conn:
        reasons = [json.loads(r[0]) for r in conn.execute("SELECT rejected FROM writer_runs WHERE rejected != '[]'")]
    assert sum(len(r) for r in reasons) >= 5 * len(WRITER_LINES)  # every rejection is logged with its reason
    assert_consistent(tmp_path / "w.db")
    store.close()


# ---------------------------------------------------------------------- the verifier, fuzzed
PEOPLE = [("u1", "Alice"), ("u2", "Bob"), ("u9", "Mallory")]


def verifier_fixture(texts: list[tuple[int, str]]):
    from memory.models import StoredMessage
    from memory.records import Record
    from memory.store import Person

    window = [StoredMessage(10 + n, 1, "slack", "T1", "C1", "", f"m{n}", PEOPLE[who][0], PEOPLE[who][1],
                            clean_text(text), T0 + n, 1, n + 1) for n, (who, text) in enumerate(texts)]
    roster = RosterIndex([Person(1, pid, name, [], 1, T0, T0) for pid, name in PEOPLE])
    heads = {1: Record(1, 1, "per_speaker_core", "fact", "u1", "u1", "Alice works as a nurse", T0, 1, 1, 1.0, "active",
                       None, None, 1, "m", {}, T0),
             2: Record(2, 1, "group_interaction", "decision", GROUP, "u2", "the group meets on Friday", T0, 1, 2, 1.0,
                       "active", None, None, 2, "m", {}, T0)}
    return window, roster, heads


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=True), hostile_text)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3) |
                          st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)


@st.composite
def proposals(draw, texts: list[str]):
    """Mostly well-formed actions with hostile fields, some pure garbage."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_value)
    pick = st.sampled_from
    content = draw(st.one_of(pick(texts or ["x"]), pick([c["payload"] or c["text"] for c in CORPUS]), hostile_text,
                             st.builds(lambda t, n: " ".join(t.split()[:n]), pick(texts or ["x"]), st.integers(1, 8))))
    action = {"op": draw(pick(["ADD", "UPDATE", "NOOP", "add", "DELETE", "", None, 3])),
              "owner": draw(pick(["Alice", "bob", "u9", "GROUP", "group", "Eve", "", None, 7, ["Alice"]])),
              "source": draw(pick(["Alice", "Bob", "Mallory", "u1", "GROUP", "Eve", None])),
              "layer": draw(pick(list(LAYERS) + ["", "system", None])),
              "utype": draw(pick(list(UTYPES) + ["secret", None])),
              "content": content,
              "entry_id": draw(pick(["E1", "E2", "e1", "1", 1, "E99999999999", "UPDATE E1", "", None, -1, 2.0])),
              "msg": draw(pick([None, 0, 1, 2, 3, 99, True, "1", -1]))}
    for k in draw(st.sets(pick(list(action)), max_size=3)):
        action.pop(k)
    return action


@prop(400)
@given(st.data())
def test_verifier_never_accepts_what_it_must_not(data):
    texts = data.draw(st.lists(st.tuples(st.integers(0, 2), st.one_of(
        st.sampled_from([c["text"] for c in CORPUS] + [t for _, _, t in BENIGN]), hostile_text)),
        min_size=1, max_size=6))
    window, roster, heads = verifier_fixture(texts)
    actions = data.draw(st.lists(proposals([m.text for m in window]), max_size=12))
    verdict = verify(actions, window=window, roster=roster, heads=heads, threshold=0.5, scope_id=1)
    assert len(verdict.accepted) + len(verdict.rejected) + verdict.noops == len(actions)
    assert all(isinstance(r.reason, str) and r.reason for r in verdict.rejected)
    person_ids = {pid for pid, _ in PEOPLE}
    for rec in verdict.accepted:
        [src] = [m for m in window if m.id in rec.message_ids]
        assert steering_reason(src.text) is None
        assert ground(rec.content, [src.text]).score >= 0.5
        assert rec.owner in person_ids | {GROUP} and rec.source in person_ids
        assert rec.layer in LAYERS and rec.utype in UTYPES and 0 < len(rec.content) <= 400
        assert (rec.layer in PERSON_LAYERS) == (rec.owner != GROUP)
        if rec.updates is not None:
            assert rec.updates in heads
        if rec.owner != GROUP:
            assert rec.source == src.author_id  # a person's record is only ever what that source wrote


@prop(300, slow=False)
@given(st.one_of(hostile_text, json_value.map(json.dumps), st.builds(lambda a, n: json.dumps({"actions": a})[:n],
                                                                      st.lists(json_value, max_size=4),
                                                                      st.integers(0, 400))))
def test_model_output_parsing_fails_only_with_a_reason(raw):
    try:
        assert isinstance(parse_actions(raw), list)
    except ValueError as exc:
        assert str(exc)
    assert isinstance(salvage_actions(raw), list)


# ---------------------------------------------------------------------- ingest, search, commands, fuzzed
@prop(150)
@given(st.lists(st.tuples(hostile_text, hostile_text, hostile_text), min_size=1, max_size=8), hostile_text)
def test_ingest_and_search_survive_anything(items, query):
    with tempfile.TemporaryDirectory() as tmp:
        store, bot = world(Path(tmp))
        try:
            msgs = []
            for n, (text, name, ident) in enumerate(items):
                try:
                    msgs.append(Message("slack", "T1", "C1", f"f{n}-{ident[:40]}", "u7", name, text, T0 + n))
                except InputError:
                    assert not clean_text(f"f{n}-{ident[:40]}").strip() or len(clean_text(ident)) > 256
            result = store.ingest(msgs, embed=True)
            assert result.inserted + result.duplicates == len(msgs)
            sid = store.scope_id(KEY)
            for m in msgs:
                got = store.find(KEY, m.msg_id)
                assert got is not None and got.text == m.text and m.text == clean_text(m.text)
            searcher = Searcher(store)
            for mode in ("bm25", "dense", "hybrid"):
                for hit in searcher.search([sid], query, mode=mode):
                    assert hit.message.scope_id == sid
            assert all(m.scope_id == sid for m in searcher.phrase([sid], query))
            assert all(m.scope_id == sid for m in searcher.by_author([sid], "u7", query, k=3))
            assert all(r.scope_id == sid for r, _ in bot.records.search([sid], query))
            for reply in (bot.ask(KEY, query), bot.whosaid(KEY, query), bot.profile(KEY, query),
                          bot.timeline(KEY, query)):
                assert "OTHERSCOPE" not in reply.text and "DMSECRET" not in reply.text
                assert len(reply.text) <= bot.settings.answer.max_chars
        finally:
            bot.close()
        assert_consistent(Path(tmp) / "hostile.db")


@prop(150)
@given(hostile_text, st.sampled_from(["", "ask ", "whosaid ", "profile ", "timeline ", "forget message ",
                                      "forget me ", "channel ", "pause", "export", "status", "optout", "help "]))
def test_commands_never_crash_and_never_leak(text, verb):
    with tempfile.TemporaryDirectory() as tmp:
        store, bot = world(Path(tmp))
        acts = Actions(bot)
        inv = Invoker(KEY, "u1", "Alice", is_admin=False)
        records: list[logging.LogRecord] = []
        handler = logging.Handler(logging.ERROR)
        handler.emit = records.append  # type: ignore[method-assign]
        logging.getLogger().addHandler(handler)
        try:
            reply = guarded("fuzz", lambda: run_text(acts, inv, verb + text))
            assert reply.text and "OTHERSCOPE" not in reply.text and "DMSECRET" not in reply.text
            if reply.attachment is not None:  # export: only Alice's own data
                assert "OTHERSCOPE" not in reply.attachment.decode() and "DMSECRET" not in reply.attachment.decode()
            assert not records, [r.getMessage() for r in records]  # no unexpected exception anywhere
            assert not privacy.is_paused(store, "slack", "T1")  # a non-admin can never pause
        finally:
            logging.getLogger().removeHandler(handler)
            bot.close()


def test_huge_texts(tmp_path):
    store, bot = world(tmp_path)
    try:
        big = ("word " * (MAX_TEXT_CHARS // 5))[:MAX_TEXT_CHARS]
        assert store.ingest([Message("slack", "T1", "C1", "big", "u1", "Alice", big, T0 + 9)]).inserted == 1
        assert len(store.find(KEY, "big").text) == MAX_TEXT_CHARS
        with pytest.raises(InputError, match="limit"):
            store.ingest([Message("slack", "T1", "C1", "bigger", "u1", "Alice", big + "x", T0 + 10)])
        assert store.find(KEY, "bigger") is None
        with pytest.raises(InputError):
            Message("slack", "T1", "C1", "x" * 257, "u1", "Alice", "hi", T0)
        for reply in (bot.ask(KEY, big), bot.whosaid(KEY, big[:5000]), bot.timeline(KEY, big)):
            assert len(reply.text) <= bot.settings.answer.max_chars
        hits = Searcher(store).search([store.scope_id(KEY)], "word " * 5000)
        assert hits and all(h.message.scope_id == store.scope_id(KEY) for h in hits)
    finally:
        bot.close()
    assert_consistent(tmp_path / "hostile.db")


def test_lone_surrogates_from_a_json_payload_are_stored_not_fatal(tmp_path):
    payload = json.loads('{"text": "broken emoji \\ud83d then \\ud83d\\ude00 fine", "user": "u\\udfff1"}')
    store, bot = world(tmp_path)
    try:
        msg = Message("slack", "T1", "C1", "s1", payload["user"], "X", payload["text"], T0 + 5)
        assert store.ingest([msg]).inserted == 1
        assert store.find(KEY, "s1").text == "broken emoji \ufffd then \U0001f600 fine"
        assert bot.ask(KEY, "broken emoji \ud83d").text
    finally:
        bot.close()


# ---------------------------------------------------------------------- the answerer under injection
SECRETS = {"DISCORD_TOKEN": "MTEx.discord-token-SECRET-7f3a9c", "SLACK_BOT_TOKEN": "xoxb-111-222-SECRETbot",
           "SLACK_APP_TOKEN": "xapp-1-SECRETapp", "SLACK_SIGNING_SECRET": "signing-SECRET-0b5e",
           "OPENAI_API_KEY": "sk-SECRET-llm-key"}


@pytest.fixture
def two_workspaces(tmp_path, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    settings_ = Settings.model_validate({"llm": {"api_key_env": "OPENAI_API_KEY"}})
    store = Store(tmp_path / "answer.db", embedder=HashEmbedder())
    store.ingest([
        Message("slack", "T1", "C1", "1", "u1", "Alice", "the offsite is in Lisbon on Friday", T0),
        Message("slack", "T1", "C1", "2", "u2", "Bob", "my salary discussion is private", T0 + 1),
        Message("slack", "T2", "C1", "1", "u1", "Alice", "the offsite is in Oslo OTHERWS-Alice", T0),
        Message("slack", "T2", "secret-hr", "1", "u3", "Carol", "HR note: Bob salary 5000 HRLEAK", T0),
        Message("slack", "T1", "D1", "1", "u2", "Bob", "my salary is 5000 DMLEAK-Bob", T0, is_dm=True),
        Message("slack", "T1", "D2", "1", "u1", "Alice", "private to the bot: DMLEAK-Alice", T0, is_dm=True),
        Message("discord", "G1", "C1", "1", "u1", "Alice", "other server says OTHERSERVER", T0),
    ], embed=True)
    store.ingest([Message("slack", "T1", "C1", f"c{c['id']}", "u9", "Mallory", c["text"], T0 + 10 + c["id"])
                  for c in CORPUS], embed=True)
    echo = ScriptedLLM([lambda p: " ".join(p.split())] * 1000, name="echo")
    model_settings = Settings.model_validate({"llm": {"api_key_env": "OPENAI_API_KEY"}, "answer": {"policy": "model"}})
    bots = [Bot(settings_, store=store, llm=None, load_models=False),
            Bot(model_settings, store=store, llm=echo, load_models=False)]
    yield bots, echo
    for b in bots:
        b.close()


FOREIGN = ("OTHERWS", "HRLEAK", "DMLEAK", "OTHERSERVER")


def test_answer_path_never_leaks_other_scopes_or_secrets(two_workspaces, caplog):
    bots, echo = two_workspaces
    caplog.set_level(logging.DEBUG)
    for c in ANSWER_LINES + WRITER_LINES:
        question = c["text"].removeprefix("@chorus ").strip()
        for bot in bots:
            for reply in (bot.ask(KEY, question), run_text(Actions(bot), Invoker(KEY, "u9", "Mallory"), question),
                          bot.whosaid(KEY, question), bot.timeline(KEY, question)):
                assert not any(f in reply.text for f in FOREIGN), (question, reply.text)
                assert not any(s in reply.text for s in SECRETS.values()), (question, reply.text)
                assert all((c2.platform, c2.workspace, c2.channel) == ("slack", "T1", "C1") for c2 in reply.citations)
    assert echo.calls, "the echo model was never asked"
    for call in echo.calls:  # what a fully obedient model was shown
        assert not any(f in call.prompt for f in FOREIGN) and not any(s in call.prompt for s in SECRETS.values())
    assert not any(s in caplog.text for s in SECRETS.values())
    raw = (Path(bots[0].store.path)).read_bytes() + Path(bots[0].store.path + "-wal").read_bytes()
    assert not any(s.encode() in raw for s in SECRETS.values())  # never written to the store either


def test_questions_with_nul_and_lone_surrogates_get_answers_with_the_real_embedder(tmp_path, embedder):
    store = Store(tmp_path / "real.db", embedder=embedder)
    bot = Bot(Settings(), store=store, llm=None, load_models=False)
    try:
        store.ingest([Message("slack", "T1", "C1", "1", "u1", "Alice", "the launch code is blue heron", T0)])
        acts = Actions(bot)
        for question in ("launch code \ud83d?", "launch\x00 code", "\udfff", "launch code \ud83d\ude00"):
            for verb in ("ask ", "whosaid ", "timeline ", "profile "):
                reply = guarded("q", partial(run_text, acts, Invoker(KEY, "u1", "Alice"), verb + question))
                assert not reply.text.startswith("Sorry"), (verb, question, reply.text)
    finally:
        bot.close()
