"""``/timeline`` and ``/profile``: what memory holds about a topic or a person, cited, in chat form.

Both read right before the writer has run (no records yet: the messages are shown, marked as
messages) and after it (records, each citing the message it rests on; the messages the writer
has not reached yet are named as such). A record that quotes its message is shown in quotes
with the speaker's name, so "I'll book the table" under Maya never reads as the bot's own words.
"""
from __future__ import annotations

from collections.abc import Sequence

from memory.models import StoredMessage
from memory.people import People
from memory.records import GROUP, GROUP_LAYERS, PERSON_LAYERS, Record, Records
from memory.search import Searcher
from memory.store import Person, Store
from memory.timefmt import stamp
from memory.topic import topic_material, waiting_count, watermarks

from .replies import Citation, Reply, cut_for_chat

MAX_LINES = 15  # lines per section: a chat reply, not an export
UTYPE_WORDS = {"decision": "decision", "plan": "plan", "task": "task", "norm": "rule", "stance": "view",
               "relation": "relation"}
LAYER_WORDS = {"group_insight": "rule or habit"}


class Cites:
    """Numbers the messages a reply cites, once each, in the order they are first cited."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.items: list[Citation] = []
        self._n: dict[int, int] = {}

    def message(self, m: StoredMessage) -> str:
        if m.id not in self._n:
            self._n[m.id] = len(self.items) + 1
            self.items.append(Citation(self._n[m.id], m.id, m.platform, m.workspace, m.channel, m.msg_id,
                                       m.author_name, m.ts, _excerpt(m.text)))
        return f"[{self._n[m.id]}]"

    def platform_ids(self, row_ids: Sequence[int]) -> list[str]:
        """The platform ids of cited messages among ``row_ids`` (what the asker can see of them)."""
        by_row = {c.message_id: c.msg_id for c in self.items}
        return [by_row[i] for i in row_ids if i in by_row]

    def record(self, rec: Record, by_id: dict[int, StoredMessage]) -> str:
        return " ".join(self.message(by_id[i]) for i in rec.sources if i in by_id)


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _sources(store: Store, recs: Sequence[Record]) -> dict[int, StoredMessage]:
    return {m.id: m for m in store.messages(sorted({i for r in recs for i in r.sources}))}


def _said(rec: Record, by_id: dict[int, StoredMessage], names: dict[str, str]) -> str:
    """The record's text: in quotes after its speaker when it is their message's own words."""
    src = [by_id[i] for i in rec.sources if i in by_id]
    text = " ".join(rec.content.split())
    if src and text and text in " ".join(src[0].text.split()):
        return f"{names.get(rec.source, src[0].author_name)}: “{_excerpt(text, 240)}”"
    return _excerpt(text, 240)


def _kind(rec: Record) -> str:
    return LAYER_WORDS.get(rec.layer) or UTYPE_WORDS.get(rec.utype, "")


def _tags(rec: Record, names: dict[str, str]) -> list[str]:
    """What kind of record it is and, when it is not the speaker's own, whom it is about."""
    kind = _kind(rec)
    if rec.owner == GROUP:
        return [f"group {kind}".strip()]
    return [f"about {names.get(rec.owner, rec.owner)}" if rec.owner != rec.source else "", kind]


def _message_line(m: StoredMessage, cites: Cites) -> str:
    return f"- {stamp(m.ts)} {m.author_name}: “{_excerpt(m.text, 240)}” {cites.message(m)}"


def _not_read(n: int, whose: str = "this channel's") -> str:
    return f"the memory writer has not read {n} of {whose} messages yet" if n else ""


def timeline_reply(store: Store, searcher: Searcher, records: Records, scope_ids: list[int], topic: str,
                   names: dict[str, str], max_chars: int) -> Reply:
    """How a topic developed: its records' chains in time order, else the messages about it."""
    label = topic.strip()[:60]
    got = topic_material(store, searcher, records, scope_ids, topic)
    cites = Cites(store)
    lines: list[str] = []
    if got.chains:
        by_id = _sources(store, [r for c in got.chains for r in c])
        lines.append(f"Timeline for {label} (memory records, oldest first):")
        for chain in got.chains:
            for n, r in enumerate(chain):
                step = ("was" if n < len(chain) - 1 else "now") if len(chain) > 1 else ""
                tags = ", ".join(t for t in (*_tags(r, names), step) if t)
                lines.append(f"- {stamp(r.ts)[:10]} {_said(r, by_id, names)}{f' ({tags})' if tags else ''} "
                             f"{cites.record(r, by_id)}".rstrip())
        # A message the analysis pass already filed is on a record line above; list it once.
        filed = {i for chain in got.chains for r in chain for i in r.sources}
        unread = [m for m in got.messages if m.id not in filed]
        if unread:
            lines.append("Not in memory yet (the writer has not read these messages):")
            lines += [_message_line(m, cites) for m in unread[:MAX_LINES]]
    elif got.messages or got.read_messages:
        if got.messages and not got.read_messages:
            lines.append(f"No memory records about {label!r} are written yet: {_not_read(got.waiting)}. "
                         "What the messages say, in time order:")
        elif got.messages:
            lines.append(f"I have no memory records about {label!r}, and {_not_read(got.waiting)}. "
                         "What the messages say, in time order:")
        else:
            lines.append(f"I have no memory records about {label!r}. What the messages say, in time order:")
        shown = sorted(got.messages + got.read_messages, key=lambda m: (m.ts, m.id))
        lines += [_message_line(m, cites) for m in shown[:MAX_LINES]]
    else:
        lines.append(f"Nothing here is about {label!r}: no memory records and no messages mention it."
                     + (f" ({_not_read(got.waiting).capitalize()}.)" if got.waiting else ""))
    # Reply data names messages by their platform ids, never store row ids: a row id counts what other
    # channels hold, so it would tell the asker about scopes they cannot see.
    return Reply(cut_for_chat("\n".join(lines), max_chars), cites.items,
                 data={"chains": [[cites.platform_ids(r.sources) for r in c] for c in got.chains],
                       "messages": [m.msg_id for m in got.messages + got.read_messages]})


