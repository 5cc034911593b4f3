"""Catch-up digests: the window, what goes in, what never does, privacy, isolation and bad input."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.config import Settings
from memory import privacy
from memory.catchup import subscriptions
from memory.catchup.digest import CatchupConfig, build_digest
from memory.catchup.intent import catchup_request
from memory.catchup.members import Member
from memory.catchup.since import parse_duration, resolve_since, zone
from memory.errors import TimeExpressionError
from memory.models import Message, ScopeKey
from memory.records import GROUP, NewRecord
from tests._fakes import KeywordActs

T0 = 1_767_600_000.0  # Mon 5 Jan 2026 08:00 UTC
KEY = ScopeKey("console", "w", "general")


def m(i: int, author: str, text: str, *, ts: float | None = None, channel: str = "general",
      workspace: str = "w", **kw) -> Message:
    return Message("console", workspace, channel, str(i), author.casefold(), author, text,
                   T0 + i * 60 if ts is None else ts, **kw)


LABELS: dict[int, KeywordActs] = {}  # each bot's labeller, by id(bot)


def make_bot(cfg: dict, **kw) -> Bot:
    """A bot whose analysis labels acts by first words (tests/_fakes.py): these tests are about the digest."""
    labels = KeywordActs()
    b = Bot(Settings.model_validate(cfg), load_models=False, analysis_models=(labels, labels), **kw)
    LABELS[id(b)] = labels
    return b


@pytest.fixture
def bot(tmp_path):
    b = make_bot({"store": {"path": str(tmp_path / "c.db")}})
    yield b
    b.close()


def inv(user: str = "sam", *, admin: bool = False, key: ScopeKey = KEY) -> Invoker:
    return Invoker(key, user, user.capitalize(), is_admin=admin, channel_name=key.channel)


def chat(bot: Bot, *messages: Message) -> None:
    bot.store.ingest(list(messages), embed=False)
    bot.analyse_pending(limit=None)


def quoted(reply) -> set[str]:
    return {c.msg_id for c in reply.citations}


NOW = datetime(2026, 1, 7, 15, 30, tzinfo=UTC)  # a Wednesday


# ---------------------------------------------------------------------- since
@pytest.mark.parametrize(("text", "expected"), [
    ("3d", datetime(2026, 1, 4, 15, 30, tzinfo=UTC)),
    ("2h", datetime(2026, 1, 7, 13, 30, tzinfo=UTC)),
    ("1w", datetime(2025, 12, 31, 15, 30, tzinfo=UTC)),
    ("yesterday", datetime(2026, 1, 6, tzinfo=UTC)),
    ("since Monday", datetime(2026, 1, 5, tzinfo=UTC)),
    ("monday", datetime(2026, 1, 5, tzinfo=UTC)),
    ("2026-01-02", datetime(2026, 1, 2, tzinfo=UTC)),
    ("yesterday 9am", datetime(2026, 1, 6, 9, tzinfo=UTC)),
])
def test_since_resolves_against_the_asking_time(text, expected):
    assert resolve_since(text, NOW, zone("UTC")) == expected


def test_since_is_read_in_the_workspace_time_zone():
    berlin = zone("Europe/Berlin")
    assert resolve_since("yesterday", NOW, berlin).isoformat() == "2026-01-06T00:00:00+01:00"
    assert parse_duration("90 min").total_seconds() == 5400 and parse_duration("Monday") is None


@pytest.mark.parametrize("text", ["blorp", "the day the music died", "", "x" * 200])
def test_malformed_since_is_a_clear_error(text):
    with pytest.raises(TimeExpressionError, match="time|since when|characters"):
        resolve_since(text, NOW, zone("UTC"))


def test_a_since_in_the_future_is_refused():
    with pytest.raises(TimeExpressionError, match="in the future"):
        resolve_since("tomorrow", NOW, zone("UTC"))
    with pytest.raises(TimeExpressionError):
        zone("Mars/Olympus")


def test_catch_up_requests_are_recognised_and_carry_their_time():
    assert catchup_request("what did I miss?") == ""
    assert catchup_request("catch me up since Monday") == "Monday"
    assert catchup_request("what have I missed in the last 3 days?") == "last 3 days"
    assert catchup_request("where are we having dinner?") is None
    assert catchup_request("what did we decide about Friday?") is None


# ---------------------------------------------------------------------- what a digest holds
def test_digest_heads_each_line_by_its_act_and_leaves_chatter_out(bot):
    chat(bot,
         m(1, "Sam", "see you all next week"),
         m(2, "Ana", "We decided on Luigi's for the team dinner on Friday"),
         m(3, "Ben", "Sam can you bring the speakers?"),
         m(4, "Cy", "I'll book the table for eight"),
         m(5, "Ana", "New rule: no phones at the table"),
         m(6, "Ben", "Change of plans: the Friday dinner moved to Saturday instead"),
         m(7, "Cy", "Sam's playlist last time was great"),
         m(8, "Ben", "lol"))
    reply = Actions(bot).catchup(inv("sam"))
    text = reply.text
    assert reply.ephemeral and not reply.dm
    assert text.index("Changes:") < text.index("Rules:") < text.index("Who took on what:") \
        < text.index("Questions to you nobody answered:")
    assert "was: Ana: “We decided on Luigi's" in text and "→ now: Ben: “Change of plans" in text
    assert "Questions to you nobody answered:\n- Ben: “Sam can you bring the speakers?”" in text
    assert "I'll book the table" in text
    # Chatter that only names the member tells them nothing; the member's own message and "lol" are left out.
    assert quoted(reply) == {"2", "3", "4", "5", "6"}
    for n, c in enumerate(reply.citations, 1):  # every [n] names the message quoted before it
        assert f"“{c.excerpt[:20]}" in text.split(f"[{n}]")[0].rsplit("- ", 1)[-1] or c.excerpt[:20] in text
    assert reply.data["catchup"]["since"] == pytest.approx(T0 + 60)  # default: the asker's last message


def test_was_now_only_along_a_chain(bot):
    chat(bot,
         m(1, "Sam", "off on holiday"),
         m(2, "Ana", "We decided the quiz is on the 14th at 7"),
         m(3, "Ben", "We decided the raffle tickets are 2 quid"),
         m(4, "Ana", "Change of plans: quiz moved to the 21st"))
    lines = Actions(bot).catchup(inv("sam")).data["catchup"]["lines"]
    changes = [ln for ln in lines if ln["kind"] == "change"]
    assert changes == [{"kind": "change", "messages": ["4"], "was": ["2"], "origin": "state"}]
    assert {tuple(ln["messages"]) for ln in lines if ln["kind"] == "decision"} == {("3",)}


def test_a_change_linked_across_topics_is_shown_alone(tmp_path):
    """A wrong link must not tell a member that a plan changed: "was -> now" needs a shared topic and a value
    of one kind that differs, else the change is news on its own."""
    from tests._fakes import ScriptedActs

    van, sso = "van return: we decided it goes back on the 14th", "sso: the org enforces it from 1 March now"
    labels = ScriptedActs({van: ("decision", "GROUP", None), sso: ("change", "GROUP", ("changes", van))})
    b = Bot(Settings.model_validate({"store": {"path": str(tmp_path / "c.db")}}), load_models=False,
            analysis_models=(labels, labels))
    try:  # ScriptedActs names a topic by the first word: "van" and "sso" share nothing
        chat(b, m(1, "Sam", "off for a bit"), m(2, "Ana", van), m(3, "Ben", sso))
        lines = Actions(b).catchup(inv("sam")).data["catchup"]["lines"]
        assert [(ln["kind"], ln["was"]) for ln in lines if ln["messages"] == ["3"]] == [("change", [])]
    finally:
        b.close()


def test_a_bare_reaction_is_not_quoted_beside_a_plan(bot):
    labels = LABELS[id(bot)]
    labels.script["👍"] = ("chatter", None, ("confirms", "We decided drinks at the Bricklayers from 6"))
    chat(bot, m(1, "Sam", "off for a bit"),
         m(2, "Ana", "We decided drinks at the Bricklayers from 6"),
         m(3, "Ben", "👍"))
    reply = Actions(bot).catchup(inv("sam"))
    assert quoted(reply) == {"2"} and "👍" not in reply.text


def test_answered_questions_are_mentions_and_names_need_word_boundaries(bot):
    LABELS[id(bot)].script["@will the keys are under the mat"] = ("news", None, None)
    chat(bot,
         m(1, "Sam", "hi"),
         m(2, "Will", "Sam, are you coming on Friday?"),
         m(3, "Sam", "yes!", reply_to="2"),
         m(4, "Ana", "Samantha is coming too"),
         m(5, "Ana", "I will ask the landlord"),
         m(6, "Ana", "@will the keys are under the mat"))
    digest = build_digest(bot.store, bot.scope_ids(KEY), Member("sam", ["Sam"]), T0, T0 + 3600)
    assert digest.lines == []  # answered, so no open question; "Samantha" is not Sam
    will = build_digest(bot.store, bot.scope_ids(KEY), Member("will", ["Will"]), T0, T0 + 3600)
    named = {will.messages[ln.message_ids[0]].msg_id for ln in will.lines if ln.kind == "mention"}
    assert named == {"6"}  # it tells Will something; "I will" never names Will


def test_bot_traffic_and_other_bots_are_never_material(bot):
    chat(bot, m(1, "Sam", "hi"),
         m(2, "Ana", "@chorus what did we decide about Sam's party?", to_bot=True),
         m(3, "DiceBot", "We decided: Sam rolls a 6", is_bot=True),
         m(4, "Ana", "We decided the party is at Ana's on Saturday"))
    reply = Actions(bot).catchup(inv("sam"))
    assert quoted(reply) == {"4"}


def test_a_long_window_keeps_twelve_lines_and_says_how_many_more(bot):
    chat(bot, m(1, "Sam", "off for a while"),
         *[m(10 + i, "Ana", f"We decided item {i} goes in box {i}") for i in range(20)])
    actions = Actions(bot)
    short = actions.catchup(inv("sam"))
    assert len(short.data["catchup"]["lines"]) == 12 and "…and 8 more: `/catchup all`" in short.text
    everything = actions.catchup(inv("sam"), "all")
    assert len(everything.data["catchup"]["lines"]) == 20 and "more" not in everything.text


def test_records_a_writer_filed_are_state_too_with_their_chains(bot):
    """A capable writer may file GROUP records itself; the digest reads them like the analysis pass's."""
    chat(bot, m(1, "Sam", "bye for now"),
         m(2, "Ana", "Brunch on Sunday at eleven at the Copper Kettle", ts=T0 - 86400),
         m(3, "Ben", "Brunch at noon instead, same place"),
         m(4, "Ana", "We decided the red paint is final"))  # the analysis pass files this one itself
    sid = bot.store.scope_id(KEY)
    ids = {mm.msg_id: mm.id for mm in bot.store.recent(sid, 10)}

    def rec(content: str, mid: int, ts: float, updates: int | None = None) -> NewRecord:
        return NewRecord(sid, "group_interaction", "decision", GROUP, "ana", content, ts, None, None, 0.9,
                         [mid], {"grounding": 1.0}, updates=updates)
    with bot.store.write() as conn:
        old = bot.records.insert(conn, rec("Brunch on Sunday at eleven", ids["2"], T0 - 86400), run_id=None,
                                 model="test", vector=None)
        bot.records.insert(conn, rec("Brunch on Sunday at noon", ids["3"], T0 + 180, updates=old), run_id=None,
                           model="test", vector=None)
    reply = Actions(bot).catchup(inv("sam"))
    lines = reply.data["catchup"]["lines"]
    assert [(ln["kind"], ln["origin"], ln["messages"], ln["was"]) for ln in lines] == [
        ("decision", "state", ["3"], ["2"]), ("decision", "state", ["4"], [])]
    assert "was: Ana: “Brunch on Sunday at eleven" in reply.text and "now: Ben: “Brunch at noon" in reply.text
    assert quoted(reply) == {"2", "3", "4"}


