"""Scope isolation: nothing asked, searched or exported in one scope ever comes from another.

Histories are generated over two Slack workspaces that both have a channel ``C1`` and a DM
``D1``, another Slack channel, a Discord guild channel and a Discord DM, all sharing the same
user ids, display names and near-identical sentences. Every message carries a nonce word
(``nz<scope>q<n>``) unless it is an exact copy, so a leak shows up in any text, including what a
model was shown. For each generated history and question, every read path (search in each
mode, phrase lookup, by-author lookup, records search, ``Bot.ask`` with no model and with a
model that repeats everything it was shown, whosaid, profile, timeline, export) must return
only items of the asking scope. Linked scopes see each other only when the config says so.
"""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.command_table import run_text
from bot.config import Settings
from memory import privacy
from memory.llm.fake import ScriptedLLM
from memory.models import Message, ScopeKey
from memory.records import Records
from memory.search import Searcher
from memory.store import Store
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import HashEmbedder
from tests._properties import prop
from tests._writer_child import respond

SCOPES = [  # (platform, workspace, channel, is_dm)
    ("slack", "T1", "C1", False),
    ("slack", "T2", "C1", False),  # the same channel id in another workspace
    ("slack", "T1", "C2", False),
    ("slack", "T1", "D1", True),
    ("slack", "T2", "D1", True),  # the same DM id in another workspace
    ("discord", "G1", "C1", False),  # the same channel id on another platform
    ("discord", "@me", "D9", True),
]
USERS = [("u1", "Alice"), ("u2", "Bob"), ("u3", "Carol")]
BASES = [
    "the launch code is blue heron",
    "the launch code is blue herring",
    "my salary is 5000 and I live on Elm street",
    "my salary is 5100 and I live on Elm street",
    "we decided the offsite is in Lisbon on Friday",
    "we decided the offsite is in Lisbon on Saturday",
    "Bob said the password is hunter2",
]
NONCE = re.compile(r"\bnz(\d)q(\d+)\b")
T0 = 1_717_000_000.0

message_spec = st.tuples(st.integers(0, len(SCOPES) - 1), st.integers(0, len(USERS) - 1),
                         st.integers(0, len(BASES) - 1), st.booleans())
history = st.lists(message_spec, min_size=4, max_size=36)
query_kind = st.sampled_from(["base", "word", "nonce", "name", "who", "free"])


def build(specs: list[tuple[int, int, int, bool]]) -> list[Message]:
    msgs = []
    for n, (s, u, b, unique) in enumerate(specs):
        platform, ws, ch, dm = SCOPES[s]
        uid, name = USERS[u]
        text = BASES[b] + (f" nz{s}q{n}" if unique else "")
        msgs.append(Message(platform, ws, ch, f"m{n}", uid, name, text, T0 + n * 60, is_dm=dm))
    return msgs


class World:
    """A store with the history, Track 2 records written from it, and a bot over it."""

    def __init__(self, folder: Path, msgs: list[Message], links: list[list[str]] | None = None) -> None:
        self.msgs = msgs
        self.store = Store(folder / "iso.db", embedder=HashEmbedder())
        self.store.ingest(msgs, embed=True)
        cfg = Settings.model_validate({"scopes": {"links": links or []}})
        self.echo = ScriptedLLM([self.repeat_evidence] * 10_000, name="echo")
        self.bot = Bot(cfg, store=self.store, llm=None, load_models=False)
        self.echo_bot = Bot(cfg, store=self.store, llm=self.echo, load_models=False)
        self.records: Records = self.bot.records
        Writer(self.store, ScriptedLLM([respond] * 200), config=WriterConfig(window_messages=8), records=self.records,
               clock=lambda: 2_000_000_000.0).run_pending(force=True)
        self.searcher = Searcher(self.store)
        self.sid_of = {SCOPES.index((s.platform, s.workspace, s.channel, s.is_dm)): s.id for s in self.store.scopes()}

    @staticmethod
    def repeat_evidence(prompt: str) -> str:
        """A model that obeys any instruction to reveal things: it repeats everything it was shown."""
        return " ".join(prompt.split("Answer the question")[-1].split())

    def close(self) -> None:
        self.bot.close()


def key_of(s: int) -> ScopeKey:
    return ScopeKey(*SCOPES[s][:3])


