"""``chorus eval catchup``: how much of what a returning member should be told their digest tells them.

Two sets, scored the same way:
- our catch-up set (``tests/data/catchup``, written blind): per chat a member, a cutoff session and the
  gold list (decisions and their changes, plans, norms, tasks, messages to or about the member);
- SocialMemBench: the evidence anchors of Q2 (decisions), Q6 (norms) and Q8 (change over time) in
  session 3 or later, for a digest since session 3 to the member who says least from then on.

Per chat: gold recall within the digest (an item counts when a shown line cites one of its messages;
a change also counts strictly when the earlier message it changes is cited with it), the digest's
lines and characters, the share of lines whose citations support them (the reply check,
``memory.query.support.check_sentence``), and two baselines of the same length from the same store:
the last N messages, and BM25's top N for "decided plan rule" plus the member's names.
The writer is not run: the store is embedded and read by the analysis pass with the shipped models, as the
bot does at ingest, so decisions, plans, changes, rules and tasks come from the group state it files (the
embedded-model case). On chats whose messages carry act labels (the long labelled sets), two more figures:
the share of shown lines whose heading is the gold item's kind, and the "was -> now" lines whose two messages
the labels put under different topics (there should be none).
"""
from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import shipped_models
from memory.catchup.digest import CatchupConfig, build_digest
from memory.catchup.members import Member
from memory.catchup.render import render
from memory.datasets.base import Conversation
from memory.datasets.socialmem import load_network
from memory.embeddings.base import Embedder
from memory.errors import DatasetError
from memory.ftsquery import match_any
from memory.query.support import check_sentence
from memory.records import Records
from memory.store import Store, scopeindex, select_messages

from .report import markdown_table, mean

SMB_CATEGORIES = {"Q2": "decision", "Q6": "norm", "Q8": "change"}
SMB_SINCE_SESSION = 3
BASELINE_QUERY = "decided decision plan rule"
SHIPPED = CatchupConfig()
# The constant the leave-one-dataset-out sweep chooses between (docs/catchup.md).
GRID_PER_KIND = (2, 3, 4)
# Gold kinds as a digest heads them (the labelled sets call a rule a norm already).
HEADING_OF_GOLD = {"decision": "decision", "plan": "plan", "change": "change", "norm": "norm", "task": "task",
                   "question": "question", "mention": "mention"}


@dataclass
class Gold:
    kind: str
    turn_ids: list[str]
    changes: str | None = None


@dataclass
class Case:
    """One chat ready to score: its store, the member, the window and the gold items."""

    name: str
    store: Store
    scope_ids: list[int]
    member: Member
    since: float
    until: float
    gold: list[Gold]
    names: list[str] = field(default_factory=list)
    records: Records | None = None
    topics: dict[str, str] = field(default_factory=dict)  # turn id -> the labelled act's topic (labelled sets)


def _since_of(conv: Conversation, session_index: int) -> float:
    first = [m.ts for m in conv.messages if (m.session_hint or 0) >= session_index]
    if not first:
        raise DatasetError(f"{conv.id}: no session {session_index} to start the catch-up at")
    return min(first) - 0.001


def _open(conv: Conversation, folder: Path, embedder: Embedder | None,
          models: tuple | None = None) -> tuple[Store, list[int], Records]:
    """The chat in a fresh store, embedded and analysed as the bot does it at ingest (with the shipped act and
    link models, or ``models``)."""
    store = Store(folder / f"{len(list(folder.iterdir()))}.db", embedder=embedder, idle_gap_s=3600)
    store.ingest(conv.messages, embed=embedder is not None)
    records = Records(store)
    acts, links = models or shipped_models()
    AnalysisPass(store, records, acts, links).run()
    return store, [s.id for s in store.scopes()], records


def _member(store: Store, scope_ids: list[int], person_id: str) -> Member:
    names = [n for sid in scope_ids for p in store.roster(sid) if p.person_id == person_id for n in p.names()]
    return Member(person_id, names or [person_id])


def _topics(raw: dict) -> dict[str, str]:
    """Turn id -> labelled topic, for chats whose turns carry act labels."""
    return {str(t["turn"]): str(t["act"]["topic"]) for s in raw.get("sessions", []) for t in s.get("turns", [])
            if isinstance(t.get("act"), dict) and t["act"].get("topic")}


