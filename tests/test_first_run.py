"""First run and privacy defaults: where the store lives, history import only on request, bare commands."""
from __future__ import annotations

import time

import pytest

from bot import cli
from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.command_table import find, run_text
from bot.config import EmbeddingSettings, Settings, load_settings
from memory.embeddings.factory import DEFAULT_MINILM_GGUF_DTYPE
from memory.models import Message, ScopeKey
from memory.store import Store

KEY = ScopeKey("slack", "T1", "C1")


@pytest.fixture
def no_config(tmp_path, monkeypatch):
    """A working folder without config.toml and a private per-user data folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHORUS_CONFIG", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path


def write_config(folder, body: str):
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "config.toml"
    cfg.write_text(body, "utf-8")
    return cfg


def test_relative_store_path_is_taken_from_the_config_files_folder(tmp_path, no_config):
    cfg = write_config(tmp_path / "etc", '[store]\npath = "data/chorus.db"\n[console]\nlog_file = "logs/c.log"\n')
    (tmp_path / "elsewhere").mkdir()
    s = load_settings(cfg)
    assert s.store.path == str((tmp_path / "etc" / "data" / "chorus.db").resolve())
    assert s.console.log_file == str((tmp_path / "etc" / "logs" / "c.log").resolve())
    assert s.store_line() == f"Store: {s.store.path} (store.path in {cfg.resolve()})"
    absolute = write_config(tmp_path / "abs", f'[store]\npath = "{tmp_path / "x.db"}"\n')
    assert load_settings(absolute).store.path == str(tmp_path / "x.db")


def test_without_a_config_the_store_lives_in_the_per_user_data_folder(no_config):
    s = load_settings()
    assert s.store.path == str(no_config / "xdg" / "chorus" / "data" / "chorus.db")
    assert "no config file" in s.store_line() and s.store.path in s.store_line()
    s.use_store("other.db")
    assert s.store_line() == "Store: other.db (given with --db)"


def test_status_and_console_say_which_store_is_in_use(tmp_path, capsys):
    cfg = write_config(tmp_path / "cfg", '[store]\npath = "mem.db"\n')
    assert cli.main(["--config", str(cfg), "status"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"Store: {(tmp_path / 'cfg' / 'mem.db').resolve()} (store.path in {cfg.resolve()})"


def test_bare_chorus_prints_the_short_help(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chorus") and all(f"  {c.name} " in out for c in cli.CLI_COMMANDS)


def _store_with(tmp_path, channels: list[str]):
    path = tmp_path / "cfg" / "chorus.db"
    cfg = write_config(tmp_path / "cfg", '[store]\npath = "chorus.db"\n[llm]\nmodel_path = "missing.gguf"\n'
                       '[embeddings]\nbackend = "minilm"\n')
    store = Store(path)
    store.ingest([Message("slack", "T1", ch, f"m{n}", "u1", "Ann", f"the picnic is on Friday in {ch}", 1e9 + n)
                  for n, ch in enumerate(channels)])
    store.close()
    return cfg


def test_whosaid_without_scope_lists_the_exact_strings_to_pass(tmp_path, capsys):
    cfg = _store_with(tmp_path, ["C1", "C2"])
    assert cli.main(["--config", str(cfg), "whosaid", "picnic is on"]) == 2
    err = capsys.readouterr().err
    assert "--scope slack:T1:C1" in err and "--scope slack:T1:C2" in err


def test_ask_without_scope_uses_the_only_channel(tmp_path, capsys):
    cfg = _store_with(tmp_path, ["C1"])
    assert cli.main(["--config", str(cfg), "ask", "when is the picnic?"]) == 0
    assert "the picnic is on Friday in C1" in capsys.readouterr().out


def test_ask_without_scope_in_an_empty_store_says_what_to_do(tmp_path, capsys):
    cfg = write_config(tmp_path / "cfg", '[store]\npath = "empty.db"\n[llm]\nmodel_path = "missing.gguf"\n')
    assert cli.main(["--config", str(cfg), "whosaid", "x"]) == 1
    assert "no channel has memory yet" in capsys.readouterr().err


def test_history_is_never_imported_on_join_by_default():
    s = Settings()
    assert s.discord.backfill_on_join is False and s.slack.backfill_on_join is False
    assert s.scopes.default_opt_in is True  # live messages are still remembered


def test_dtype_description_names_the_defaults_the_code_uses():
    text = EmbeddingSettings.model_fields["dtype"].description
    assert Settings().embeddings.dtype == "" and "Empty (the default)" in text
    assert "'int8' for 'minilm-onnx'" in text and f"'{DEFAULT_MINILM_GGUF_DTYPE}' for 'minilm-gguf'" in text


# ---------------------------------------------------------------------- /backfill, an explicit admin act
@pytest.fixture
def actions(tmp_path):
    bot = Bot(Settings(), store=Store(tmp_path / "b.db"), llm=None, load_models=False)
    acts = Actions(bot)
    yield acts
    bot.close()


def test_backfill_is_for_admins_and_says_how_far_back_and_what_it_stores(actions):
    calls: list = []
    actions.history_importers["slack"] = lambda inv, since: calls.append((inv.key, since))
    member = Invoker(KEY, "u1", "Ann", channel_name="general")
    admin = Invoker(KEY, "u2", "Bo", is_admin=True, channel_name="general")
    assert "Only workspace admins" in run_text(actions, member, "backfill").text and calls == []
    whole = run_text(actions, admin, "backfill")
    assert calls == [(KEY, None)] and "from its very first message" in whole.text
    assert "#general" in whole.text and "text, author id and display name, time and thread" in whole.text
    assert "New messages keep being remembered" in whole.text and whole.ephemeral
    now = time.time()
    recent = actions.backfill(admin, "30", now=now)
    assert calls[-1] == (KEY, now - 30 * 86400)
    assert time.strftime("%Y-%m-%d", time.gmtime(now - 30 * 86400)) in recent.text and "older messages are skipped" \
        in recent.text
    assert "backfill DAYS" in actions.backfill(admin, "soon").text and len(calls) == 2
    assert find("backfill").permission == "admin"


def test_backfill_where_there_is_no_platform_history(actions):
    admin = Invoker(ScopeKey("console", "local", "general"), "u2", "Bo", is_admin=True)
    assert "no platform history" in actions.backfill(admin).text


def test_backfill_refused_in_an_opted_out_channel(actions):
    calls: list = []
    actions.history_importers["slack"] = lambda inv, since: calls.append(since)
    admin = Invoker(KEY, "u2", "Bo", is_admin=True)
    actions.channel_opt(admin, False)
    assert "opted out" in actions.backfill(admin).text and calls == []


def test_chorus_ask_and_a_mention_give_the_same_reply(tmp_path, capsys):
    """One command path: `chorus ask` goes through Actions.ask as a mention does, so the same text gets the
    same reply, and a catch-up request is a catch-up on both."""
    from bot.actions import Actions, Invoker
    from bot.app import Bot
    from bot.config import load_settings
    from memory.models import ScopeKey

    cfg = _store_with(tmp_path, ["C1"])
    key = ScopeKey("slack", "T1", "C1")
    got = {}
    for text in ("when is the picnic?", "what did I miss?"):
        assert cli.main(["--config", str(cfg), "ask", "--member", "u1", text]) == 0
        got[text] = capsys.readouterr().out.strip()
        with Bot(load_settings(cfg)) as bot:
            mention = Actions(bot).ask(Invoker(key, "u1", "Ann", is_admin=True, channel_name="C1"), text).text
        assert got[text] == mention.strip(), (text, got[text], mention)
    assert "the picnic is on Friday in C1" in got["when is the picnic?"]
    assert got["what did I miss?"].startswith("Nothing new for you in #C1"), got["what did I miss?"]