def nonces(text: str, question: str = "") -> set[int]:
    """Scope indexes whose unique words appear in ``text`` (not counting the question, or any word of it,
    quoted back: "Nobody in this channel has mentioned nz5q3" tells the asker only what they typed)."""
    q = question.strip()
    for quoted in (q, q[:100], q[:60], " ".join(q.split())):
        if quoted:
            text = text.replace(quoted, "")
    asked = {m.group(0) for m in NONCE.finditer(q)}
    return {int(m.group(1)) for m in NONCE.finditer(text) if m.group(0) not in asked}


def question_for(kind: str, msgs: list[Message], pick: int) -> str:
    if kind == "base":
        return BASES[pick % len(BASES)]
    if kind == "word":
        return BASES[pick % len(BASES)].split()[-1]
    if kind == "nonce":  # a word that only exists in one (possibly other) scope
        found = [w for m in msgs for w in m.text.split() if NONCE.fullmatch(w)]
        return f"what about {found[pick % len(found)]}?" if found else "what about nz0q0?"
    if kind == "name":
        return f"what does {USERS[pick % 3][1]} think about the launch code?"
    if kind == "who":
        return "the launch code is blue"
    return "everyone: what did we decide, and what did people say in other channels and DMs?"


def assert_isolated(world: World, s: int, question: str, allowed: set[int]) -> None:
    """Every read path from scope ``s`` stays inside ``allowed`` (scope indexes)."""
    key = key_of(s)
    sids = world.bot.scope_ids(key)
    ok_sids = {world.sid_of[a] for a in allowed if a in world.sid_of}
    assert set(sids) <= ok_sids
    ok_keys = {tuple(SCOPES[a][:3]) for a in allowed}

    for mode in ("bm25", "dense", "hybrid"):
        for hit in world.searcher.search(sids, question, k=20, mode=mode):
            assert hit.message.scope_id in ok_sids, (mode, question, hit.message)
    for m in world.searcher.phrase(sids, question) + world.searcher.phrase(sids, "launch code"):
        assert m.scope_id in ok_sids
    for uid, _ in USERS:
        for m in world.searcher.by_author(sids, uid, question, k=5):
            assert m.scope_id in ok_sids and m.author_id == uid
    for rec, _ in world.records.search(sids, question, limit=20, heads_only=False):
        assert rec.scope_id in ok_sids

    before = len(world.echo.calls)
    for bot in (world.bot, world.echo_bot):
        reply = bot.ask(key, question)
        for c in reply.citations:
            assert (c.platform, c.workspace, c.channel) in ok_keys, (question, c)
        assert nonces(reply.text, question) <= allowed, (question, reply.text)
    for call in world.echo.calls[before:]:  # what the model was shown: the whole evidence pack
        assert nonces(call.prompt, question) <= allowed, (question, call.prompt)
    reply = world.bot.whosaid(key, question)
    assert all((c.platform, c.workspace, c.channel) in ok_keys for c in reply.citations)
    assert nonces(reply.text, question) <= allowed
    for _, name in USERS:
        reply = world.bot.profile(key, name)
        assert all((c.platform, c.workspace, c.channel) in ok_keys for c in reply.citations)
        assert nonces(reply.text) <= allowed
    reply = world.bot.timeline(key, question)
    assert all((c.platform, c.workspace, c.channel) in ok_keys for c in reply.citations)
    assert nonces(reply.text, question) <= allowed


def export_allowed(platform: str, workspace: str) -> set[int]:
    """Scopes an export from (platform, workspace) may draw on: that workspace, and the user's own DMs."""
    return {i for i, (p, w, _, dm) in enumerate(SCOPES) if p == platform and (w == workspace or dm)}


def assert_export_isolated(world: World, s: int, uid: str) -> None:
    platform, ws = SCOPES[s][:2]
    data = privacy.export_user(world.store, platform, ws, uid)
    allowed = export_allowed(platform, ws)
    ok_keys = {f"{p}:{w}:{c}" for i, (p, w, c, _) in enumerate(SCOPES) if i in allowed}
    for m in data["messages"]:
        assert m["scope"] in ok_keys
        stored = world.store.find(ScopeKey(*m["scope"].split(":")), m["msg_id"])
        assert stored is not None and stored.author_id == uid  # only the requester's own messages
    assert all(r["scope"] in ok_keys for r in data["records"])
    assert not any(k in r for r in data["records"] for k in ("scope_id", "chain_id", "writer_run_id"))
    assert nonces(json.dumps(data)) <= allowed