def test_an_empty_channel_and_a_quiet_one(bot):
    actions = Actions(bot)
    assert "any memory of this channel" in actions.catchup(inv("sam")).text
    chat(bot, m(1, "Ana", "morning"), m(2, "Sam", "hi"))
    quiet = actions.catchup(inv("sam"))
    assert quiet.data["quiet"] and quiet.text.startswith("Nothing new for you in #general since")
    assert quiet.text.count("\n") == 0 and quiet.citations == []


def test_a_member_who_never_posted_gets_the_last_week(bot):
    now = T0 + 3600
    chat(bot, m(1, "Ana", "We decided the trip is to Porto", ts=now - 3 * 86400),
         m(2, "Ana", "Old news: we decided on Lisbon", ts=now - 10 * 86400))
    reply = bot_reply = Actions(bot).catchups.reply(KEY, "newbie", "Newbie", now=now)
    assert "you haven't posted here, so the last 7 days" in bot_reply.text
    assert quoted(reply) == {"1"}


def test_future_and_malformed_since_get_a_clear_private_answer(bot):
    chat(bot, m(1, "Ana", "hello"))
    actions = Actions(bot)
    for text, expect in (("tomorrow", "in the future"), ("next blue moon-ish", "can't read")):
        reply = actions.catchup(inv("sam"), "", text)
        assert reply.ephemeral and reply.text.startswith("Sorry:") and expect in reply.text
    assert "Unknown catch-up option" in actions.catchup(inv("sam"), "loudly").text


