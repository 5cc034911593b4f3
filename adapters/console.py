"""The console adapter: a terminal group chat, the embedded default that needs no account.

Type ``alice: hello`` to speak as alice, ``@chorus question`` (or ``bob: @chorus ...``)
to ask the bot, and ``/help`` for commands. Everything goes through the same
``Bot`` the Discord and Slack adapters use.
"""
from __future__ import annotations

import itertools
import logging
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from bot.actions import Actions, Invoker
from bot.app import Bot
from bot.command_table import help_text, run_text
from bot.errors import ChorusError
from bot.replies import Reply
from bot.transcripts import demo_messages
from memory.models import Message, ScopeKey

log = logging.getLogger(__name__)

PLATFORM = "console"
WORKSPACE = "local"
_SPEAKER = re.compile(r"^\s*([^\s:/@][^:]{0,39}):\s?(.*)$", re.DOTALL)

CONSOLE_HELP = """Console:
  NAME: TEXT          say TEXT as NAME (e.g. "alice: lunch at noon?")
  TEXT                say TEXT as the current speaker
  {mention:<20}ask the bot (also inside a message)
  /as NAME            change the current speaker
  /channel NAME       move to another channel (each channel has its own memory)
  /help               this text
  /quit               leave
The bot's commands, the same as on Discord and Slack (type them after a slash, e.g. /whosaid pizza):"""
# The console's own commands; they come before the bot's (so `/channel NAME` moves, it does not opt out).
CONSOLE_COMMANDS = frozenset({"as", "channel", "help", "quit", "exit"})


class ConsoleChat:
    """Reads chat lines from ``stdin`` and writes the bot's replies to ``stdout``."""

    def __init__(self, bot: Bot, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout, *,
                 channel: str = "general", speaker: str = "you") -> None:
        self.bot = bot
        self.stdin = stdin
        self.stdout = stdout
        self.channel = channel
        self.speaker = speaker
        self.bot_name = bot.settings.console.bot_name
        self._ids = itertools.count(int(time.time() * 1000))
        self._mention = re.compile(rf"@{re.escape(self.bot_name)}\b[:,]?\s*", re.IGNORECASE)
        self.actions = Actions(bot, default_opt_in=True)
        self.export_dir = Path.cwd()

    @property
    def key(self) -> ScopeKey:
        return ScopeKey(PLATFORM, WORKSPACE, self.channel)

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def render(self, reply: Reply) -> None:
        if reply.dm:
            self.say("(the console has no direct messages: here it is)")
        self.say(f"{self.bot_name}> " + reply.text.replace("\n", "\n" + " " * (len(self.bot_name) + 2)))
        if reply.attachment is not None and reply.attachment_name:
            path = self.export_dir / reply.attachment_name
            path.write_bytes(reply.attachment)
            self.say(f"(saved {reply.attachment_name} to {path})")

    def invoker(self, speaker: str | None = None) -> Invoker:
        """The console user: ``speaker`` (a line's "sam: ..."), else the current speaker; an admin of their own
        terminal."""
        who = speaker or self.speaker
        return Invoker(self.key, who.casefold(), who, is_admin=True, channel_name=self.channel)

    def load_demo(self) -> int:
        """Preload the demo conversation into an empty channel."""
        if self.bot.store.scope_id(self.key) is not None:
            return 0
        # Ids as the console gives them ("sam: ..." speaks as the demo's Sam, not as a second person).
        moved = [Message(PLATFORM, WORKSPACE, self.channel, f"demo-{m.msg_id}", m.author_id.casefold(),
                         m.author_name, m.text, m.ts) for m in demo_messages()]
        return self.bot.remember(moved, embed=self.bot.store.embedder is not None, default_opt_in=True).stored

    def run(self) -> int:
        interactive = self.stdin.isatty()
        self.say(f"Chorus console, channel #{self.channel}. Type /help for commands.")
        while True:
            if interactive:
                self.stdout.write(f"{self.speaker}@#{self.channel}> ")
                self.stdout.flush()
            line = self.stdin.readline()
            if not line:
                return 0
            try:
                if not self.handle(line.rstrip("\n")):
                    return 0
            except ChorusError as exc:
                self.say(f"error: {exc}")
            except Exception:  # the console is a boundary: keep the chat alive
                log.exception("console line failed")
                self.say("error: something went wrong; see the log")

    def handle(self, line: str) -> bool:
        """Process one line; False means quit."""
        stripped = line.strip()
        if not stripped:
            return True
        if stripped.startswith("/"):
            return self.command(stripped)
        match = _SPEAKER.match(line)
        speaker, text = (match.group(1).strip(), match.group(2)) if match else (self.speaker, line)
        if not text.strip():
            return True
        asks = bool(self._mention.search(text))
        speaker = self._known_name(speaker)
        msg = Message(PLATFORM, WORKSPACE, self.channel, str(next(self._ids)), speaker.casefold(), speaker,
                      text, time.time(), to_bot=asks)
        self.actions.remember(msg)
        if asks:
            self.render(self.actions.ask(self.invoker(speaker), self._mention.sub("", text), asked_in=msg))
        return True

    def _known_name(self, speaker: str) -> str:
        """A member's name as the channel knows it ("sam" types as Sam), else the name as typed."""
        sid = self.bot.store.scope_id(self.key)
        if sid is not None:
            for person in self.bot.store.roster(sid):
                if person.person_id == speaker.casefold():
                    return person.display_name
        return speaker

    def command(self, line: str) -> bool:
        """Console commands, then the shared command table (`bot.command_table`) every platform uses."""
        name, _, arg = line[1:].partition(" ")
        name = name.lower()
        arg = arg.strip()
        if name in ("quit", "exit"):
            return False
        if name == "help":
            self.say(CONSOLE_HELP.format(mention=f"@{self.bot_name} QUESTION") + "\n"
                     + help_text(omit=CONSOLE_COMMANDS))
        elif name == "as" and arg:
            self.speaker = arg
            self.say(f"(you are now {arg})")
        elif name == "channel" and arg:
            self.channel = arg.lstrip("#")
            self.say(f"(now in #{self.channel})")
        elif name in ("as", "channel"):
            self.say(f"/{name} needs a name; try /help")
        else:
            self.render(run_text(self.actions, self.invoker(), f"{name} {arg}".strip(), parse_link=self._link))
        return True

    def _link(self, text: str) -> tuple[str, str] | None:
        """A console message is named by its id (as shown by /export); the channel is the current one."""
        text = text.strip()
        return (self.channel, text) if text else None
