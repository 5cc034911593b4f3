"""What one member missed in a channel (and its linked scopes) between two moments.

Material, in the order a digest shows it:
- decisions, plans and norms: the writer's GROUP records (a node of an update chain made in the window,
  shown with the node it replaced: old -> new); for messages the writer has not reached yet (after its
  watermark), the messages that state them (``memory.groupacts``), a change shown against the earlier
  statement it changes;
- who took on what (``tasks``), from the messages;
- questions to the member nobody answered, and other messages that name, address or reply to them.
Every line rests on live messages only: a deleted message is gone, an edited one is quoted as it reads
now; bot traffic and other bots' messages are never material, nor the member's own messages.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..db import marks
from ..ftsquery import match_phrase
from ..groupacts import GroupAct, classify_group_acts
from ..models import StoredMessage
from ..query.support import content_stems
from ..records import GROUP, GROUP_LAYERS, Record, Records
from ..store import Store, scopeindex, select_messages
from .members import Member
from .tasks import Handed, volunteers

KINDS = ("decision", "plan", "norm", "task", "question", "mention")
Classifier = Callable[[Sequence[StoredMessage], Mapping[int, Sequence[StoredMessage]] | None], list[GroupAct | None]]


@dataclass(frozen=True)
class CatchupConfig:
    """The digest's constants (``per_kind`` and ``min_score`` chosen leave-one-dataset-out, docs/catchup.md)."""

    max_lines: int = 12          # the "at most about 12 lines"
    per_kind: int = 2            # first pass: up to this many lines of each kind, so no kind crowds out the rest
    min_score: float = 0.5       # least GroupAct score for a message to state a decision, plan, norm or task
    max_scan: int = 20_000       # newest messages of the window read (a note says when the window held more)
    lookback: int = 200          # messages before the window searched for what a change replaces
    default_days: float = 7.0    # the window for a member who never posted


@dataclass
class DigestLine:
    """One line: what kind of news, the messages that state it, and (for a change) what it replaced."""

    kind: str
    message_ids: list[int]
    ts: float
    score: float
    origin: str  # "record" (a GROUP record), "message" (a message stating it), "track1" (names, replies, tasks)
    was_ids: list[int] = field(default_factory=list)
    record_id: int | None = None

    @property
    def cited(self) -> list[int]:
        return [*self.was_ids, *self.message_ids]


@dataclass
class Digest:
    """A member's catch-up: the lines shown, how many more there were, and every message cited."""

    member_id: str
    scope_ids: list[int]
    since: float
    until: float
    lines: list[DigestLine]
    more: int
    messages: dict[int, StoredMessage]
    scanned: int
    capped: bool

    @property
    def quiet(self) -> bool:
        return not self.lines

    def to_json(self) -> dict:
        return {"member": self.member_id, "since": self.since, "until": self.until, "more": self.more,
                "scanned": self.scanned, "capped": self.capped,
                "lines": [{"kind": ln.kind, "messages": self.platform_ids(ln.message_ids),
                           "was": self.platform_ids(ln.was_ids), "origin": ln.origin} for ln in self.lines]}

    def platform_ids(self, ids: Sequence[int]) -> list[str]:
        """The platform's ids of cited messages: what the member can see (store row ids stay inside)."""
        return [self.messages[i].msg_id for i in ids if i in self.messages]


# ---------------------------------------------------------------------- reading the store
def window_messages(store: Store, scope_ids: Sequence[int], since: float, until: float,
                    limit: int) -> tuple[list[StoredMessage], bool]:
    """Live chat messages (no bot traffic) in (since, until], oldest first, at most the newest ``limit``."""
    with store.read() as conn:
        found = select_messages(conn, f"WHERE m.scope_id IN ({marks(scope_ids)}) AND m.deleted = 0 AND "
                                "m.bot_traffic = 0 AND m.ts > ? AND m.ts <= ? ORDER BY m.ts DESC, m.id DESC LIMIT ?",
                                [*scope_ids, since, until, limit + 1])
    return found[:limit][::-1], len(found) > limit