# ---------------------------------------------------------------------- properties
@prop(150)
@given(history, st.lists(st.tuples(st.integers(0, len(SCOPES) - 1), query_kind, st.integers(0, 50)),
                         min_size=1, max_size=4))
def test_no_read_path_crosses_scopes(specs, questions):
    with tempfile.TemporaryDirectory() as tmp:
        msgs = build(specs)
        world = World(Path(tmp), msgs)
        try:
            for s, kind, pick in questions:
                assert_isolated(world, s, question_for(kind, msgs, pick), {s})
                assert_export_isolated(world, s, USERS[pick % 3][0])
        finally:
            world.close()


@prop(40)
@given(history, st.integers(0, 50))
def test_linked_scopes_see_each_other_and_nothing_else(specs, pick):
    links = [["slack:T1:C1", "slack:T1:C2"]]
    with tempfile.TemporaryDirectory() as tmp:
        msgs = build(specs)
        world = World(Path(tmp), msgs, links=links)
        try:
            for s in range(len(SCOPES)):
                allowed = {0, 2} if s in (0, 2) else {s}
                assert_isolated(world, s, question_for("base", msgs, pick), allowed)
        finally:
            world.close()


# ---------------------------------------------------------------------- fixed cases
FIXED = [
    (0, 0, 0, True), (1, 0, 0, True), (5, 0, 0, True),  # Alice says the same thing in three scopes
    (3, 1, 6, True), (4, 1, 6, True), (6, 1, 6, True),  # Bob's DMs in two workspaces and on Discord
    (1, 2, 2, True), (1, 2, 4, True),  # Carol in the other workspace only
    (2, 0, 4, True), (0, 1, 5, False), (1, 1, 5, False),  # exact copies, no nonce
]


@pytest.fixture
def fixed_world(tmp_path):
    world = World(tmp_path, build(FIXED))
    yield world
    world.close()


def test_fixed_same_channel_id_in_two_workspaces(fixed_world):
    w = fixed_world
    reply = w.bot.whosaid(key_of(0), "the launch code is blue heron")
    assert [c.workspace for c in reply.citations] == ["T1"] and nonces(reply.text) == {0}
    assert nonces(w.bot.ask(key_of(0), "launch code").text) <= {0}
    # Carol spoke only in T2: in T1 she is unknown, even though the channel id is the same.
    assert "don't know anyone" in w.bot.profile(key_of(0), "Carol").text
    assert w.bot.profile(key_of(1), "Carol").data["records"]
    for s in range(len(SCOPES)):
        assert_isolated(w, s, "the launch code is blue heron", {s})


def test_fixed_dms_stay_private(fixed_world):
    w = fixed_world
    for s in range(len(SCOPES)):
        for q in ("what is the password?", "Bob said the password is hunter2", "show me Bob's DMs"):
            assert_isolated(w, s, q, {s})
    assert nonces(w.echo_bot.ask(key_of(0), "Bob said the password is hunter2").text) <= {0}
    # Bob's export from T1 holds his T1 DM (his own data) but nothing of T2, Discord or other people.
    data = privacy.export_user(w.store, "slack", "T1", "u2")
    assert {m["scope"] for m in data["messages"]} <= {"slack:T1:C1", "slack:T1:C2", "slack:T1:D1", "slack:T2:D1"}
    assert all(w.store.find(ScopeKey(*m["scope"].split(":")), m["msg_id"]).author_id == "u2"
               for m in data["messages"])
    assert not any(m["scope"].startswith("discord") for m in data["messages"])


def test_fixed_question_naming_another_scope_gets_nothing_from_it(fixed_world):
    w = fixed_world
    for q in ("what did Carol say in slack:T2:C1?", "nz1q6 nz1q7", "show everything from workspace T2",
              "scope_tag:s2 OR scope_tag:s3", 'text: "launch" OR scope_tag:(s1 OR s2 OR s3 OR s4 OR s5)'):
        assert_isolated(w, 0, q, {0})
        assert_isolated(w, 5, q, {5})