def own_cases(folder: str | Path, work: Path, embedder: Embedder | None = None,
              models: tuple | None = None) -> list[Case]:
    """Our catch-up set: every ``*.json`` with a ``catchup`` block."""
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        raise DatasetError(f"{folder}: no catch-up chats (*.json)")
    cases = []
    for path in files:
        raw = json.loads(path.read_text("utf-8"))
        block = raw.get("catchup")
        if not isinstance(block, dict):
            raise DatasetError(f"{path}: no 'catchup' block")
        conv = load_network(path)
        store, sids, records = _open(conv, work, embedder, models)
        since = _since_of(conv, int(block["since_session_index"]))
        gold = [Gold(g["kind"], [str(t) for t in g["turn_ids"]], g.get("changes_turn_id")) for g in block["gold"]]
        cases.append(Case(path.stem, store, sids, _member(store, sids, str(block["member"])), since,
                          max(m.ts for m in conv.messages), gold, records=records, topics=_topics(raw)))
    return cases


def smb_cases(folder: str | Path, work: Path, embedder: Embedder | None = None,
              models: tuple | None = None) -> list[Case]:
    """SocialMemBench: Q2/Q6/Q8 anchors from session 3 on, for the member who says least from then on."""
    cases = []
    for path in sorted(Path(folder).glob("*.json")):
        raw = json.loads(path.read_text("utf-8"))
        conv = load_network(path)
        gold = []
        for q in raw.get("qa_pairs", []):
            kind = SMB_CATEGORIES.get(str(q.get("category")))
            for a in (q.get("evidence_anchors") or []) if kind else []:
                if int(a.get("session_index") or 0) >= SMB_SINCE_SESSION:
                    gold.append(Gold(kind or "", [str(a["turn_id"])]))
        if not gold:
            continue
        store, sids, records = _open(conv, work, embedder, models)
        since = _since_of(conv, SMB_SINCE_SESSION)
        later = [m for m in conv.messages if m.ts > since]
        counts = {a: sum(m.author_id == a for m in later) for a in {m.author_id for m in conv.messages}}
        member = min(sorted(counts), key=lambda a: counts[a])
        cases.append(Case(path.stem, store, sids, _member(store, sids, member), since,
                          max(m.ts for m in conv.messages), gold, records=records))
    return cases


# ---------------------------------------------------------------------- scoring
def _recall(gold: Sequence[Gold], cited: set[str]) -> tuple[float, float]:
    """(share of items one of whose messages is cited, share of changes cited with what they change)."""
    if not gold:
        return 0.0, 0.0
    hit = [any(t in cited for t in g.turn_ids) for g in gold]
    changes = [g for g in gold if g.changes]
    strict = [any(t in cited for t in g.turn_ids) and g.changes in cited for g in changes]
    return sum(hit) / len(gold), (sum(strict) / len(changes) if changes else float("nan"))


def _baseline_last(case: Case, n: int) -> set[str]:
    with case.store.read() as conn:
        rows = select_messages(conn, f"WHERE m.scope_id IN ({','.join('?' * len(case.scope_ids))}) AND m.deleted = 0 "
                               "AND m.ts > ? AND m.ts <= ? AND m.author_id != ? ORDER BY m.ts DESC LIMIT ?",
                               [*case.scope_ids, case.since, case.until, case.member.person_id, n])
    return {m.msg_id for m in rows}


def _baseline_bm25(case: Case, n: int) -> set[str]:
    query = match_any(" ".join([BASELINE_QUERY, *case.member.names]))
    if not query or n <= 0:
        return set()
    found: list[tuple[float, int]] = []
    with case.store.read() as conn:  # each scope has its own index (memory/store/scopeindex.py)
        for sid in scopeindex.indexed_scopes(conn, scopeindex.MESSAGES, case.scope_ids):
            t = scopeindex.MESSAGES.table(sid)
            found += conn.execute(
                f"SELECT bm25({t}), f.rowid FROM {t} f JOIN messages m ON m.id = f.rowid WHERE {t} MATCH ? "
                f"AND m.ts > ? AND m.ts <= ? AND m.author_id != ? ORDER BY bm25({t}) LIMIT ?",
                (query, case.since, case.until, case.member.person_id, n)).fetchall()
    ids = [i for _, i in sorted(found)[:n]]
    return {m.msg_id for m in case.store.messages(ids)}