def test_channel_mode_is_for_admins_and_dm_mode_asks_for_a_dm(bot):
    chat(bot, m(1, "Sam", "hi"), m(2, "Ana", "We decided on tacos"))
    actions = Actions(bot)
    assert "Only workspace admins" in actions.catchup(inv("sam"), "channel").text
    public = actions.catchup(inv("sam", admin=True), "channel")
    assert not public.ephemeral and "tacos" in public.text
    dm = actions.catchup(inv("sam"), "dm")
    assert dm.dm and dm.ephemeral and "tacos" in dm.text


# ---------------------------------------------------------------------- honest to the store
def test_edits_deletions_and_forget_reach_the_next_digest(bot):
    chat(bot, m(1, "Sam", "hi"), m(2, "Ana", "We decided on pizza for Friday"),
         m(3, "Ben", "We decided the meeting is at 6pm"), m(4, "Cy", "New rule: bring your own mug"))
    actions = Actions(bot)
    assert quoted(actions.catchup(inv("sam"))) == {"2", "3", "4"}
    assert actions.edited("console", "w", "general", "2", "We decided on sushi for Friday")
    after_edit = actions.catchup(inv("sam"))
    assert "sushi" in after_edit.text and "pizza" not in after_edit.text
    assert actions.deleted("console", "w", "general", ["3"]) == 1
    assert "6pm" not in actions.catchup(inv("sam")).text
    privacy.forget_user(bot.store, "console", "w", "cy")
    assert quoted(actions.catchup(inv("sam"))) == {"2"}


