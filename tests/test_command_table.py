"""Every surface offers exactly the command table's commands, and runs each through the table's handler.

The surfaces are the real ones: discord.py's ``CommandTree`` (and interactions through it),
the Bolt ``App`` behind Slack's ``/chorus``, the console, and the ``chorus`` argparse parser.
Probe handlers replace the table's, so a command that a surface defined on its own (or routed
around the table) shows up as a missing probe answer.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
from collections.abc import Mapping

import discord
import pytest

from adapters import discord as discord_adapter
from adapters.console import CONSOLE_COMMANDS, ConsoleChat
from bot import cli, command_table
from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.command_table import CHAT_COMMANDS, ChatCommand, Surface, help_text
from bot.config import Settings
from bot.replies import Reply
from memory.store import Store
from tests.test_discord_adapter import ADMIN_PERMS, opt, run
from tests.test_discord_adapter import Harness as DiscordHarness
from tests.test_discord_adapter import until as discord_until
from tests.test_slack_adapter import Harness as SlackHarness
from tests.test_slack_adapter import until as slack_until

NAMES = [c.name for c in CHAT_COMMANDS]


def probe(name: str):
    def handler(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
        return Reply(f"probe:{name}:" + ",".join(f"{k}={v}" for k, v in sorted(args.items()) if v))
    return handler


@pytest.fixture
def probed(monkeypatch):
    """The table with every handler replaced by a probe that names its command and arguments."""
    table = tuple(dataclasses.replace(c, handler=probe(c.name)) for c in CHAT_COMMANDS)
    monkeypatch.setattr(command_table, "CHAT_COMMANDS", table)
    monkeypatch.setattr(discord_adapter, "CHAT_COMMANDS", table)
    return table


def sample(cmd: ChatCommand) -> dict[str, str]:
    """A value for each required argument."""
    return {a.name: (a.choices[0] if a.choices else "x") for a in cmd.args if a.required}


def help_names(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.startswith("  ")}


def test_the_table_is_well_formed():
    names = [n for c in CHAT_COMMANDS for n in c.names()]
    assert len(names) == len(set(names)) and "help" not in names  # help belongs to the text surfaces
    for c in CHAT_COMMANDS:
        assert c.handler is not None and c.help and len(c.help) <= 100  # Discord's description limit
        assert c.permission in ("anyone", "admin")
        assert all(a.help for a in c.args)


def test_discord_tree_is_the_table(tmp_path):
    async def go() -> None:
        store = Store(tmp_path / "c.db")
        adapter = discord_adapter.DiscordAdapter(Actions(Bot(Settings(), store=store, load_models=False)))
        try:
            tree = {c.name: c for c in adapter.client.tree.get_commands()}
            assert sorted(tree) == sorted(NAMES)
            for cmd in CHAT_COMMANDS:
                app = tree[cmd.name]
                assert isinstance(app, discord.app_commands.Command)
                assert app.description.lower().endswith(cmd.help.lower())
                params = {p.name: p for p in app.parameters}
                assert sorted(params) == sorted(a.name for a in cmd.args)
                for arg in cmd.args:
                    p = params[arg.name]
                    assert p.required == arg.required and p.description == arg.help
                    assert [c.value for c in p.choices] == list(arg.choices)
                admin = cmd.permission == "admin"
                assert app.guild_only == admin
                assert (app.default_permissions is not None and app.default_permissions.manage_guild) == admin
        finally:
            await adapter.close()
            adapter.fast.shutdown()
            adapter.slow.shutdown()
            store.close()
    run(go())


def test_discord_runs_each_command_through_the_table(tmp_path, monkeypatch, probed):
    async def go() -> None:
        async with DiscordHarness(tmp_path, monkeypatch) as h:
            for cmd in probed:
                values = sample(cmd)
                t = await h.command(cmd.name, [opt(k, v) for k, v in values.items()], perms=ADMIN_PERMS)
                answer = h.text_of((await discord_until(lambda: h.answers(t)))[0])  # noqa: B023  (awaited here)
                assert answer == f"probe:{cmd.name}:" + ",".join(f"{k}={v}" for k, v in sorted(values.items()))
    run(go())


def test_slack_chorus_command_is_the_table(tmp_path, probed):
    h = SlackHarness(tmp_path)
    try:
        h.command("help")
        listed = slack_until(lambda: h.responses("Commands:"))[0]["text"]
        assert help_names(listed) == set(NAMES)
        for cmd in probed:
            for n, name in enumerate(cmd.names(), 1):
                h.command(f"{name} x")
                slack_until(lambda: len(h.responses(f"probe:{cmd.name}:")) == n)  # noqa: B023  (waited for here)
        h.command("what is the plan?")  # no command named: a question
        slack_until(lambda: len(h.api.of("respond")) == 2 + sum(len(c.names()) for c in probed))
        assert "probe:" not in h.api.of("respond")[-1]["text"]
    finally:
        h.close()
    assert help_names(help_text()) == set(NAMES)


def test_console_offers_the_table_except_its_own_commands(tmp_path, probed):
    bot = Bot(Settings.model_validate({"store": {"path": str(tmp_path / "c.db")}}), load_models=False)
    try:
        out = io.StringIO()
        chat = ConsoleChat(bot, io.StringIO(), out)
        chat.command("/help")
        listed = help_names(out.getvalue().split("Commands:")[1])
        assert listed == set(NAMES) - CONSOLE_COMMANDS
        for cmd in probed:
            if cmd.name in CONSOLE_COMMANDS:
                continue
            out.seek(0)
            out.truncate()
            chat.command(f"/{cmd.name} x")
            assert f"probe:{cmd.name}:" in out.getvalue()
    finally:
        bot.close()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_cli_parser_is_the_cli_table():
    parser = cli.build_parser()

    def check(p: argparse.ArgumentParser, table: tuple, inherited=None) -> None:
        subs = _subcommands(p)
        assert list(subs) == [c.name for c in table]
        for cmd in table:
            sp = subs[cmd.name]
            dests = {a.dest for a in sp._actions if not isinstance(a, (argparse._HelpAction,
                                                                        argparse._SubParsersAction))}
            assert dests == {a.name.lstrip("-").replace("-", "_") for a in cmd.args}
            handler = cmd.handler or inherited
            if cmd.subcommands:
                check(sp, cmd.subcommands, handler)
            else:
                assert handler is not None and sp.get_default("handler") is handler

    check(parser, cli.CLI_COMMANDS)
    assert cli.COMMANDS == {c.name: c.handler for c in cli.CLI_COMMANDS if c.handler}
    args = parser.parse_args(["eval", "writer", "--dataset", "locomo"])
    assert args.handler.__name__ == "eval_writer" and args.eval_kind == "writer"
    assert parser.parse_args(["bench", "load"]).handler is cli.COMMANDS["bench"]