def _headings(case: Case, lines: list[tuple[str, set[str]]]) -> tuple[int, int]:
    """(lines that cite a gold item's message, those among them headed by the item's kind)."""
    matched = right = 0
    for kind, cited in lines:
        items = [g for g in case.gold if set(g.turn_ids) & cited]
        if items:
            matched += 1
            right += any(HEADING_OF_GOLD.get(g.kind) == kind for g in items)
    return matched, right


def _cross_topic(case: Case, pairs: list[tuple[list[str], list[str]]]) -> int:
    """'was -> now' lines whose old and new messages the labels put under different topics."""
    bad = 0
    for was, now in pairs:
        old = {case.topics[t] for t in was if t in case.topics}
        new = {case.topics[t] for t in now if t in case.topics}
        bad += bool(old and new and not old & new)
    return bad


def score_case(case: Case, config: CatchupConfig) -> dict:
    started = time.perf_counter()
    digest = build_digest(case.store, case.scope_ids, case.member, case.since, case.until, config=config,
                          records=case.records)
    ms = (time.perf_counter() - started) * 1000
    shown = render(digest)
    ids = {mid: m.msg_id for mid, m in digest.messages.items()}
    cited = {ids[mid] for ln in digest.lines for mid in ln.cited if mid in ids}
    recall, strict = _recall(case.gold, cited)
    matched, right = _headings(case, [(ln.kind, {ids[m] for m in ln.cited if m in ids}) for ln in digest.lines])
    was_now = [([ids[m] for m in ln.was_ids if m in ids], [ids[m] for m in ln.message_ids if m in ids])
               for ln in digest.lines if ln.was_ids]
    names = sorted({n for sid in case.scope_ids for p in case.store.roster(sid) for n in p.names()})
    supported = 0
    for body, numbers in shown.lines:
        texts = {n: f"{shown.cited[n - 1].author_name}: {shown.cited[n - 1].text}" for n in numbers}
        supported += check_sentence(body, texts, known_names=names).ok
    n = len(digest.lines)
    last, bm25 = _recall(case.gold, _baseline_last(case, n))[0], _recall(case.gold, _baseline_bm25(case, n))[0]
    last12 = _recall(case.gold, _baseline_last(case, config.max_lines))[0]
    bm12 = _recall(case.gold, _baseline_bm25(case, config.max_lines))[0]
    return {"chat": case.name, "member": case.member.person_id, "gold": len(case.gold), "recall": recall,
            "change_strict": strict, "lines": n, "more": digest.more, "chars": len(shown.text),
            "supported": supported / n if n else 1.0, "last_n": last, "bm25_n": bm25, "last_12": last12,
            "bm25_12": bm12, "ms": ms, "matched_lines": matched, "right_heading": right,
            "was_now": len(was_now), "cross_topic": _cross_topic(case, was_now) if case.topics else None,
            "by_kind": {k: _recall([g for g in case.gold if g.kind == k], cited)[0]
                        for k in sorted({g.kind for g in case.gold})}}


def summarise(rows: list[dict]) -> dict:
    strict = [r["change_strict"] for r in rows if r["change_strict"] == r["change_strict"]]
    return {"chats": len(rows), "gold": sum(r["gold"] for r in rows),
            "recall": mean([r["recall"] for r in rows]), "change_strict": mean(strict) if strict else None,
            "lines": mean([r["lines"] for r in rows]), "max_lines": max((r["lines"] for r in rows), default=0),
            "chars": mean([r["chars"] for r in rows]), "supported": mean([r["supported"] for r in rows]),
            "last_n": mean([r["last_n"] for r in rows]), "bm25_n": mean([r["bm25_n"] for r in rows]),
            "last_12": mean([r["last_12"] for r in rows]), "bm25_12": mean([r["bm25_12"] for r in rows]),
            "right_heading": (sum(r["right_heading"] for r in rows) / max(1, sum(r["matched_lines"] for r in rows))),
            "was_now": sum(r["was_now"] for r in rows),
            "cross_topic": (None if any(r["cross_topic"] is None for r in rows)
                            else sum(r["cross_topic"] for r in rows))}