def test_forgetting_a_member_forgets_their_subscription(bot):
    chat(bot, m(1, "Sam", "hi"))
    actions = Actions(bot)
    assert actions.catchup(inv("sam"), "subscribe").text.startswith("Subscribed")
    assert actions.catchup(inv("sam"), "subscribe").text.startswith("You were already subscribed")
    sid = bot.store.scope_id(KEY)
    assert subscriptions.subscribers(bot.store, sid) == [("sam", "Sam")]
    privacy.forget_user(bot.store, "console", "w", "sam")
    assert subscriptions.subscribers(bot.store, sid) == []
    assert "weren't subscribed" in actions.catchup(inv("sam"), "unsubscribe").text


# ---------------------------------------------------------------------- isolation
def _other_scope_noise(bot: Bot, n: int, **where) -> None:
    chat(bot, *[m(1000 + i, "Ana", f"Sam, we decided secret plan {i}? I'll book it. New rule {i}", **where)
                for i in range(n)])


def test_a_digest_never_holds_another_scopes_messages(bot):
    chat(bot, m(1, "Sam", "hi"), m(2, "Ana", "We decided on tacos, Sam"))
    _other_scope_noise(bot, 5, workspace="w2")           # same channel id, another workspace
    _other_scope_noise(bot, 5, channel="random")          # another channel of the same workspace
    reply = Actions(bot).catchup(inv("sam"))
    assert quoted(reply) == {"2"} and "secret" not in reply.text
    assert {(c.workspace, c.channel) for c in reply.citations} == {("w", "general")}


