"""Catch-up digests for the bot: one member's digest of one channel as a ``Reply`` with citations.

The engine (``memory.catchup``) decides what a digest holds; this module picks the window (the time the
member typed, else their last message here, else the last week), names the member as the channel knows
them, and renders the digest with the same citations every other reply carries.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from memory.catchup.digest import CatchupConfig, Digest, build_digest, last_message_ts
from memory.catchup.members import Member
from memory.catchup.render import Rendered, render
from memory.catchup.since import resolve_since, zone
from memory.catchup.summary import summarise
from memory.errors import ChorusError
from memory.models import ScopeKey

from .app import Bot
from .replies import Citation, Reply, cut_for_chat

log = logging.getLogger(__name__)

ANALYSE_FIRST = 512  # waiting messages a digest has the analysis read before it is built


@dataclass
class Window:
    """Where a digest starts and ends, and why it starts there (shown in its header)."""

    since: float
    until: float
    note: str


class Catchup:
    """Builds members' digests from one ``Bot``'s store and settings."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot
        self.store = bot.store
        cfg = bot.settings.catchup
        self.config = CatchupConfig(max_lines=cfg.max_lines)

    def tz(self, key: ScopeKey):
        return zone(self.bot.settings.catchup.zone_name(key.platform, key.workspace))

    def member(self, key: ScopeKey, person_id: str, name: str = "") -> Member:
        """The member under every name this channel (and its linked scopes) knows them by."""
        names = [name] if name else []
        for sid in self.bot.scope_ids(key):
            names += [n for p in self.store.roster(sid) if p.person_id == person_id for n in p.names()]
        return Member(person_id, names)

    def window(self, key: ScopeKey, person_id: str, since_text: str, *, now: float | None = None,
               exclude: tuple[int, ...] = ()) -> Window:
        """The digest's window: the typed start, else the member's last message here, else the last week."""
        now = time.time() if now is None else now
        if since_text.strip():
            when = resolve_since(since_text, datetime.fromtimestamp(now, UTC), self.tz(key))
            return Window(when.timestamp(), now, f"since {' '.join(since_text.split())[:40]}")
        last = last_message_ts(self.store, self.bot.scope_ids(key), person_id, before=now, exclude=exclude)
        if last is not None:
            return Window(last, now, "your last message here")
        days = self.config.default_days
        return Window(now - days * 86400, now, f"you haven't posted here, so the last {days:g} days")

    def digest(self, key: ScopeKey, member: Member, window: Window, *, show_all: bool = False,
               exclude: tuple[int, ...] = ()) -> Digest:
        scope_ids = self.bot.scope_ids(key)
        try:  # the newest messages' acts first (bounded: a long backlog is the background job's)
            self.bot.analyse_pending(scope_ids, limit=ANALYSE_FIRST)
        except ChorusError as exc:
            log.warning("could not analyse new messages before a digest: %s", exc, exc_info=True)
        return build_digest(self.store, scope_ids, member, window.since, window.until,
                            records=self.bot.records, config=self.config, exclude=exclude, show_all=show_all)

    def render(self, key: ScopeKey, digest: Digest, window: Window, *, where: str = "",
               footer: str = "") -> Rendered:
        return render(digest, tz=self.tz(key), where=where, since_note=window.note, footer=footer,
                      summaries=self.summaries(key, digest))

    def summaries(self, key: ScopeKey, digest: Digest) -> dict[str, str]:
        """Under the 'model' reply policy only: a checked one-sentence summary per group (memory.catchup.summary)."""
        if digest.quiet or self.bot.reply_policy() != "model" or self.bot.llm is None:
            return {}
        names = sorted({n for sid in self.bot.scope_ids(key) for p in self.store.roster(sid) for n in p.names()})
        return summarise(self.bot.llm, digest, known_names=names)

    def reply(self, key: ScopeKey, person_id: str, name: str, since_text: str = "", *, show_all: bool = False,
              exclude: tuple[int, ...] = (), where: str = "", now: float | None = None) -> Reply:
        """The member's digest as a private reply (the caller decides where it goes)."""
        if not self.bot.scope_ids(key):
            return Reply("I don't have any memory of this channel yet, so there is nothing to catch up on.",
                         ephemeral=True)
        window = self.window(key, person_id, since_text, now=now, exclude=exclude)
        digest = self.digest(key, self.member(key, person_id, name), window, show_all=show_all, exclude=exclude)
        shown = self.render(key, digest, window, where=where)
        log.info("catchup in %s:%s:%s for %s: %d line(s), %d more, %d message(s) read", key.platform,
                 key.workspace, key.channel, person_id, len(digest.lines), digest.more, digest.scanned)
        return to_reply(shown, digest, self.bot.settings.answer.max_chars if not show_all else 12_000)


def to_reply(shown: Rendered, digest: Digest, max_chars: int) -> Reply:
    """A rendered digest as a private ``Reply`` whose citations carry the links adapters render."""
    citations = [Citation(n, m.id, m.platform, m.workspace, m.channel, m.msg_id, m.author_name, m.ts,
                          m.text[:160]) for n, m in enumerate(shown.cited, 1)]
    return Reply(cut_for_chat(shown.text, max_chars), citations, ephemeral=True,
                 data={"catchup": digest.to_json(), "lines": len(digest.lines), "quiet": digest.quiet})