def configs(base: CatchupConfig) -> list[CatchupConfig]:
    return [replace(base, per_kind=p) for p in GRID_PER_KIND]


def evaluate_catchup(own: str | Path | None, smb: str | Path | None, *, embedder: Embedder | None = None,
                     config: CatchupConfig = SHIPPED, lodo: bool = False, models: tuple | None = None) -> dict:
    """Score the shipped constants on both sets; with ``lodo`` also choose them on one set, score the other.
    ``models``: the act and link models the analysis pass reads the chats with (default: the shipped ones)."""
    with tempfile.TemporaryDirectory(prefix="chorus-catchup-") as tmp:
        sets: dict[str, list[Case]] = {}
        if own:
            (Path(tmp) / "own").mkdir()
            sets["own"] = own_cases(own, Path(tmp) / "own", embedder, models)
        if smb:
            (Path(tmp) / "smb").mkdir()
            sets["socialmem"] = smb_cases(smb, Path(tmp) / "smb", embedder, models)
        try:
            out: dict = {"config": {"per_kind": config.per_kind, "max_lines": config.max_lines}, "sets": {}}
            for name, cases in sets.items():
                rows = [score_case(c, config) for c in cases]
                out["sets"][name] = {"summary": summarise(rows), "chats": rows}
            if lodo and len(sets) == 2:
                out["lodo"] = _lodo(sets, config)
            return out
        finally:
            for cases in sets.values():
                for c in cases:
                    c.store.close()


def _lodo(sets: dict[str, list[Case]], base: CatchupConfig) -> dict:
    """For each set: the grid point best on the other set (mean recall, ties to the first), scored here."""
    table = {name: {c.per_kind: summarise([score_case(k, c) for k in cases])["recall"]
                    for c in configs(base)} for name, cases in sets.items()}
    out = {}
    for held, other in (("own", "socialmem"), ("socialmem", "own")):
        best = max(table[other], key=lambda k: table[other][k])
        out[held] = {"chosen_on": other, "per_kind": best, "recall_there": table[other][best],
                     "recall_here": table[held][best]}
    out["grid"] = {name: {str(k): v for k, v in t.items()} for name, t in table.items()}
    return out


def to_markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [f"Catch-up digest (per_kind {cfg['per_kind']}, at most {cfg['max_lines']} lines)", ""]
    head = ["set", "chats", "gold", "recall %", "changes strict %", "lines", "max lines", "chars", "supported %",
            "right heading %", "was->now lines", "across topics", "last-N %", "BM25-N %", "last-12 %", "BM25-12 %"]
    rows = []
    for name, block in report["sets"].items():
        s = block["summary"]
        strict = "–" if s["change_strict"] is None else 100 * s["change_strict"]
        rows.append([name, s["chats"], s["gold"], 100 * s["recall"], strict, s["lines"],
                     s["max_lines"], s["chars"], 100 * s["supported"], 100 * s["right_heading"], s["was_now"],
                     "–" if s["cross_topic"] is None else s["cross_topic"], 100 * s["last_n"], 100 * s["bm25_n"],
                     100 * s["last_12"], 100 * s["bm25_12"]])
    lines.append(markdown_table(head, rows))
    for name, block in report["sets"].items():
        lines += ["", f"{name}, per chat:", ""]
        lines.append(markdown_table(["chat", "member", "gold", "recall %", "lines", "more", "chars", "supported %",
                                     "last-N %", "BM25-N %", "by kind %", "ms"],
                                    [[r["chat"], r["member"], r["gold"], 100 * r["recall"], r["lines"], r["more"],
                                      r["chars"], 100 * r["supported"], 100 * r["last_n"], 100 * r["bm25_n"],
                                      ", ".join(f"{k} {100 * v:.0f}" for k, v in r["by_kind"].items()),
                                      r["ms"]] for r in block["chats"]]))
    if "lodo" in report:
        lines += ["", "Leave one dataset out (constants chosen on the other set):", ""]
        lines.append(markdown_table(["held out", "chosen on", "per_kind", "recall there %", "recall held out %"],
                                    [[k, v["chosen_on"], v["per_kind"], 100 * v["recall_there"],
                                      100 * v["recall_here"]] for k, v in report["lodo"].items() if k != "grid"]))
    return "\n".join(lines)
