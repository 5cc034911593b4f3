"""The command table: every command defined once, every surface rendered from it.

A ``Command`` names its arguments, help text, permission and handler. The chat
commands (``CHAT_COMMANDS``) become the console's and Slack's text commands (help and
dispatch below) and Discord's app commands (``adapters.discord``); the ``chorus``
command line renders its own table of the same ``Command`` type (``bot.cli``). So a
command cannot exist on one platform and be missing, or worded differently, on another.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from .actions import Actions, Invoker
from .replies import Reply

H = TypeVar("H")
Permission = Literal["anyone", "admin"]

# (channel or thread, message id) parsed from a platform link or id; None if not understood.
LinkParser = Callable[[str], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Arg:
    """One argument. ``--name`` is an option, a bare name is positional (the CLI) or a named option (chat)."""

    name: str
    help: str = ""
    required: bool = False
    type: type = str  # str, int or float; bool is a CLI on/off flag
    choices: tuple[str, ...] = ()
    default: object = None
    metavar: str = ""
    repeat: bool = False  # a CLI option that may be given more than once (a list)


@dataclass(frozen=True)
class Command(Generic[H]):
    """One command as every surface shows it: name, arguments, help, who may run it, what runs it.

    ``permission`` is what the surfaces show (Discord's default permissions, the help's admin
    section); ``Actions`` itself refuses an admin command to a non-admin, whoever calls it.
    """

    name: str
    help: str
    handler: H | None = None  # None: a CLI subcommand run by its parent's handler
    args: tuple[Arg, ...] = ()
    permission: Permission = "anyone"
    aliases: tuple[str, ...] = ()
    usage: tuple[tuple[str, str], ...] = ()  # text help lines (usage, help) where one line is not enough
    slow: bool = False  # searches memory or calls a model: Discord runs it on the model pool
    private: bool = True  # Discord: the answer is shown only to whoever asked
    public_when: Callable[[Mapping[str, str]], bool] | None = None  # arguments that make a private command public
    text_args: Callable[[str], dict[str, str]] | None = None  # how a text surface splits the words after the name
    subcommands: tuple[Command[H], ...] = ()
    sub_dest: str = ""  # CLI: the namespace field naming the chosen subcommand

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def is_private(self, args: Mapping[str, str]) -> bool:
        """Whether the answer is shown only to whoever asked (decided before any work starts)."""
        return self.private and not (self.public_when is not None and self.public_when(args))

    def parse_text(self, rest: str) -> dict[str, str]:
        """The argument values from the text after the command's name: one word each, the last takes the rest."""
        if self.text_args is not None:
            return self.text_args(rest)
        if not self.args:
            return {}
        words = rest.split(None, len(self.args) - 1) if rest else []
        return {a.name: (words[i] if i < len(words) else "") for i, a in enumerate(self.args)}

    def text_usage(self) -> tuple[tuple[str, str], ...]:
        """(usage, help) lines for a text surface's help."""
        if self.usage:
            return self.usage
        words = [self.name] + ["|".join(a.choices) if a.choices else a.name.upper() for a in self.args]
        return ((" ".join(words), self.help),)


@dataclass(frozen=True)
class Surface:
    """What differs between platforms for the same command: reading a message link, and two hints."""

    parse_link: LinkParser | None = None
    forget_how: str = "`forget me {code}`"  # how the user repeats `forget me` with its code
    link_hint: str = "Use `forget me`, or `forget message LINK` with a link to the message."


ChatHandler = Callable[[Actions, Invoker, Mapping[str, str], Surface], Reply]
ChatCommand = Command[ChatHandler]


