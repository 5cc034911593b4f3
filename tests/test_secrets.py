"""Secrets and permissions: tokens come only from the environment and never reach a log; admin
commands refuse non-admins; an export goes only to the person who asked for it."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from bot.actions import REFUSE_ADMIN, Actions, Invoker
from bot.app import Bot
from bot.command_table import run_text
from bot.config import Settings, load_settings
from bot.platform_cli import RedactSecrets
from memory import privacy
from memory.errors import ConfigError
from memory.models import Message, ScopeKey
from memory.store import Store

ROOT = Path(__file__).resolve().parents[1]
TOKENS = {"DISCORD_TOKEN": "MTIz.fake-discord-SECRET-token-4f1c", "SLACK_BOT_TOKEN": "xoxb-123-456-fakeSECRETbot",
          "SLACK_APP_TOKEN": "xapp-1-A0-fakeSECRETapp", "SLACK_SIGNING_SECRET": "fake-signing-SECRET-9e2d"}
KEY = ScopeKey("slack", "T1", "C1")
T0 = 1_717_000_000.0


# ---------------------------------------------------------------------- tokens only from the environment
def test_settings_have_no_place_for_a_secret():
    def walk(model, prefix=""):
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                yield from walk(value, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}", value

    for path, value in walk(Settings()):
        leaf = path.rsplit(".", 1)[-1]
        if isinstance(value, str) and re.search(r"(^|_)(tokens?|secret|key|password)(_|$)", leaf):
            assert leaf.endswith("_env"), f"{path} would hold a secret in the config file"
            assert value == "" or value.isupper(), f"{path} should name an environment variable"


def test_a_token_written_into_the_config_is_refused_without_echoing_it(tmp_path):
    cfg = tmp_path / "chorus.toml"
    cfg.write_text(f'[discord]\nenabled = true\ntoken = "{TOKENS["DISCORD_TOKEN"]}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert "discord.token" in str(err.value) and TOKENS["DISCORD_TOKEN"] not in str(err.value)


def test_a_missing_secret_names_the_variable(monkeypatch):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN is not set"):
        Settings().secret("SLACK_BOT_TOKEN")
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKENS["SLACK_BOT_TOKEN"])
    assert Settings().secret("SLACK_BOT_TOKEN") == TOKENS["SLACK_BOT_TOKEN"]


# ---------------------------------------------------------------------- never logged
@pytest.mark.parametrize("platform", ["slack", "discord"])
def test_chorus_run_startup_never_logs_a_token(tmp_path, platform):
    """Start the real `chorus run` (debug logging) with fake tokens; it cannot log in here, and says so in one line."""
    cfg = tmp_path / "chorus.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "c.db"}"\n[writer]\nenabled = false\n[{platform}]\nenabled = true\n')
    env = {**os.environ, **TOKENS, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "bot", "-v", "--config", str(cfg), "run"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and output.strip().splitlines()[-1].startswith("chorus: ")
    for token in TOKENS.values():
        assert token not in output and token[:12] not in output, f"{token[:8]}... leaked into the startup log"
    assert "DEBUG" in output  # the debug log was on, so the libraries had every chance to print headers


def test_redaction_covers_messages_arguments_and_tracebacks():
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.addFilter(RedactSecrets(list(TOKENS.values())))
    logger = logging.getLogger("chorus.test.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        token = TOKENS["SLACK_BOT_TOKEN"]
        logger.warning("header Authorization: Bearer %s", token)
        logger.warning("params %r", {"token": TOKENS["DISCORD_TOKEN"]})
        try:
            raise RuntimeError(f"invalid_auth for {token}")
        except RuntimeError:
            logger.exception("login failed")
        logger.warning("stack check %s", "x", stack_info=True)
    finally:
        logger.removeHandler(handler)
    text = buf.getvalue()
    assert not any(t in text for t in TOKENS.values()) and text.count("[redacted]") == 3
    assert "RuntimeError: invalid_auth for [redacted]" in text


def test_platform_libraries_do_not_log_the_token_at_debug(tmp_path, caplog):
    """A whole Slack session (messages, a mention, commands, an export) at DEBUG, without the redaction filter."""
    from tests.test_slack_adapter import Harness, until

    caplog.set_level(logging.DEBUG)
    h = Harness(tmp_path)
    try:
        h.message("1717000001.000100", "the gig is at nine")
        h.event({"type": "app_mention", "channel": "C0GENERAL", "user": "U0ALICE", "text": "<@U0BOT> gig?",
                 "ts": "1717000002.000100", "team": "T0TEST"})
        h.command("status")
        h.command("export")
        until(lambda: h.api.of("files.completeUploadExternal") and h.api.of("chat.postMessage"))
    finally:
        h.close()
    assert "xoxb-test-token" not in caplog.text and "test-signing-secret" not in caplog.text
    assert caplog.text  # something was logged


# ---------------------------------------------------------------------- admin commands
@pytest.fixture
def acts(tmp_path):
    bot = Bot(Settings(), store=Store(tmp_path / "c.db"), load_models=False)
    a = Actions(bot)
    for n, (uid, text) in enumerate([("u1", "alice's plan for the trip"), ("u2", "bob's own secret plan")]):
        a.remember(Message("slack", "T1", "C1", str(n), uid, uid, text, T0 + n))
    a.remember(Message("slack", "T1", "D2", "9", "u2", "u2", "bob's DM to the bot", T0 + 9, is_dm=True))
    yield a
    bot.close()


ADMIN_ONLY = ["pause", "PAUSE", "resume", "channel out", "channel off", "channel opt-out", "channel in",
              "Channel On", "channel optin"]


@pytest.mark.parametrize("command", ADMIN_ONLY)
def test_admin_commands_refuse_non_admins_and_change_nothing(acts, command):
    store = acts.store
    before = (privacy.is_paused(store, "slack", "T1"), privacy.is_channel_opted_in(store, KEY))
    reply = run_text(acts, Invoker(KEY, "u1", "alice", is_admin=False), command)
    assert reply.text == REFUSE_ADMIN and reply.ephemeral
    assert (privacy.is_paused(store, "slack", "T1"), privacy.is_channel_opted_in(store, KEY)) == before
    dm = Invoker(ScopeKey("slack", "T1", "D2"), "u2", "bob", is_admin=False, is_dm=True)
    assert run_text(acts, dm, command).text == REFUSE_ADMIN


def test_admins_can_and_the_effect_is_real(acts):
    admin = Invoker(KEY, "u9", "boss", is_admin=True)
    assert "Paused" in run_text(acts, admin, "pause").text
    assert not acts.remember(Message("slack", "T1", "C1", "50", "u1", "u1", "while paused", T0 + 50))
    assert "Resumed" in run_text(acts, admin, "resume").text
    assert "opted out" in run_text(acts, admin, "channel out").text
    assert not acts.remember(Message("slack", "T1", "C1", "51", "u1", "u1", "opted out", T0 + 51))


def test_forgetting_someone_elses_message_needs_an_admin(acts):
    bob_msg = ("C1", "1")
    reply = acts.forget_message(Invoker(KEY, "u1", "alice"), *bob_msg)
    assert "only make me forget your own" in reply.text
    assert acts.store.find(KEY, "1") is not None
    assert "Forgotten" in acts.forget_message(Invoker(KEY, "u9", "boss", is_admin=True), *bob_msg).text
    assert acts.store.find(KEY, "1") is None


def test_slack_dm_commands_never_carry_admin_rights(tmp_path):
    from tests.test_slack_adapter import Harness, until

    h = Harness(tmp_path)
    try:
        h.command("pause", user="U0BOB", channel="D0BOB")  # Bob is a workspace admin, but this is a DM
        assert until(lambda: h.responses("Only workspace admins"))
        assert not privacy.is_paused(h.store, "slack", "T0TEST")
    finally:
        h.close()


# ---------------------------------------------------------------------- exports
def test_export_holds_only_the_requesters_data_and_is_private(acts):
    for user, mine, theirs in (("u1", "alice's plan", "bob's"), ("u2", "bob's own secret plan", "alice's")):
        for is_admin in (False, True):  # being an admin does not widen an export
            reply = acts.export_me(Invoker(KEY, user, user, is_admin=is_admin))
            assert reply.ephemeral and reply.attachment_name.endswith(".json")
            data = json.loads(reply.attachment)
            assert data["user_id"] == user and data["messages"]
            texts = " ".join(m["text"] for m in data["messages"])
            assert mine in texts and theirs not in texts
            assert "alice's plan" not in reply.text and "bob's" not in reply.text  # the public part holds no data
    bob = json.loads(acts.export_me(Invoker(KEY, "u2", "bob")).attachment)
    assert "bob's DM to the bot" in {m["text"] for m in bob["messages"]}  # his own DM is his data
    alice = json.loads(acts.export_me(Invoker(KEY, "u1", "alice")).attachment)
    assert "bob's DM to the bot" not in json.dumps(alice)
