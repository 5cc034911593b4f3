"""Forget, export, opt-outs and pause against a real store with vectors and Track 2 records.

After "forget me" every table is read back (and the raw database and WAL bytes are
searched) for the words only that user wrote: nothing may remain anywhere.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.config import Settings
from memory import privacy
from memory.llm.fake import ScriptedLLM
from memory.models import Message, ScopeKey
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import ScriptedActs

TEAM, OTHER_TEAM = "T0TEAM", "T0OTHER"
ALICE, BOB = "U0ALICE", "U0BOB"
# Words only Alice ever writes (as typed, and as the FTS porter stemmer stores them).
ALICE_WORDS = ["quokka", "zanzibar", "bergamot", "marmalad", "thunderstorm"]
BOB_WORDS = ["bassoon", "concert"]
T0 = 1_717_000_000.0


def m(mid: str, user: str, text: str, channel: str = "C0GENERAL", *, team: str = TEAM, dm: bool = False,
      ts: float | None = None) -> Message:
    name = {"U0ALICE": "Alice", "U0BOB": "Bob"}[user]
    return Message("slack", team, channel, mid, user, name, text, ts if ts is not None else T0 + float(mid) * 60,
                   is_dm=dm, channel_name="" if dm else channel.lower())


def actions_json(*items: dict) -> str:
    return json.dumps({"actions": list(items)})


def add(owner: str, source: str, content: str, layer: str = "per_speaker_core", utype: str = "fact") -> dict:
    return {"op": "ADD", "owner": owner, "source": source, "layer": layer, "utype": utype, "content": content}


@pytest.fixture
def world(tmp_path, embedder):
    """Two people in two channels, a DM and another workspace, with Track 2 records written from it."""
    store = Store(tmp_path / "chorus.db", embedder=embedder)
    labels = ScriptedActs({"We agreed: the winter concert is on the first Friday of December": ("decision", "GROUP",
                                                                                                  None)})
    bot = Bot(Settings(), store=store, load_models=False, analysis_models=(labels, labels))
    records = Records(store)
    attach(store, records)
    acts = Actions(bot)
    for msg in [
        m("1", ALICE, "I adopted a quokka named Zanzibar last spring"),
        m("2", BOB, "Bob is learning the bassoon for the winter concert"),
        m("3", ALICE, "My marmalade recipe uses bergamot oranges"),
        m("4", BOB, "We agreed: the winter concert is on the first Friday of December"),
        m("5", ALICE, "the quokka hides during every thunderstorm", channel="C0RANDOM"),
        m("6", ALICE, "remind me about the Zanzibar vet appointment", channel="D0ALICE", dm=True),
        m("7", ALICE, "xylophone lessons start on Monday", team=OTHER_TEAM),
    ]:
        assert acts.remember(msg)
    store.embed_pending()  # the bot embeds in the background; a busy machine must not make this racy
    bot.analyse_pending(limit=None)  # the analysis pass files Bob's decision as the group's state
    writer = Writer(store, ScriptedLLM([
        actions_json(add("Alice", "Alice", "Alice adopted a quokka named Zanzibar"),
                     add("Bob", "Bob", "Bob is learning the bassoon for the winter concert"),
                     add("Alice", "Alice", "Alice's marmalade recipe uses bergamot oranges"),
                     add("GROUP", "Bob", "We agreed: the winter concert is on the first Friday of December",
                         "group_interaction", "decision")),
        actions_json(add("Alice", "Alice", "The quokka hides during every thunderstorm")),
        actions_json({"op": "NOOP"}), actions_json({"op": "NOOP"}),
    ]), config=WriterConfig(), records=records, clock=lambda: T0 + 10 * 86400)
    results = writer.run_pending(force=True)
    # Four person records from the writer; its GROUP proposal repeats the decision the state already holds.
    assert sum(r.accepted for r in results) == 4, results
    assert [r.content for r in records.heads([store.scope_id(ScopeKey("slack", TEAM, "C0GENERAL"))],
                                             layers=["group_interaction"])] == [
        "We agreed: the winter concert is on the first Friday of December"]
    yield store, bot, acts, tmp_path / "chorus.db"
    store.close()


def table_names(store: Store) -> list[str]:
    with store.read() as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def rows_containing(store: Store, words: list[str]) -> list[tuple[str, str]]:
    """Every (table, word) where a text or blob cell of any table contains one of the words."""
    found = []
    with store.read() as conn:
        for table in table_names(store):
            for row in conn.execute(f"SELECT * FROM {table}"):
                for cell in row:
                    if isinstance(cell, str):
                        hay = cell.lower().encode()
                    elif isinstance(cell, (bytes, memoryview)):
                        hay = bytes(cell).lower()
                    else:
                        continue
                    found += [(table, w) for w in words if w.encode() in hay]
    return found


def test_forget_me_leaves_nothing_of_the_user_in_any_table_or_file(world):
    store, bot, acts, path = world
    assert rows_containing(store, ALICE_WORDS)  # the words are really there before
    with store.read() as conn:
        alice_ids = [r[0] for r in conn.execute("SELECT m.id FROM messages m JOIN scopes s ON s.id = m.scope_id "
                                                "WHERE m.author_id = ? AND s.workspace != ?", (ALICE, OTHER_TEAM))]
    calls: list[tuple[int, str]] = []
    store.forget_person_hooks.append(lambda conn, sid, pid: calls.append((sid, pid)))

    report = privacy.forget_user(store, "slack", TEAM, ALICE)

    assert report.messages == 4 and report.scopes == 3  # general, random and the DM; not the other workspace
    assert sorted(calls) == sorted((sid, ALICE) for sid in report.scope_ids)
    assert rows_containing(store, ALICE_WORDS) == []
    with store.read() as conn:
        fts_tables = [n for n in table_names(store) if n.startswith(("messages_fts_s", "records_fts_s"))
                      and n.count("_") == 2]
        assert fts_tables
        for word in ALICE_WORDS:
            for table in fts_tables:
                assert conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (word,)).fetchall() == []
        marks = ",".join("?" * len(alice_ids))
        assert conn.execute(f"SELECT count(*) FROM message_vec WHERE rowid IN ({marks})", alice_ids).fetchone()[0] == 0
        assert conn.execute(f"SELECT count(*) FROM messages WHERE id IN ({marks}) AND (text != '' OR author_id != '' "
                            "OR author_name != '' OR deleted = 0)", alice_ids).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM people WHERE person_id = ? AND scope_id IN (SELECT id FROM scopes "
                            "WHERE workspace = ? OR is_dm = 1)", (ALICE, TEAM)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM records WHERE source = ? AND (content != '' OR status = 'active')",
                            (ALICE,)).fetchone()[0] == 0
        n_vec = conn.execute("SELECT count(*) FROM message_vec").fetchone()[0]
        live = conn.execute("SELECT count(*) FROM messages WHERE deleted = 0").fetchone()[0]
        assert n_vec == live == 3  # Bob's two messages and Alice's message in the other workspace
        runs = conn.execute("SELECT count(*) FROM writer_runs").fetchone()[0]
        assert runs >= 2  # the audit log is kept, only its quoted text is gone
    # Nothing lingers in the file either (freed pages, old FTS segments, the WAL).
    raw = path.read_bytes().lower() + (Path(str(path) + "-wal").read_bytes().lower()
                                       if Path(str(path) + "-wal").exists() else b"")
    assert [w for w in ALICE_WORDS if w.encode() in raw] == []
    # Everyone else's memory is intact.
    assert {w for _, w in rows_containing(store, BOB_WORDS)} == set(BOB_WORDS)
    key = ScopeKey("slack", TEAM, "C0GENERAL")
    assert bot.whosaid(key, "learning the bassoon").citations
    assert bot.whosaid(key, "quokka named Zanzibar").citations == []
    assert bot.whosaid(ScopeKey("slack", OTHER_TEAM, "C0GENERAL"), "xylophone lessons").citations
    # A re-delivered copy of a forgotten message (a Slack retry, a backfill) stays out.
    assert store.ingest_one(m("1", ALICE, "I adopted a quokka named Zanzibar last spring")).inserted == 0


def test_forget_one_message(world):
    store, bot, acts, _ = world
    inv = Invoker(ScopeKey("slack", TEAM, "C0GENERAL"), ALICE, "Alice")
    assert "only make me forget your own" in acts.forget_message(Invoker(inv.key, BOB, "Bob"), "", "3").text
    assert "Forgotten" in acts.forget_message(inv, "", "3").text
    assert rows_containing(store, ["bergamot"]) == []
    assert rows_containing(store, ["quokka"])  # her other messages stay
    assert "don't remember" in acts.forget_message(inv, "", "3").text


def test_export_contains_only_that_users_data(world):
    store, bot, acts, _ = world
    data = privacy.export_user(store, "slack", TEAM, ALICE)
    assert data["user_id"] == ALICE and data["format"] == "chorus-export/1"
    assert sorted(x["msg_id"] for x in data["messages"]) == ["1", "3", "5", "6"]
    assert {r["source"] for r in data["records"]} == {ALICE}
    assert len(data["records"]) == 3
    assert {r["display_name"] for r in data["roster"]} == {"Alice"}
    dumped = json.dumps(data).lower()
    assert not [w for w in [*BOB_WORDS, "xylophone"] if w in dumped]  # not Bob's, not another workspace's
    reply = acts.export_me(Invoker(ScopeKey("slack", TEAM, "C0GENERAL"), ALICE, "Alice"))
    assert reply.ephemeral and reply.attachment_name.endswith(".json")
    assert json.loads(reply.attachment)["messages"] == data["messages"]


def test_user_opt_out_stops_ingestion(world):
    store, bot, acts, _ = world
    before = store.count_messages()
    privacy.opt_out_user(store, "slack", TEAM, ALICE)
    assert not acts.remember(m("20", ALICE, "this must not be kept"))
    assert not acts.remember(m("21", ALICE, "nor this DM", channel="D0ALICE", dm=True))
    assert acts.remember(m("22", BOB, "Bob is still remembered"))
    assert acts.remember(m("23", ALICE, "another workspace is separate", team=OTHER_TEAM))
    assert store.count_messages() == before + 2
    privacy.opt_in_user(store, "slack", TEAM, ALICE)
    assert acts.remember(m("24", ALICE, "remembered again"))


def test_pause_and_channel_opt_out(world):
    store, bot, acts, _ = world
    admin = Invoker(ScopeKey("slack", TEAM, "C0GENERAL"), BOB, "Bob", is_admin=True)
    plain = Invoker(admin.key, ALICE, "Alice")
    assert "Only workspace admins" in acts.pause(plain).text
    acts.pause(admin)
    assert not acts.remember(m("30", BOB, "paused"))
    assert "paused" in acts.status(plain).text.lower()
    acts.resume(admin)
    acts.channel_opt(admin, False)
    assert not acts.remember(m("31", BOB, "opted-out channel"))
    assert acts.remember(m("32", BOB, "another channel", channel="C0RANDOM"))
    acts.channel_opt(admin, True)
    assert acts.remember(m("33", BOB, "opted back in"))


def test_default_opt_out_needs_an_admin_to_opt_channels_in(tmp_path):
    store = Store(tmp_path / "chorus.db")
    try:
        acts = Actions(Bot(Settings(), store=store, load_models=False), default_opt_in=False)
        assert not acts.remember(m("1", ALICE, "new channel, not opted in"))
        assert acts.remember(m("2", ALICE, "a DM is the user's own choice", channel="D0ALICE", dm=True))
        acts.channel_opt(Invoker(ScopeKey("slack", TEAM, "C0GENERAL"), BOB, "Bob", is_admin=True), True)
        assert acts.remember(m("3", ALICE, "now remembered"))
        assert store.count_messages() == 2
    finally:
        store.close()


def test_forget_me_confirmation_code_is_per_user_and_single_use(world):
    store, bot, acts, _ = world
    inv = Invoker(ScopeKey("slack", TEAM, "C0GENERAL"), ALICE, "Alice")
    first = acts.forget_me(inv)
    code = first.data["confirm_code"]
    assert first.data["messages"] == 4 and store.count_messages() == 7
    assert "did not match" in acts.forget_me(Invoker(inv.key, BOB, "Bob"), code).text  # Bob cannot use Alice's code
    assert store.count_messages() == 7
    done = acts.forget_me(inv, code)
    assert done.data["forgotten"] == 4 and store.count_messages() == 3
    assert "confirm" in acts.forget_me(inv, code).text  # used up: asks again


def test_cli_forget_and_export(world, tmp_path, capsys):
    from bot.cli import COMMANDS, build_parser

    store, bot, acts, path = world
    parser = build_parser()
    settings = Settings.model_validate({"store": {"path": str(path)}})
    out = tmp_path / "alice.json"
    base = ["--platform", "slack", "--workspace", TEAM, "--user", ALICE]
    assert COMMANDS["export"](parser.parse_args(["export", *base, "--out", str(out)]), settings) == 0
    assert sorted(x["msg_id"] for x in json.loads(out.read_text())["messages"]) == ["1", "3", "5", "6"]
    with pytest.raises(Exception, match="--yes"):  # no terminal to confirm on, and no --yes
        COMMANDS["forget"](parser.parse_args(["forget", *base]), settings)
    assert COMMANDS["forget"](parser.parse_args(["forget", *base, "--yes"]), settings) == 0
    assert "Forgot 4 message(s)" in capsys.readouterr().out
    assert rows_containing(store, ALICE_WORDS) == []
