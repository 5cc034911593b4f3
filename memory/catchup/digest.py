"""What one member missed in a channel (and its linked scopes) between two moments.

Material, in the order a digest shows it, all read from what the analysis pass stored at ingest:
- the group's state (``memory.groupstate``): each decision, plan, change, rule and task chain with a node
  made in the window, headed by what its newest message does (a line's heading is its act) and shown with
  the node before it, old -> new, only along that chain;
- questions put to the member that nobody answered, and messages that ask or tell the member something
  (their act is a question, a task, a decision, a plan or news, and they name, address or reply to them);
  chatter that merely names them is left out.
Every line rests on live messages only: a deleted message is gone, an edited one is quoted as it reads
now; bot traffic and other bots' messages are never material, nor the member's own messages.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..analysis.types import Analysis
from ..db import marks
from ..ftsquery import match_phrase
from ..groupstate import KIND_OF_UTYPE, LAYER, MODEL_PREFIX
from ..models import StoredMessage
from ..records import Record, Records
from ..store import Store, scopeindex, select_messages
from .backing import backs_change, confident, substantive
from .members import Member

KINDS = ("decision", "change", "plan", "norm", "task", "question", "mention")
# A line's heading from the act of the message it rests on (a rule is a norm to the reader).
KIND_OF_ACT = {"decision": "decision", "change": "change", "plan": "plan", "rule": "norm", "task": "task"}
# What a message that names the member does for them, and how much it matters in a 12-line digest.
TELLS = {"question": 0.85, "task": 0.8, "decision": 0.75, "plan": 0.75, "change": 0.75, "rule": 0.7, "news": 0.6}


@dataclass(frozen=True)
class CatchupConfig:
    """The digest's constants (``per_kind`` chosen leave-one-dataset-out, docs/catchup.md)."""

    max_lines: int = 12          # the "at most about 12 lines"
    per_kind: int = 2            # first pass: up to this many lines of each kind, so no kind crowds out the rest
    max_scan: int = 20_000       # newest messages of the window read (a note says when the window held more)
    default_days: float = 7.0    # the window for a member who never posted


@dataclass
class DigestLine:
    """One line: what kind of news, the messages that state it, and (for a change) what it replaced."""

    kind: str
    message_ids: list[int]
    ts: float
    score: float
    origin: str  # "state" (a state record of the analysis pass or the writer), "message" (a message to them)
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


def record_kind(rec: Record, act: Analysis | None = None) -> str | None:
    """The heading of a state record's line: the act of the message it rests on when the analysis stored one,
    else its utype (records a writer filed). None for records that are no decision, plan, rule or task."""
    if act is not None and act.act.kind in KIND_OF_ACT:
        return KIND_OF_ACT[act.act.kind]
    kind = KIND_OF_UTYPE.get(rec.utype)
    return None if kind is None else KIND_OF_ACT[kind]


def _state_nodes(store: Store, records: Records, scope_ids: Sequence[int], since: float,
                 until: float) -> list[Record]:
    """The newest active node of each state chain made in (since, until], with its sources."""
    with store.read() as conn:
        ids = [r[0] for r in conn.execute(
            f"SELECT max(id) FROM records WHERE scope_id IN ({marks(scope_ids)}) AND layer = ? AND status = 'active' "
            "AND ts > ? AND ts <= ? GROUP BY chain_id", [*scope_ids, LAYER, since, until])]
    return records.get(ids, with_sources=True)


def _before_window(records: Records, node: Record, since: float) -> Record | None:
    """The chain's node the member last knew: the newest active node older than the window, if any; else the
    node just before this one."""
    chain = [r for r in records.chain(node.id) if r.status == "active" and r.id < node.id]
    known = [r for r in chain if r.ts <= since]
    pick = known[-1] if known else (chain[-1] if chain else None)
    return records.get([pick.id], with_sources=True)[0] if pick else None


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
                 exclude: Sequence[int] = (), show_all: bool = False) -> Digest:
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
    acts = store.analyses([m.id for m in theirs])
    lines: list[DigestLine] = []
    used: set[int] = set()
    texts = _Texts(store)

    # 1. The group's state: a line per chain with a node made in the window, headed by its act; old -> new.
    if records is not None:
        for node in _state_nodes(store, records, scope_ids, since, until):
            live = texts.get(node.sources)
            new = [mid for mid in node.sources if mid in live and mid not in skip]
            if not new or all(live[mid].author_id in (member.person_id, *bots) for mid in new):
                continue
            main = _main(node, new, live)
            found = store.analyses(set(new) - set(acts)) if set(new) - set(acts) else {}
            seen = {**found, **{mid: acts[mid] for mid in new if mid in acts}}
            kind = record_kind(node, seen.get(main))
            if kind is None or kind in ("decision", "plan", "norm") and not confident(seen.get(main)):
                continue  # the act model was not sure enough to tell a member the group settled this
            new = [main] + [mid for mid in new if mid != main and substantive(live[mid], seen.get(mid))]
            old = _before_window(records, node, since)
            was: list[int] = []
            if old is not None:
                known = texts.get(old.sources)
                before = [mid for mid in old.sources if mid not in new and mid in known]
                if before:
                    old_main = _main(old, before, known)
                    both = store.analyses([main, old_main])
                    by_writer = not (node.writer_model or "").startswith(f"{MODEL_PREFIX}/")
                    if backs_change(both.get(main), both.get(old_main), old_main, live[main].text,
                                    known[old_main].text, verified_chain=by_writer):
                        was = [old_main]
            if kind == "change" and old is None:
                kind = record_kind(node) or "plan"  # a change of nothing the state holds reads as what it is
            score = 1.0 if kind != "task" or node.owner == member.person_id else 0.9
            lines.append(DigestLine(kind, new, node.ts, score, "state", was, node.id))
            used.update(new)

    # 2. What asks or tells the member something: questions to them nobody answered, then the messages that
    #    name, address or reply to them and do something (a task, a decision, news); chatter is left out.
    replies = _replies_to(store, scope_ids, member.person_id, since, until)
    asked = {m.id for m in theirs if (a := acts.get(m.id)) is not None and a.act.kind == "question"
             and a.act.owner == member.person_id}
    maybe = (_naming(store, scope_ids, member) | replies | asked) - used
    wanted = texts.get({m.id for m in theirs if m.id in maybe})
    for m in theirs:
        msg = wanted.get(m.id)
        if msg is None:
            continue
        a = acts.get(m.id)
        act = a.act.kind if a is not None else None
        if not (m.id in asked or m.id in replies or member.named_in(msg.text)) or act == "chatter":
            continue
        answered = any(o.ts > m.ts and (o.reply_to == m.msg_id or (o.session == m.session
                                                                   and o.scope_id == m.scope_id)) for o in own)
        if act == "question" or (act is None and "?" in msg.text):
            if answered:
                continue
            lines.append(DigestLine("question", [m.id], m.ts, TELLS["question"] + 0.1 * (m.id in asked),
                                    "message"))
        else:
            lines.append(DigestLine("mention", [m.id], m.ts, TELLS.get(act or "", 0.4), "message"))
        used.add(m.id)

    shown, more = select(lines, config, show_all=show_all)
    messages = texts.get({mid for ln in shown for mid in ln.cited})
    return Digest(member.person_id, scope_ids, since, until, shown, more, messages, len(window), capped)


def _main(node: Record, ids: Sequence[int], live: dict[int, StoredMessage]) -> int:
    """The message a state node quotes (the one whose words it holds), else its first live source."""
    same = [mid for mid in ids if " ".join(live[mid].text.split()) == " ".join(node.content.split())]
    return same[0] if same else ids[0]


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