def profile_reply(store: Store, records: Records, scope_ids: list[int], roster: Sequence[Person], pid: str,
                  max_chars: int) -> Reply:
    """A person's records (their own, what others said about them, group records they voiced), cited."""
    names = {p.person_id: p.display_name for p in roster}
    name = names.get(pid, pid)
    # Their own records, and the group's tasks they are to do (the group state files a task under its doer).
    own = records.heads(scope_ids, owners=[pid], layers=[*PERSON_LAYERS, *GROUP_LAYERS])
    voiced = [r for r in records.heads(scope_ids, owners=[GROUP], layers=list(GROUP_LAYERS)) if r.source == pid]
    full = records.get([r.id for r in own + voiced], with_sources=True)
    by_self = sorted((r for r in full if r.owner == pid and r.source == pid), key=lambda r: (r.ts, r.id))
    by_others = sorted((r for r in full if r.owner == pid and r.source != pid), key=lambda r: (r.ts, r.id))
    group = sorted((r for r in full if r.owner == GROUP), key=lambda r: (r.ts, r.id))
    by_id = _sources(store, full)
    cites = Cites(store)
    marks = watermarks(store, scope_ids)
    waiting = waiting_count(store, marks, author_id=pid)

    def rec_line(r: Record, *, show_speaker: bool = False) -> str:
        kind = _tags(r, names)[-1] if r.owner != GROUP else _kind(r)
        text = _said(r, by_id, names)
        if show_speaker and not text.startswith(f"{names.get(r.source, r.source)}:"):
            text = f"{names.get(r.source, r.source)}: {text}"
        return f"- {text} ({', '.join(x for x in (kind, stamp(r.ts)[:10]) if x)}) {cites.record(r, by_id)}".rstrip()

    lines: list[str] = []
    if full:
        lines.append(f"What I remember about {name}:")
        lines += [rec_line(r) for r in by_self[-MAX_LINES:]] or [f"(no record of what {name} said about themself)"]
        if by_others:
            lines.append("What others said about them:")
            lines += [rec_line(r, show_speaker=True) for r in by_others[-MAX_LINES:]]
        if group:
            lines.append("Group plans, decisions and rules they voiced:")
            lines += [rec_line(r) for r in group[-MAX_LINES:]]
        if waiting:
            lines.append(f"({_not_read(waiting, 'their').capitalize()}.)")
    else:
        theirs = _their_messages(store, scope_ids, pid, marks)
        if waiting:
            lines.append(f"No memory records about {name} are written yet: {_not_read(waiting, 'their')}. "
                         "Their messages, in time order:")
        elif theirs:
            lines.append(f"I have no memory records about {name}: the writer read their messages and kept "
                         "nothing about them. Their messages, in time order:")
        else:
            lines.append(f"I have no memory records about {name}, and no messages of theirs here.")
        lines += [_message_line(m, cites) for m in theirs]
        naming = _naming_messages(store, scope_ids, roster, pid)
        if naming:
            lines.append("Messages of others that name them:")
            lines += [_message_line(m, cites) for m in naming]
    return Reply(cut_for_chat("\n".join(lines), max_chars), cites.items,
                 data={"person": pid, "records": [cites.platform_ids(r.sources) for r in own],
                       "group_records": [cites.platform_ids(r.sources) for r in voiced]})


def _their_messages(store: Store, scope_ids: list[int], pid: str, marks: dict[int, int]) -> list[StoredMessage]:
    """The person's latest chat messages (not bot traffic), oldest first, at most ``MAX_LINES``."""
    with store.read() as conn:
        ids = [r[0] for sid in scope_ids for r in conn.execute(
            "SELECT id FROM messages WHERE scope_id = ? AND author_id = ? AND deleted = 0 AND bot_traffic = 0 "
            "ORDER BY id DESC LIMIT ?", (sid, pid, MAX_LINES))]
    return sorted(store.messages(ids), key=lambda m: (m.ts, m.id))[-MAX_LINES:]


def _naming_messages(store: Store, scope_ids: list[int], roster: Sequence[Person], pid: str,
                     scan: int = 500) -> list[StoredMessage]:
    """Others' recent messages that name, alias or @mention the person (the writer's own people-finding)."""
    people = People(roster)
    with store.read() as conn:
        ids = [r[0] for sid in scope_ids for r in conn.execute(
            "SELECT id FROM messages WHERE scope_id = ? AND author_id != ? AND deleted = 0 AND bot_traffic = 0 "
            "ORDER BY id DESC LIMIT ?", (sid, pid, scan))]
    found = [m for m in store.messages(ids) if pid in people.named(m.text)]
    return sorted(found, key=lambda m: (m.ts, m.id))[-MAX_LINES:]