def test_fixed_links_are_only_what_the_config_says(tmp_path):
    msgs = build(FIXED + [(2, 2, 2, True)])
    (tmp_path / "a").mkdir()
    unlinked = World(tmp_path / "a", msgs)
    try:
        assert nonces(unlinked.bot.whosaid(key_of(0), "my salary is").text) == set()
        assert nonces(unlinked.bot.whosaid(key_of(2), "my salary is").text) == {2}
    finally:
        unlinked.close()
    (tmp_path / "b").mkdir()
    linked = World(tmp_path / "b", msgs, links=[["slack:T1:C1", "slack:T1:C2"]])
    try:
        assert nonces(linked.bot.whosaid(key_of(0), "my salary is").text) == {2}  # C2 is linked to C1
        assert nonces(linked.bot.whosaid(key_of(1), "my salary is").text) == {1}  # T2:C1 is not
        assert nonces(linked.bot.whosaid(key_of(3), "my salary is").text) == set()
        assert_isolated(linked, 0, "my salary", {0, 2})
        assert_isolated(linked, 1, "my salary", {1})
    finally:
        linked.close()


def test_commands_through_actions_stay_in_their_scope(fixed_world):
    """The adapters' entry point (command_table.run_text) over every command that reads memory."""
    w = fixed_world
    acts = Actions(w.bot)
    for s in range(len(SCOPES)):
        platform, ws, ch, dm = SCOPES[s]
        inv = Invoker(ScopeKey(platform, ws, ch), "u2", "Bob", is_dm=dm)
        for text in ("ask what is the password?", "whosaid the launch code", "profile Alice", "timeline launch code",
                     "status", "what did everyone say?"):
            reply = run_text(acts, inv, text)
            assert nonces(reply.text) <= {s}, (s, text, reply.text)
            assert all((c.platform, c.workspace, c.channel) == (platform, ws, ch) for c in reply.citations)
        exported = run_text(acts, inv, "export")
        assert exported.ephemeral and exported.attachment is not None
        assert nonces(exported.attachment.decode()) <= export_allowed(platform, ws)


# ---------------------------------------------------------------------- differential: nothing leaks by shape
# Two stores hold the same visible channel and differ only in channels the asker cannot see (other
# channels, DMs, another workspace, another platform, all with the same user ids). Every read path
# the asker can reach must answer byte for byte the same: a reply's wording, kind or order that moved
# with hidden content would tell the asker something about it ("I don't know anyone called Zelda" vs
# "this channel's memory doesn't hold that").
VISIBLE = 0  # slack:T1:C1
HIDDEN = [1, 2, 3, 4, 5, 6]
NAMES = ["Alice", "Bob", "Carol", "Zelda", "Priya", "Omar"]
WORDS = ["falcon", "gryphon", "budget", "offsite", "lisbon", "heron", "salary", "picnic", "deadline", "contract",
         "leaving", "quiet", "keys", "dinner", "May", "Friday", "2 million", "5000"]
FILLER = ["the", "is", "for", "we", "in", "on", "said", "about", "keep", "it", "project", "plan"]
diff_text = st.lists(st.sampled_from(WORDS + NAMES + FILLER), min_size=1, max_size=9).map(" ".join)
diff_msg = st.tuples(st.integers(0, len(NAMES) - 1), diff_text)
hidden_msg = st.tuples(st.sampled_from(HIDDEN), diff_msg, st.integers(0, 14))  # (scope, message, position)
diff_question = st.tuples(st.sampled_from(["ask_who", "ask_what", "ask_free", "mention", "whosaid", "profile",
                                           "timeline", "status", "bad"]),
                          st.sampled_from(NAMES), st.sampled_from(WORDS), diff_text)


def diff_messages(visible: list, hidden: list, *, linked: bool = False) -> list[Message]:
    """The visible channel's messages (same ids and times in every store) with hidden ones woven in.

    ``linked``: every third visible message is in slack:T1:C2, which the config links to C1, and no hidden
    message is there.
    """
    out: list[Message] = []
    hidden = [(1 if linked and s == 2 else s, m, pos) for s, m, pos in hidden]
    for n, (u, text) in enumerate(visible):
        for h, (s, (hu, htext), pos) in enumerate(hidden):
            if pos == n:
                platform, ws, ch, dm = SCOPES[s]
                out.append(Message(platform, ws, ch, f"h{h}", f"u{hu}", NAMES[hu], htext, T0 + n * 60 - 30 + h * 0.01,
                                   is_dm=dm))
        platform, ws, ch, dm = SCOPES[2 if linked and n % 3 == 2 else VISIBLE]
        out.append(Message(platform, ws, ch, f"v{n}", f"u{u}", NAMES[u], text, T0 + n * 60, is_dm=dm))
    for h, (s, (hu, htext), pos) in enumerate(hidden):
        if pos >= len(visible):
            platform, ws, ch, dm = SCOPES[s]
            out.append(Message(platform, ws, ch, f"h{h}", f"u{hu}", NAMES[hu], htext, T0 + pos * 60 + h * 0.01,
                               is_dm=dm))
    return out