def last_message_ts(store: Store, scope_ids: Sequence[int], person_id: str, *, before: float,
                    exclude: Sequence[int] = ()) -> float | None:
    """When the member last wrote in these scopes (before ``before``; ``exclude`` = the request itself)."""
    if not scope_ids:
        return None
    sql = (f"SELECT max(ts) FROM messages WHERE scope_id IN ({marks(scope_ids)}) AND author_id = ? AND deleted = 0 "
           "AND ts < ?")
    args: list = [*scope_ids, person_id, before]
    if exclude:
        sql += f" AND id NOT IN ({marks(exclude)})"
        args += list(exclude)
    with store.read() as conn:
        row = conn.execute(sql, args).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def _bots(store: Store, scope_ids: Sequence[int]) -> set[str]:
    with store.read() as conn:
        return {r[0] for r in conn.execute(f"SELECT person_id FROM people WHERE is_bot = 1 AND scope_id IN "
                                           f"({marks(scope_ids)})", list(scope_ids))}


def _member_msg_ids(store: Store, scope_ids: Sequence[int], person_id: str) -> set[str]:
    with store.read() as conn:
        return {r[0] for r in conn.execute(f"SELECT msg_id FROM messages WHERE scope_id IN ({marks(scope_ids)}) "
                                           "AND author_id = ? AND deleted = 0", [*scope_ids, person_id])}


def _watermarks(store: Store, scope_ids: Sequence[int]) -> dict[int, int]:
    with store.read() as conn:
        return {r[0]: r[1] for r in conn.execute(f"SELECT scope_id, watermark FROM writer_state WHERE scope_id IN "
                                                 f"({marks(scope_ids)})", list(scope_ids))}


def _lookback(store: Store, scope_ids: Sequence[int], since: float, n: int) -> list[Row]:
    with store.read() as conn:
        found = [Row._make(r) for r in conn.execute(
            f"SELECT id, scope_id, msg_id, author_id, ts, coalesce(edited_at, 0), session, reply_to FROM messages "
            f"WHERE scope_id IN ({marks(scope_ids)}) AND deleted = 0 AND bot_traffic = 0 AND ts <= ? "
            "ORDER BY ts DESC, id DESC LIMIT ?", [*scope_ids, since, n])]
    return found[::-1]


def record_kind(rec: Record) -> str | None:
    """The digest kind of a GROUP record; None for GROUP records that are not decisions, plans, norms or tasks.

    The writer files decisions, plans, norms and tasks under those utypes; older stores file every one
    of them as ``decision``, with norms in the ``group_insight`` layer.
    """
    if rec.utype in ("decision", "plan", "norm", "task"):
        return "norm" if rec.utype == "decision" and rec.layer == "group_insight" else rec.utype
    return None


def _group_nodes(store: Store, records: Records, scope_ids: Sequence[int], since: float,
                 until: float) -> list[Record]:
    """The newest active GROUP node of each update chain made in (since, until], with its sources."""
    with store.read() as conn:
        ids = [r[0] for r in conn.execute(
            f"SELECT max(id) FROM records WHERE scope_id IN ({marks(scope_ids)}) AND owner = ? AND layer IN "
            f"({marks(GROUP_LAYERS)}) AND status = 'active' AND ts > ? AND ts <= ? GROUP BY chain_id",
            [*scope_ids, GROUP, *GROUP_LAYERS, since, until])]
    return records.get(ids, with_sources=True)


# ---------------------------------------------------------------------- building
class Row(NamedTuple):
    """A window message without its text: the digest reads the text only of messages it may show.

    A named tuple, not a dataclass: a week of a busy channel is thousands of these per digest.
    """

    id: int
    scope_id: int
    msg_id: str
    author_id: str
    ts: float
    edited_at: float
    session: int
    reply_to: str | None