# ---------------------------------------------------------------------- handlers
def _ask(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.ask(inv, args.get("question", ""))


def _whosaid(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.whosaid(inv, args.get("phrase", ""))


def _profile(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.profile(inv, args.get("person", ""))


def _timeline(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.timeline(inv, args.get("topic", ""))


def _status(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.status(inv)


def _forget(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    if args.get("what") == "me":
        return a.forget_me(inv, args.get("confirm", ""), how=s.forget_how)
    link = args.get("link", "")
    ref = s.parse_link(link) if (s.parse_link and link) else None
    if ref is None:
        return Reply(s.link_hint, ephemeral=True)
    return a.forget_message(inv, *ref)


def _forget_words(rest: str) -> dict[str, str]:
    """`forget me [CODE]`, `forget message LINK`, or just `forget LINK`."""
    what, _, more = rest.partition(" ")
    if what.lower() == "me":
        return {"what": "me", "confirm": more.strip()}
    return {"what": "message", "link": more.strip() if what.lower() == "message" else rest}


def _export(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.export_me(inv)


def _optout(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.opt_out_me(inv)


def _optin(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.opt_in_me(inv)


def _pause(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.pause(inv)


def _resume(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.resume(inv)


def _backfill(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.backfill(inv, args.get("days", ""))


def _channel(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    mode = args.get("mode", "").lower().replace("-", "")
    if mode in ("in", "optin", "on"):
        return a.channel_opt(inv, True)
    if mode in ("out", "optout", "off"):
        return a.channel_opt(inv, False)
    return Reply("Use `channel in` or `channel out`.", ephemeral=True)


def _catchup(a: Actions, inv: Invoker, args: Mapping[str, str], s: Surface) -> Reply:
    return a.catchup(inv, args.get("mode", ""), args.get("since", ""))


def _catchup_words(rest: str) -> dict[str, str]:
    """`catchup [dm|all|channel|subscribe|unsubscribe] [since] WHEN`: an option word, then the time."""
    first, _, more = rest.strip().partition(" ")
    if first.lower() in ("dm", "all", "channel", "subscribe", "unsubscribe"):
        return {"mode": first.lower(), "since": more.strip()}
    return {"mode": "", "since": rest.strip()}


# ---------------------------------------------------------------------- the chat table
CHAT_COMMANDS: tuple[ChatCommand, ...] = (
    Command("ask", "Ask Chorus about this channel's memory", _ask,
            (Arg("question", "What do you want to know?", required=True),), slow=True, private=False),
    Command("whosaid", "Who said an exact phrase in this channel", _whosaid,
            (Arg("phrase", "The words to look for", required=True),), slow=True, private=False),
    Command("profile", "What Chorus knows about someone in this channel", _profile,
            (Arg("person", "A name or @mention", required=True),), slow=True, private=False),
    Command("timeline", "How a topic developed over time in this channel", _timeline,
            (Arg("topic", "The topic", required=True),), slow=True, private=False),
    Command("catchup", "What you missed here: decisions, plans, norms, tasks and mentions, with sources", _catchup,
            (Arg("since", "Since when: yesterday, Monday, 2026-03-02, 3d (default: your last message here)"),
             Arg("mode", "dm (to your DMs), all (every line), channel (admins: post here), subscribe, unsubscribe",
                 choices=("dm", "all", "channel", "subscribe", "unsubscribe"))),
            usage=(("catchup [WHEN]", "What you missed here since WHEN (default: your last message), privately"),
                   ("catchup dm|all [WHEN]", "The same as a direct message, or with every line"),
                   ("catchup subscribe", "Get this channel's scheduled digest by direct message"),
                   ("catchup unsubscribe", "Stop the scheduled digest"),
                   ("catchup channel [WHEN]", "Admins: post your digest to the channel")),
            slow=True, text_args=_catchup_words, public_when=lambda args: args.get("mode") == "channel"),
    Command("status", "What Chorus remembers here", _status),
    Command("forget", "Forget all your messages (asks to confirm) or one message", _forget,
            (Arg("what", "'me' for all your messages, 'message' for one", required=True, choices=("me", "message")),
             Arg("link", "Link to the message"),
             Arg("confirm", "The code Chorus gave you to confirm 'forget me'")),
            usage=(("forget me", "Forget every message of yours in this workspace (asks to confirm)"),
                   ("forget message LINK", "Forget one message (yours, or any if you are an admin)")),
            text_args=_forget_words),
    Command("export", "Get a file of everything Chorus keeps by or about you", _export),
    Command("optout", "Stop Chorus remembering your messages", _optout, aliases=("opt-out",)),
    Command("optin", "Let Chorus remember your messages again", _optin, aliases=("opt-in",)),
    Command("pause", "Stop remembering anything in this server", _pause, permission="admin"),
    Command("resume", "Resume remembering this server", _resume, permission="admin"),
    Command("channel", "Opt this channel in or out of memory", _channel,
            (Arg("mode", "'in' to remember this channel, 'out' to stop", required=True, choices=("in", "out")),),
            permission="admin"),
    Command("backfill", "Import this channel's past messages into memory (says how far back and what it keeps)",
            _backfill, (Arg("days", "Only the last N days (default: the whole history)"),), permission="admin"),
)


def find(name: str) -> ChatCommand | None:
    """The chat command called ``name`` (or one of its aliases), if any."""
    name = name.lower()
    return next((c for c in CHAT_COMMANDS if name in c.names()), None)


def help_text(*, omit: frozenset[str] = frozenset()) -> str:
    """The text surfaces' help, from the table; ``omit`` drops commands a surface does not offer."""
    lines = ["Commands:"]
    for section in ("anyone", "admin"):
        if section == "admin":
            lines.append("admin:")
        for cmd in CHAT_COMMANDS:
            if cmd.permission == section and cmd.name not in omit:
                lines += [f"  {usage:<22}  {text}" for usage, text in cmd.text_usage()]
    return "\n".join(lines)


def run_text(actions: Actions, inv: Invoker, text: str, *, parse_link: LinkParser | None = None) -> Reply:
    """One text command (Slack's `/chorus ...`, the console's `/...`): the first word names it.

    ``help`` (or nothing) shows the help; words that name no command are a question.
    """
    word, _, rest = text.strip().partition(" ")
    if word.lower() in ("", "help"):
        return Reply(help_text(), ephemeral=True)
    cmd = find(word)
    if cmd is None or cmd.handler is None:
        return actions.ask(inv, text.strip())
    return cmd.handler(actions, inv, cmd.parse_text(rest.strip()), Surface(parse_link=parse_link))
