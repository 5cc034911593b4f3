"""`/catchup` on every surface, from recorded payloads: an ephemeral reply on Slack, an ephemeral
follow-up on Discord (deferred, as slow work is), the console; DMs on request; mentions kept private.

The surfaces are under test here, not the act model: the analysis labels acts by their first words
(tests/_fakes.py). tests/test_acts.py is about the shipped model."""
from __future__ import annotations

import io
import time

import pytest

from adapters.console import ConsoleChat
from bot.app import Bot
from bot.config import Settings
from tests._fakes import KeywordActs
from tests.test_discord_adapter import ALICE, BOB, DM_CHANNEL, Harness, opt, run, until
from tests.test_slack_adapter import GENERAL, TEAM
from tests.test_slack_adapter import Harness as SlackHarness
from tests.test_slack_adapter import until as slack_until

SNOW = 300_000_000_000 << 22  # a Discord snowflake of 2024 (ms since 2015, shifted)


@pytest.fixture
def sl(tmp_path):
    labels = KeywordActs()
    harness = SlackHarness(tmp_path, analysis_models=(labels, labels))
    yield harness
    harness.close()


DECISION = "we decided the end-of-season dinner is pizza by the river"


def test_slack_catchup_is_an_ephemeral_reply_with_links(sl):
    h = sl
    h.message("1717000010.000100", "see you all in a week")
    h.message("1717000040.000100", DECISION, user="U0BOB")
    h.message("1717000050.000100", "alice can you bring the cups?", user="U0BOB")
    h.command("catchup")
    answer = slack_until(lambda: h.responses("Decisions:"))[0]
    assert answer["response_type"] == "ephemeral"
    assert "pizza by the river" in answer["text"] and "Questions to you nobody answered" in answer["text"]
    assert "<https://chorus-test.slack.com/archives/C0GENERAL/p1717000040000100|[1]>" in answer["text"]
    assert h.api.of("chat.postMessage") == []  # nothing went to the channel


def test_slack_catchup_dm_and_a_private_mention(sl):
    h = sl
    h.message("1717000010.000100", "see you all in a week")
    h.message("1717000040.000100", DECISION, user="U0BOB")
    h.command("catchup dm")
    note = slack_until(lambda: h.responses("direct message"))[0]
    assert note["response_type"] == "ephemeral"
    dm = slack_until(lambda: h.api.of("chat.postMessage"))[0]
    assert dm["channel"] == "D0ALICE" and "pizza by the river" in dm["text"]
    h.event({"type": "app_mention", "channel": GENERAL, "user": "U0ALICE", "team": TEAM,
             "text": "<@U0BOT> what did I miss?", "ts": "1717000060.000100"})
    private = slack_until(lambda: h.api.of("chat.postEphemeral"))[0]
    assert private["user"] == "U0ALICE" and private["channel"] == GENERAL and "pizza" in private["text"]
    assert len(h.api.of("chat.postMessage")) == 1  # still only the DM


def test_discord_catchup_is_an_ephemeral_follow_up(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch, analysis_models=(KeywordActs(),) * 2, defer_after_s=0.05) as h:
            # discord.py dates a message by its snowflake id: ids a second apart.
            await h.say(SNOW + (1 << 32), "see you all in a week")
            await h.say(SNOW + (2 << 32), DECISION, author=BOB)
            await h.say(SNOW + (3 << 32), "Alice, can you bring the cups?", author=BOB)
            await until(lambda: h.count() == 3)
            build = h.actions.catchups.reply
            h.actions.catchups.reply = lambda *a, **k: (time.sleep(0.3), build(*a, **k))[1]  # type: ignore
            t = await h.command("catchup")
            answers = await until(lambda: len(h.answers(t)) >= 2 and h.answers(t))
            assert answers[0]["type"] == 5 and h.ephemeral(answers[0])  # deferred, privately
            text = h.text_of(answers[1])
            assert h.ephemeral(answers[1]) and "pizza by the river" in text and "Questions to you" in text
            assert f"https://discord.com/channels/100/200/{SNOW + (2 << 32)}" in text
            h.actions.catchups.reply = build  # type: ignore[method-assign]
            t = await h.command("catchup", [opt("mode", "dm")])
            await until(lambda: any("direct message" in h.text_of(b) for b in h.answers(t)))  # noqa: B023
            assert all(h.ephemeral(b) for b in h.answers(t))
            sent = [b for b in h.api.posted("message") if b["channel"] == DM_CHANNEL]
            assert sent and "pizza by the river" in sent[0]["content"]
            assert str(h.api.posted("dm_open")[0]["recipient_id"]) == ALICE["id"]
            t = await h.command("catchup", [opt("since", "the twelfth of never-ish")])
            await until(lambda: any("can't read" in h.text_of(b) for b in h.answers(t)))  # noqa: B023
            assert all(h.ephemeral(b) for b in h.answers(t))
    run(go())


def test_console_catchup(tmp_path):
    labels = KeywordActs()
    bot = Bot(Settings.model_validate({"store": {"path": str(tmp_path / "c.db")}}), load_models=False,
              analysis_models=(labels, labels))
    try:
        out = io.StringIO()
        chat = ConsoleChat(bot, io.StringIO(), out)
        for line in ("sam: back next week", "ana: we decided the dinner is pizza by the river",
                     "ben: Sam can you bring the cups?", "/as sam", "/catchup", "@chorus what did I miss?",
                     "/catchup since blorp"):
            chat.handle(line)
        text = out.getvalue()
        assert text.count("Since ") == 2 and "pizza by the river” [1]" in text
        assert "Questions to you nobody answered:" in text and "Sorry: I can't read 'since blorp'" in text
        # A line's speaker is the asker: "ana: @chorus ..." is Ana's catch-up, whoever the console speaks as.
        out.truncate(0)
        out.seek(0)
        chat.handle("ana: @chorus what did I miss?")
        assert "(your last message here)" in out.getvalue() and "Questions to you" not in out.getvalue()
    finally:
        bot.close()