def command_for(kind: str, name: str, word: str, text: str) -> str:
    return {"ask_who": f"ask what did {name} say?", "ask_what": f"ask what is {word.capitalize()}?",
            "ask_free": f"ask {name} {text}?", "mention": f"what did {name} say about {word}?",
            "whosaid": f"whosaid {text}", "profile": f"profile {name}", "timeline": f"timeline {word}",
            "status": "status", "bad": f"frobnicate {word}"}[kind]


def observed(world: World, command: str) -> list:
    """Everything the asker in the visible channel gets back for ``command``: the text, the citations as the
    platform shows them and the whole reply data. Only a citation's store row id is left out: it stays on the
    server, to find the message again."""
    platform, ws, ch, dm = SCOPES[VISIBLE]
    key = ScopeKey(platform, ws, ch)
    reply = run_text(Actions(world.bot), Invoker(key, "u0", NAMES[0], is_dm=dm), command)
    cites = [(c.n, c.platform, c.workspace, c.channel, c.msg_id, c.author, c.ts, c.excerpt) for c in reply.citations]
    out = [reply.text, cites, reply.ephemeral, json.dumps(reply.data, sort_keys=True, default=str)]
    if command.startswith("ask "):
        direct = world.bot.ask(key, command[4:])
        out += [direct.text, json.dumps(direct.data, sort_keys=True, default=str)]
    return out


@prop(60)
@given(st.lists(diff_msg, min_size=2, max_size=12), st.lists(hidden_msg, max_size=14),
       st.lists(hidden_msg, max_size=14), st.lists(diff_question, min_size=1, max_size=5))
def test_hidden_scopes_change_nothing_the_asker_sees(visible, hidden_a, hidden_b, questions):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        a = World(Path(tmp) / "a", diff_messages(visible, hidden_a))
        b = World(Path(tmp) / "b", diff_messages(visible, hidden_b))
        try:
            for kind, name, word, text in questions:
                command = command_for(kind, name, word, text)
                assert observed(a, command) == observed(b, command), command
        finally:
            a.close()
            b.close()


@prop(25)
@given(st.lists(diff_msg, min_size=3, max_size=12), st.lists(hidden_msg, max_size=14),
       st.lists(hidden_msg, max_size=14), st.lists(diff_question, min_size=1, max_size=4))
def test_hidden_scopes_change_nothing_across_linked_scopes(visible, hidden_a, hidden_b, questions):
    """With C1 and C2 linked, the asker in C1 sees both; what the other scopes hold still changes nothing."""
    links = [["slack:T1:C1", "slack:T1:C2"]]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        a = World(Path(tmp) / "a", diff_messages(visible, hidden_a, linked=True), links=links)
        b = World(Path(tmp) / "b", diff_messages(visible, hidden_b, linked=True), links=links)
        try:
            for kind, name, word, text in questions:
                command = command_for(kind, name, word, text)
                assert observed(a, command) == observed(b, command), command
        finally:
            a.close()
            b.close()


def test_issue_22_probe_names_and_words_of_a_private_channel(tmp_path):
    """The reported probe: unknown names and words get the same answer whether or not #secret holds them."""
    public = [(0, "lunch is at noon on the terrace"), (1, "the printer on floor two is fixed")]
    secret = [(3, (2, "Carol is leaving the company in May, keep it quiet"), 0),
              (3, (2, "the budget for Project Falcon is 2 million"), 1)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_secret = World(tmp_path / "a", diff_messages(public, secret))
    without = World(tmp_path / "b", diff_messages(public, []))
    try:
        for command in ("ask what did Carol say?", "ask what did Zelda say?", "ask what is Falcon?",
                        "ask what is Gryphon?", "profile Carol", "whosaid Falcon", "timeline Falcon", "status"):
            assert observed(with_secret, command) == observed(without, command), command
    finally:
        with_secret.close()
        without.close()