def _window_rows(store: Store, scope_ids: Sequence[int], since: float, until: float,
                 limit: int) -> tuple[list[Row], bool]:
    with store.read() as conn:
        found = [Row._make(r) for r in conn.execute(
            f"SELECT id, scope_id, msg_id, author_id, ts, coalesce(edited_at, 0), session, reply_to FROM messages "
            f"WHERE scope_id IN ({marks(scope_ids)}) AND deleted = 0 AND bot_traffic = 0 AND ts > ? AND ts <= ? "
            "ORDER BY ts DESC, id DESC LIMIT ?", [*scope_ids, since, until, limit + 1])]
    return found[:limit][::-1], len(found) > limit


def _naming(store: Store, scope_ids: Sequence[int], member: Member) -> set[int]:
    """Ids of messages whose words may name the member (FTS5; every hit is checked on its text after)."""
    phrases = [q for q in (match_phrase(n) for n in [*member.names, member.person_id]) if q]
    if not phrases:
        return set()
    query = "text: (" + " OR ".join(phrases) + ")"
    out: set[int] = set()
    with store.read() as conn:  # each scope has its own index (memory/store/scopeindex.py)
        for sid in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES, scope_ids):
            table = scopeindex.MESSAGES.table(sid)
            out |= {r[0] for r in conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (query,))}
    return out


def _replies_to(store: Store, scope_ids: Sequence[int], person_id: str, since: float, until: float) -> set[int]:
    """Ids of window messages that reply to (or sit in the thread of) one of the member's messages."""
    with store.read() as conn:
        return {r[0] for r in conn.execute(
            f"SELECT m.id FROM messages m WHERE m.scope_id IN ({marks(scope_ids)}) AND m.deleted = 0 AND "
            "m.ts > ? AND m.ts <= ? AND m.reply_to IS NOT NULL AND EXISTS (SELECT 1 FROM messages p WHERE "
            "p.scope_id = m.scope_id AND p.msg_id = m.reply_to AND p.author_id = ? AND p.deleted = 0)",
            [*scope_ids, since, until, person_id])}


def build_digest(store: Store, scope_ids: Sequence[int], member: Member, since: float, until: float, *,
                 records: Records | None = None, config: CatchupConfig = CatchupConfig(),
                 exclude: Sequence[int] = (), classify: Classifier = classify_group_acts,
                 show_all: bool = False) -> Digest:
    """The member's digest of (since, until] over ``scope_ids`` (the channel and the scopes linked to it)."""
    scope_ids = list(scope_ids)
    if not scope_ids:
        return Digest(member.person_id, [], since, until, [], 0, {}, 0, False)
    window, capped = _window_rows(store, scope_ids, since, until, config.max_scan)
    skip = set(exclude)
    bots = _bots(store, scope_ids)
    window = [m for m in window if m.id not in skip and m.author_id not in bots]
    own = [m for m in window if m.author_id == member.person_id]
    theirs = [m for m in window if m.author_id != member.person_id]
    lines: list[DigestLine] = []
    used: set[int] = set()
    texts = _Texts(store)

    # 1. The writer's GROUP records (and the node each replaced).
    covered_sources: set[int] = set()
    if records is not None:
        nodes = _group_nodes(store, records, scope_ids, since, until)
        prev = {r.id: r for r in records.get([n.prev_id for n in nodes if n.prev_id], with_sources=True)}
        live = texts.get({mid for n in nodes for mid in n.sources} | {mid for p in prev.values() for mid in p.sources})
        for node in nodes:
            covered_sources.update(node.sources)
            kind = record_kind(node)
            new = [mid for mid in node.sources if mid in live and mid not in skip]
            if kind is None or not new or all(live[mid].author_id in (member.person_id, *bots) for mid in new):
                continue
            old_node = prev.get(node.prev_id) if node.prev_id else None
            was = [mid for mid in (old_node.sources if old_node and old_node.status == "active" else [])
                   if mid in live and mid not in new]
            lines.append(DigestLine(kind, new, node.ts, 1.0, "record", was, node.id))
            used.update(new)

    # 2. Messages the writer has not reached: the messages that state decisions, plans, norms and tasks.
    marks_ = _watermarks(store, scope_ids)
    uncovered = [m for m in theirs if m.id > marks_.get(m.scope_id, 0) and m.id not in covered_sources]
    if uncovered:
        lines += _stated(store, scope_ids, since, uncovered, classify, config, used, texts)

    # 3. Who took on what, from the messages (any message not already a line).
    roster = _roster_members(store, scope_ids, bots)
    for m, took in zip(theirs, _tasks(store, theirs, roster, texts)):
        if took and m.id not in used:
            lines.append(DigestLine("task", [m.id], m.ts, 0.8, "track1"))
            used.add(m.id)

    # 4. Questions to the member nobody answered, and messages that name, address or reply to them.
    replies = _replies_to(store, scope_ids, member.person_id, since, until)
    maybe = (_naming(store, scope_ids, member) | replies) - used
    found = texts.get({m.id for m in theirs if m.id in maybe})
    for m in theirs:
        msg = found.get(m.id)
        if msg is None or not (m.id in replies or member.named_in(msg.text)):
            continue
        answered = any(o.ts > m.ts and (o.reply_to == m.msg_id or (o.session == m.session
                                                                   and o.scope_id == m.scope_id)) for o in own)
        kind = "question" if "?" in msg.text and not answered else "mention"
        lines.append(DigestLine(kind, [m.id], m.ts, 0.9 if kind == "question" else 0.6, "track1"))
        used.add(m.id)

    shown, more = select(lines, config, show_all=show_all)
    messages = texts.get({mid for ln in shown for mid in ln.cited})
    return Digest(member.person_id, scope_ids, since, until, shown, more, messages, len(window), capped)