def test_differential_other_scopes_do_not_change_a_digest(tmp_path):
    """The same channel's digest is byte-identical whatever the other scopes hold."""
    def digest_text(folder: str, noise: int) -> str:
        b = make_bot({"store": {"path": str(tmp_path / folder / "c.db")}})
        try:
            chat(b, m(1, "Sam", "hi"), m(2, "Ana", "We decided on tacos, Sam"), m(3, "Ben", "Sam you in?"))
            if noise:
                _other_scope_noise(b, noise, workspace="w2")
                _other_scope_noise(b, noise, channel="random")
            r = Actions(b).catchups.reply(KEY, "sam", "Sam", now=T0 + 7200)
            return json.dumps([r.text, [(c.msg_id, c.channel, c.workspace) for c in r.citations]])
        finally:
            b.close()
    assert digest_text("a", 0) == digest_text("b", 40)


def test_linked_scopes_share_a_digest_only_when_configured(tmp_path):
    cfg = {"store": {"path": str(tmp_path / "c.db")}, "scopes": {"links": [["console:w:general", "console:w:ops"]]}}
    b = make_bot(cfg)
    try:
        chat(b, m(1, "Sam", "hi"), m(2, "Ana", "We decided on tacos"),
             m(3, "Ben", "We decided the deploy is on Monday", channel="ops"),
             m(4, "Ben", "We decided the office party is Friday", workspace="w2"))
        assert quoted(Actions(b).catchup(inv("sam"))) == {"2", "3"}
    finally:
        b.close()


def test_digest_config_caps_what_is_read(bot):
    chat(bot, *[m(i, "Ana", f"We decided thing {i}") for i in range(30)])
    digest = build_digest(bot.store, bot.scope_ids(KEY), Member("sam", ["Sam"]), T0 - 1, T0 + 7200,
                          config=CatchupConfig(max_scan=10))
    assert digest.capped and digest.scanned == 10
    assert all(int(digest.messages[ln.message_ids[0]].msg_id) >= 20 for ln in digest.lines)  # the newest


def test_a_capable_model_may_summarise_a_group_only_when_the_messages_support_it(tmp_path):
    from memory.llm.fake import ScriptedLLM

    llm = ScriptedLLM(["Ana and Ben decided on pizza on Friday and a 6pm meeting.",
                       "Everyone agreed to buy a boat."])  # the second is not in the messages
    cfg = {"store": {"path": str(tmp_path / "c.db")}, "answer": {"policy": "model"}}
    b = make_bot(cfg, llm=llm)
    try:
        chat(b, m(1, "Sam", "hi"), m(2, "Ana", "We decided on pizza for Friday"),
             m(3, "Ben", "We decided the meeting is at 6pm"),
             m(4, "Cy", "New rule: bring your own mug"), m(5, "Cy", "New rule: no shoes inside"))
        text = Actions(b).catchup(inv("sam")).text
        assert "Decisions:\n  In short: Ana and Ben decided on pizza on Friday and a 6pm meeting." in text
        assert "boat" not in text and text.count("In short:") == 1
        assert len(llm.calls) == 2  # one per group of two or more lines
    finally:
        b.close()
    plain = make_bot({"store": {"path": str(tmp_path / "d.db")}})
    try:  # the shipped model's policy ("evidence") never asks a model
        chat(plain, m(1, "Sam", "hi"), m(2, "Ana", "We decided on pizza"), m(3, "Ben", "We decided on 6pm"))
        assert "In short" not in Actions(plain).catchup(inv("sam")).text
    finally:
        plain.close()