class _Texts:
    """Live messages by id, each read from the store at most once per digest."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: dict[int, StoredMessage] = {}

    def get(self, ids: set[int] | Sequence[int]) -> dict[int, StoredMessage]:
        missing = sorted(i for i in ids if i not in self.known)
        for m in self.store.messages(missing) if missing else []:
            self.known[m.id] = m
        return {i: self.known[i] for i in ids if i in self.known}


def _roster_members(store: Store, scope_ids: Sequence[int], bots: set[str]) -> list[Member]:
    people: dict[str, list[str]] = {}
    for sid in scope_ids:
        for p in store.roster(sid):
            if p.person_id not in bots:
                people.setdefault(p.person_id, []).extend(p.names())
    return [Member(pid, names) for pid, names in people.items()]


def _counts(act: GroupAct, config: CatchupConfig) -> bool:
    """Whether an act is confident enough for a digest: scored high enough, or stated outright (a rule)."""
    return act.score >= config.min_score or act.basis != "classifier"


def _stated(store: Store, scope_ids: Sequence[int], since: float, uncovered: list[Row], classify: Classifier,
            config: CatchupConfig, used: set[int], texts: _Texts) -> list[DigestLine]:
    """Lines from messages that state a group act; a change replaces the line of what it changes."""
    acts = classified(store, uncovered, classify, texts)
    before = _lookback(store, scope_ids, since, config.lookback) if config.lookback else []
    earlier: list[tuple[StoredMessage, str]] = []  # statements a later change may replace, oldest first
    prior = [(r, act) for r, act in zip(before, classified(store, before, classify, texts))
             if act is not None and act.kind in ("decision", "plan", "norm") and _counts(act, config)]
    found = texts.get([r.id for r, _ in prior])
    earlier += [(found[r.id], act.kind) for r, act in prior if r.id in found]
    stating = texts.get([r.id for r, act in zip(uncovered, acts) if act is not None and _counts(act, config)])
    out: list[DigestLine] = []
    by_msg: dict[int, DigestLine] = {}
    for r, act in zip(uncovered, acts):
        m = stating.get(r.id)
        if act is None or m is None:
            continue
        if act.kind == "change":
            old = _changed(m, earlier)
            kind = old[1] if old else "plan"
            line = DigestLine(kind, [m.id], m.ts, act.score, "message", [old[0].id] if old else [])
            if old is not None:
                replaced = by_msg.pop(old[0].id, None)
                if replaced is not None:  # the change supersedes the line of what it changed
                    out.remove(replaced)
                    used.discard(old[0].id)
            earlier.append((m, kind))
        elif act.kind in ("decision", "plan", "norm", "task"):
            line = DigestLine(act.kind, [m.id], m.ts, act.score, "message")
            if act.kind != "task":
                earlier.append((m, act.kind))
        else:
            continue
        out.append(line)
        by_msg[m.id] = line
        used.add(m.id)
    return out


# What a message does for the group, and whether someone takes a job on in it, do not depend on who asks:
# every member's digest of a channel reuses them. Keyed by the message's edit time, so an edited message
# is read again (and the task cue by the roster's names too).
Key = tuple[str, int, float]
_ACTS: dict[Classifier, OrderedDict[Key, GroupAct | None]] = {}
_TASKS: OrderedDict[tuple[str, int, float, int], bool] = OrderedDict()
CACHE_SIZE = 200_000


def _key(store: Store, m: Row) -> Key:
    return (store.path, m.id, m.edited_at)


def _trim(cache: OrderedDict) -> None:
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


def classified(store: Store, messages: Sequence[Row], classify: Classifier,
               texts: _Texts) -> list[GroupAct | None]:
    """``classify`` over ``messages``, each message classified once while it stays unedited."""
    cache = _ACTS.setdefault(classify, OrderedDict())
    keys = [_key(store, m) for m in messages]
    todo = [i for i, k in enumerate(keys) if k not in cache]
    if todo:
        found = texts.get([messages[i].id for i in todo])
        todo = [i for i in todo if messages[i].id in found]
        acts = classify([found[messages[i].id] for i in todo], None)
        if len(acts) != len(todo):
            raise ValueError(f"the group-act classifier gave {len(acts)} answers for {len(todo)} messages")
        for i, act in zip(todo, acts):
            cache[keys[i]] = act
        _trim(cache)
    return [cache.get(k) for k in keys]


def _tasks(store: Store, rows: Sequence[Row], roster: list[Member], texts: _Texts) -> list[bool]:
    """Whether each message takes a job on or hands one to a named member (``tasks``)."""
    sig = hash(tuple(sorted((m.person_id, *m.names) for m in roster)))
    keys = [(*_key(store, r), sig) for r in rows]
    todo = [i for i, k in enumerate(keys) if k not in _TASKS]
    if todo:
        handed = Handed(roster)
        found = texts.get([rows[i].id for i in todo])
        for i in todo:
            m = found.get(rows[i].id)
            _TASKS[keys[i]] = m is not None and (volunteers(m.text) or handed(m.text) is not None)
        _trim(_TASKS)
    return [_TASKS.get(k, False) for k in keys]


def _changed(msg: StoredMessage, earlier: list[tuple[StoredMessage, str]]) -> tuple[StoredMessage, str] | None:
    """The latest earlier statement sharing the most content words with a change, if any shares one."""
    words = set(content_stems(msg.text))
    best: tuple[int, float, tuple[StoredMessage, str]] | None = None
    for m, kind in earlier:
        if m.ts > msg.ts or m.id == msg.id:
            continue
        shared = len(words & set(content_stems(m.text)))
        if shared and (best is None or (shared, m.ts) > best[:2]):
            best = (shared, m.ts, (m, kind))
    return best[2] if best else None


def select(lines: list[DigestLine], config: CatchupConfig, *, show_all: bool = False) -> tuple[list[DigestLine], int]:
    """The lines shown (grouped by kind, oldest first in a kind) and how many were left out.

    First pass: up to ``per_kind`` of each kind, best first; then the best of the rest up to ``max_lines``.
    """
    if show_all or len(lines) <= config.max_lines:
        chosen = list(lines)
    else:
        rank = sorted(lines, key=lambda ln: (-ln.score, -ln.ts))
        chosen = []
        for kind in KINDS:
            chosen += [ln for ln in rank if ln.kind == kind][:config.per_kind]
        chosen = chosen[:config.max_lines]
        for ln in rank:
            if len(chosen) >= config.max_lines:
                break
            if ln not in chosen:
                chosen.append(ln)
    chosen.sort(key=lambda ln: (KINDS.index(ln.kind), ln.ts))
    return chosen, len(lines) - len(chosen)
