"""Runs writer windows: pick the next window, propose, verify, commit in one transaction.

A window is up to N new messages of one scope, cut early where a session closes.
The scope's watermark advances in the same transaction as the window's records,
so a crash leaves nothing half-written and the window is simply retried. A window
that fails ``max_failures`` times is quarantined (recorded, skipped, retryable).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from ..db import named
from ..errors import ModelError, ModelOutputError
from ..groupstate import LAYER as STATE_LAYER
from ..llm.base import BACKGROUND, LLM, Completion
from ..llm.chat import generate  # picks the raw or chat form the model wants (memory/llm/chat.py)
from ..llm.prompts_chat import insight_messages, writer_messages
from ..models import StoredMessage
from ..records import GROUP, INSIGHT_LAYER, NewRecord, Record, Records
from ..store import Store, select_messages
from .acts import as_fact, stored_group_acts
from .cues import propose as propose_cues
from .grounding import near_duplicate
from .insights import Persona, insight_prompt, insight_schema, verify_insights
from .prompt import action_schema, build_prompt, extract_text
from .verify import Rejection, RosterIndex, max_actions, parse_actions, salvage_actions, verify

# Most actions the grammar lets one window produce; small models otherwise repeat themselves
# until the token budget runs out. Verification still enforces max(8, 2 x messages).
GRAMMAR_MAX_ITEMS = 8

log = logging.getLogger(__name__)


@dataclass
class WriterConfig:
    window_messages: int = 25
    max_failures: int = 3
    grounding_threshold: float = 0.5
    max_new_tokens: int = 768
    heads_token_budget: int = 800
    idle_gap_s: float = 1800.0
    extractive: bool = False  # records quote their message (for tiny models); see prompt.action_schema
    cues: bool = True  # deterministic cue proposals (decisions, norms, plans, ...) beside the model's; see cues.py
    # Read only messages the analysis pass has read (their acts decide what is the group state's); the bot sets
    # it when the pass runs, so a window never races ahead of the acts it needs.
    after_analysis: bool = False
    # Persona insights: off for the embedded 270M model, whose insights fail the support check (bot/app.py).
    insights: bool = True


@dataclass
class Window:
    scope_id: int
    messages: list[StoredMessage]
    quarantine_id: int | None = None

    @property
    def first_id(self) -> int:
        return self.messages[0].id

    @property
    def last_id(self) -> int:
        return self.messages[-1].id


@dataclass
class WindowResult:
    scope_id: int
    run_id: int
    status: str
    accepted: int = 0
    rejected: int = 0
    parsed: bool = False
    error: str | None = None
    completion: Completion | None = None
    record_ids: list[int] = field(default_factory=list)
    quarantined: bool = False
    n_messages: int = 0


@dataclass
class ScopeLag:
    scope_id: int
    label: str
    watermark: int
    pending_messages: int
    failures: int
    last_error: str | None
    quarantined: int


class Writer:
    """Builds Track 2 from Track 1 with a (possibly tiny) local model, trusting only verification."""

    def __init__(self, store: Store, llm: LLM, *, config: WriterConfig | None = None,
                 persona: Persona | None = None, records: Records | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.llm = llm
        self.config = config or WriterConfig()
        self.persona = persona
        self.records = records or Records(store)
        self.clock = clock

    # ------------------------------------------------------------------ windows
    def watermark(self, scope_id: int) -> tuple[int, int]:
        with self.store.read() as conn:
            row = conn.execute("SELECT watermark, failures FROM writer_state WHERE scope_id = ?",
                               (scope_id,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def next_window(self, scope_id: int, *, force: bool = False) -> Window | None:
        """The next window of a scope, or None when nothing is ready (an open session waits)."""
        mark, _ = self.watermark(scope_id)
        with self.store.read() as conn:
            msgs = select_messages(
                conn, "WHERE m.scope_id = ? AND m.id > ? AND m.deleted = 0 AND m.bot_traffic = 0 ORDER BY m.id LIMIT ?",
                (scope_id, mark, self.config.window_messages + 1))
            if self.config.after_analysis and msgs:
                waiting = conn.execute("SELECT min(id) FROM messages WHERE scope_id = ? AND id > ? AND analysed = 0 "
                                       "AND deleted = 0", (scope_id, mark)).fetchone()[0]
                if waiting is not None:
                    msgs = [m for m in msgs if m.id < waiting]
        if not msgs:
            return None
        window = [msgs[0]]
        for m in msgs[1:]:
            if m.session != window[0].session or len(window) >= self.config.window_messages:
                return Window(scope_id, window)  # full, or the session closed
            window.append(m)
        if len(window) >= self.config.window_messages:
            return Window(scope_id, window)
        idle = self.clock() - max(m.ts for m in window) > self.config.idle_gap_s
        return Window(scope_id, window) if (force or idle) else None

    def pending(self, *, force: bool = False) -> list[Window]:
        out = []
        for scope in self.store.scopes():
            if scope.opted_out:
                continue
            w = self.next_window(scope.id, force=force)
            if w is not None:
                out.append(w)
        return out

    # ------------------------------------------------------------------ one window
    def _heads_for(self, window: Window, all_heads: Sequence[Record]) -> list[Record]:
        """Heads shown to the model: speakers' and GROUP records first, most similar first, within budget."""
        if not all_heads:
            return []
        speakers = {m.author_id for m in window.messages}
        text = " ".join(m.text for m in window.messages)[:4000]
        ranked = [r for r, _ in self.records.search([window.scope_id], text, limit=40)]
        seen = {r.id for r in ranked}
        ranked += [h for h in all_heads if h.id not in seen and (h.owner in speakers or h.owner == GROUP)]
        ranked = [r for r in ranked if r.layer != INSIGHT_LAYER]
        budget = self.config.heads_token_budget
        shown: list[Record] = []
        used = 0
        for r in ranked:
            cost = len(r.content) // 4 + 12
            if used + cost > budget:
                break
            shown.append(r)
            used += cost
        return shown

    def run_window(self, window: Window) -> WindowResult:
        started = self.clock()
        t0 = time.perf_counter()
        roster_people = self.store.roster(window.scope_id)
        roster = RosterIndex(roster_people)
        names = {p.person_id: p.display_name for p in roster_people}
        people = [p.display_name for p in roster_people if not p.is_bot]
        # Bot traffic (questions to the bot, its own replies) is never writer input; the watermark still passes it.
        inputs = [m for m in window.messages if not m.to_bot and m.author_id not in roster.bots]
        if not inputs:
            return self._commit(window, started, t0, "", True, None, [], [], [], None)
        all_heads = self.records.heads([window.scope_id])
        shown = self._heads_for(Window(window.scope_id, inputs), all_heads)
        prompt = build_prompt(people, shown, names, inputs, extractive=self.config.extractive)
        limit = max_actions(len(inputs))
        schema = action_schema(people, [f"E{h.id}" for h in shown], min(limit, GRAMMAR_MAX_ITEMS),
                               n_messages=len(inputs),
                               extractive=[(names.get(m.author_id, m.author_name), m.text) for m in inputs]
                               if self.config.extractive else None)
        completion: Completion | None = None
        raw = ""
        notes: list[Rejection] = []
        # A failed window is retried with some sampling: greedy decoding would repeat the same failure.
        _, failures = self.watermark(window.scope_id)
        temperature = 0.0 if failures == 0 and window.quarantine_id is None else 0.7
        try:
            completion = generate(self.llm, raw_prompt=prompt, messages=writer_messages(
                people, shown, names, inputs, extractive=self.config.extractive),
                max_tokens=self.config.max_new_tokens, temperature=temperature, schema=schema, priority=BACKGROUND)
            raw = completion.text
            actions = parse_actions(raw)
        except ModelOutputError as exc:
            raw = exc.raw
            actions = salvage_actions(raw) if raw.lstrip().startswith('{"actions"') else []
            if not actions:
                return self._fail(window, started, t0, f"model output rejected: {exc.reason}", raw, completion)
            notes.append(Rejection({"truncated_output": raw[-200:]},
                                   f"{exc.reason}; kept the {len(actions)} complete actions before the cut"))
        except ModelError as exc:
            return self._fail(window, started, t0, f"model failed: {exc}", raw, completion)
        except ValueError as exc:
            return self._fail(window, started, t0, f"model output rejected: {exc}", raw, completion)

        acts = stored_group_acts(self.store, inputs)
        cue_actions = propose_cues(inputs, roster.people, names, acts, all_heads) if self.config.cues else []
        fill_quotes(cue_actions, inputs, names)
        if self.config.extractive:
            fill_quotes(actions, inputs, names)
        heads = {h.id: h for h in all_heads}
        check = partial(verify, window=inputs, roster=roster, heads=heads, group_acts=acts,
                        threshold=self.config.grounding_threshold, scope_id=window.scope_id)
        if self.config.extractive:
            # Cues first: a quote can be filed once, and the cue's filing of a decision or rule is the checked one.
            verdict = check(cue_actions + list(actions))
        else:
            # A capable model words its own records; cues only fill messages it left without one.
            verdict = check(list(actions))
            covered = {i for r in verdict.accepted for i in r.message_ids}
            extra = check([a for a in cue_actions if inputs[a["msg"] - 1].id not in covered])
            for rec in extra.accepted:
                if any(near_duplicate(rec.content, r.content) for r in verdict.accepted):
                    extra.rejected.append(Rejection({"proposer": rec.verification.get("proposer")},
                                                    "repeats a record the model wrote"))
                else:
                    verdict.accepted.append(rec)
            verdict.rejected += extra.rejected
        rejected: list[Rejection] = notes + list(verdict.rejected)
        insights: list[tuple[NewRecord, list[int]]] = []
        insight_completion: Completion | None = None
        facts = [r for r in verdict.accepted]
        # The group state the analysis pass filed from this window is fact too: insights may rest on it.
        state = self._window_state(window)
        known_facts: list[NewRecord] = [*facts, *(as_fact(r) for r in state)]
        if self.persona is not None and self.config.insights and known_facts:
            try:
                existing = [h.content for h in all_heads if h.layer == INSIGHT_LAYER]
                insight_completion = generate(
                    self.llm, raw_prompt=insight_prompt(self.persona, known_facts, names),
                    messages=insight_messages(self.persona, known_facts, names), max_tokens=200, temperature=0.0,
                    schema=insight_schema(len(known_facts)), priority=BACKGROUND)
                data = json.loads(insight_completion.text, strict=False)
                insights, bad = verify_insights(data, known_facts, existing, window.scope_id)
                rejected += bad
            except (ModelError, ValueError) as exc:
                # Insights are optional: the facts still commit; the reason is kept in the audit log.
                rejected.append(Rejection({"pass": "insights"}, f"insight pass failed: {exc}"))
        return self._commit(window, started, t0, raw, not notes, completion, facts, insights, rejected,
                            insight_completion, known=[r.id for r in state])

    def _window_state(self, window: Window) -> list[Record]:
        """The group-state records resting on the window's messages (the analysis pass filed them)."""
        ids = [m.id for m in window.messages]
        with self.store.read() as conn:
            rids = sorted({r[0] for r in conn.execute(
                f"SELECT DISTINCT s.record_id FROM record_sources s JOIN records r ON r.id = s.record_id WHERE "
                f"s.message_id IN ({','.join('?' * len(ids))}) AND r.status = 'active' AND r.layer = ?",
                [*ids, STATE_LAYER])})
        return self.records.get(rids, with_sources=True)

    def _commit(self, window: Window, started: float, t0: float, raw: str, parsed: bool,
                completion: Completion | None, facts: list[NewRecord], insights: list[tuple[NewRecord, list[int]]],
                rejected: list[Rejection], insight_completion: Completion | None,
                known: Sequence[int] = ()) -> WindowResult:
        """``known``: committed records shown to the insight pass after ``facts`` (an insight may cite them)."""
        """Records, the audit row and the watermark in one transaction."""
        texts = [r.content for r in facts] + [r.content for r, _ in insights]
        vectors = self.store.embedder.embed(texts) if (self.store.embedder and texts) else None
        model = getattr(self.llm, "name", "model")
        with self.store.write() as conn:
            run_id = self._log_run(conn, window, started, t0, "committed", raw, parsed, completion,
                                   accepted=[_describe(r) for r in facts] + [_describe(r) for r, _ in insights],
                                   rejected=[r.to_json() for r in rejected], extra=insight_completion)
            ids: list[int] = []
            for n, rec in enumerate(facts):
                ids.append(self.records.insert(conn, rec, run_id=run_id, model=model,
                                               vector=None if vectors is None else vectors[n]))
            for m, (rec, cited) in enumerate(insights):
                rec.cites = [ids[i] if i < len(facts) else known[i - len(facts)] for i in cited]
                ids.append(self.records.insert(conn, rec, run_id=run_id, model=model,
                                               vector=None if vectors is None else vectors[len(facts) + m]))
            self._advance(conn, window, failures=0, error=None)
        return WindowResult(window.scope_id, run_id, "committed", accepted=len(ids), rejected=len(rejected),
                            parsed=parsed, completion=completion, record_ids=ids,
                            n_messages=len(window.messages))

    def _fail(self, window: Window, started: float, t0: float, error: str, raw: str,
              completion: Completion | None) -> WindowResult:
        log.warning("writer window %s..%s in scope %s failed: %s", window.first_id, window.last_id,
                    window.scope_id, error)
        with self.store.write() as conn:
            run_id = self._log_run(conn, window, started, t0, "failed", raw, False, completion, error=error)
            _, failures = self.watermark_in(conn, window.scope_id)
            failures += 1
            quarantined = failures >= self.config.max_failures or window.quarantine_id is not None
            if window.quarantine_id is not None:
                conn.execute("UPDATE writer_quarantine SET failures = failures + 1, last_error = ?, released_at = NULL "
                             "WHERE id = ?", (error, window.quarantine_id))
            elif quarantined:
                conn.execute("INSERT INTO writer_quarantine(scope_id, first_message_id, last_message_id, failures, "
                             "last_error, created_at) VALUES (?,?,?,?,?,?)",
                             (window.scope_id, window.first_id, window.last_id, failures, error, self.clock()))
                self._advance(conn, window, failures=0, error=error)
            else:
                self._set_state(conn, window.scope_id, None, failures, error)
        return WindowResult(window.scope_id, run_id, "failed", error=error, completion=completion,
                            quarantined=quarantined, n_messages=len(window.messages))

    @staticmethod
    def watermark_in(conn, scope_id: int) -> tuple[int, int]:
        row = conn.execute("SELECT watermark, failures FROM writer_state WHERE scope_id = ?", (scope_id,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def _advance(self, conn, window: Window, *, failures: int, error: str | None) -> None:
        if window.quarantine_id is not None:
            conn.execute("UPDATE writer_quarantine SET released_at = ? WHERE id = ?",
                         (self.clock(), window.quarantine_id))
            return  # a retried quarantined window does not move the live watermark
        self._set_state(conn, window.scope_id, window.last_id, failures, error)

    def _set_state(self, conn, scope_id: int, watermark: int | None, failures: int, error: str | None) -> None:
        current, _ = self.watermark_in(conn, scope_id)
        conn.execute(
            "INSERT INTO writer_state(scope_id, watermark, failures, last_error, updated_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT(scope_id) DO UPDATE SET watermark = excluded.watermark, failures = excluded.failures, "
            "last_error = excluded.last_error, updated_at = excluded.updated_at",
            (scope_id, max(current, watermark or 0), failures, error, self.clock()))

    def _log_run(self, conn, window: Window, started: float, t0: float, status: str, raw: str, parsed: bool,
                 completion: Completion | None, *, accepted: list | None = None, rejected: list | None = None,
                 error: str | None = None, extra: Completion | None = None) -> int:
        pt = (completion.prompt_tokens if completion else 0) + (extra.prompt_tokens if extra else 0)
        ct = (completion.completion_tokens if completion else 0) + (extra.completion_tokens if extra else 0)
        gs = (completion.gen_seconds if completion else 0.0) + (extra.gen_seconds if extra else 0.0)
        cur = conn.execute(
            "INSERT INTO writer_runs(scope_id, kind, first_message_id, last_message_id, n_messages, model, "
            "prompt_tokens, completion_tokens, gen_seconds, duration_s, raw_output, parsed, accepted, rejected, "
            "status, error, started_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (window.scope_id, "retry" if window.quarantine_id else "window", window.first_id, window.last_id,
             len(window.messages), getattr(self.llm, "name", "model"), pt, ct, gs, time.perf_counter() - t0,
             raw, int(parsed), json.dumps(accepted or []), json.dumps(rejected or [], default=str), status, error,
             started))
        return int(cur.lastrowid)

    # ------------------------------------------------------------------ many windows
    def run_pending(self, *, force: bool = False, max_windows: int | None = None,
                    progress: Callable[[WindowResult], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> list[WindowResult]:
        """Run ready windows scope by scope until none is left (or a limit/stop request)."""
        results: list[WindowResult] = []
        while True:
            windows = self.pending(force=force)
            if not windows:
                break
            for w in windows:
                if (max_windows is not None and len(results) >= max_windows) or (should_stop and should_stop()):
                    return results
                res = self.run_window(w)
                results.append(res)
                if progress:
                    progress(res)
        return results

    def quarantined(self, scope_id: int | None = None) -> list[dict]:
        sql = ("SELECT id, scope_id, first_message_id, last_message_id, failures, last_error, created_at "
               "FROM writer_quarantine WHERE released_at IS NULL")
        args: list = []
        if scope_id is not None:
            sql += " AND scope_id = ?"
            args.append(scope_id)
        with self.store.read() as conn:
            return [dict(r) for r in named(conn, sql + " ORDER BY id", args)]

    def retry_quarantined(self, quarantine_id: int) -> WindowResult:
        """Run a quarantined window again (e.g. after switching to a better model)."""
        q = next((q for q in self.quarantined() if q["id"] == quarantine_id), None)
        if q is None:
            from ..errors import InputError

            raise InputError(f"no open quarantined window with id {quarantine_id}")
        with self.store.read() as conn:
            msgs = select_messages(conn, "WHERE m.scope_id = ? AND m.id BETWEEN ? AND ? AND m.deleted = 0 "
                                   "ORDER BY m.id", (q["scope_id"], q["first_message_id"], q["last_message_id"]))
        if not msgs:
            with self.store.write() as conn:
                conn.execute("UPDATE writer_quarantine SET released_at = ? WHERE id = ?", (self.clock(), quarantine_id))
            return WindowResult(q["scope_id"], 0, "committed")
        return self.run_window(Window(q["scope_id"], msgs, quarantine_id=quarantine_id))

    def lag(self) -> list[ScopeLag]:
        out = []
        for scope in self.store.scopes():
            mark, failures = self.watermark(scope.id)
            with self.store.read() as conn:
                pending = conn.execute("SELECT count(*) FROM messages WHERE scope_id = ? AND id > ? AND deleted = 0 "
                                       "AND bot_traffic = 0",
                                       (scope.id, mark)).fetchone()[0]
                err = conn.execute("SELECT last_error FROM writer_state WHERE scope_id = ?", (scope.id,)).fetchone()
            out.append(ScopeLag(scope.id, scope.label(), mark, pending, failures, err[0] if err else None,
                                len(self.quarantined(scope.id))))
        return out

    def speed(self, last: int = 50) -> dict:
        """Recent model speed from the audit log (generation tokens per second, seconds per window)."""
        with self.store.read() as conn:
            rows = named(conn, "SELECT completion_tokens, gen_seconds, duration_s, n_messages FROM writer_runs "
                         "ORDER BY id DESC LIMIT ?", (last,))
        toks = sum(r["completion_tokens"] for r in rows)
        gen = sum(r["gen_seconds"] for r in rows)
        dur = sum(r["duration_s"] for r in rows)
        msgs = sum(r["n_messages"] for r in rows)
        return {"windows": len(rows), "gen_tokens_per_s": round(toks / gen, 1) if gen else 0.0,
                "messages_per_min": round(60 * msgs / dur, 1) if dur else 0.0}


def fill_quotes(actions: list, window: Sequence[StoredMessage], names: dict[str, str]) -> None:
    """Extractive mode: an action names message N; its content is N's text and its source N's author."""
    for action in actions:
        if isinstance(action, dict) and isinstance(action.get("msg"), int) and 1 <= action["msg"] <= len(window):
            m = window[action["msg"] - 1]
            action["content"] = extract_text(m.text)
            if str(action.get("op", "")).upper() == "ADD":
                action["source"] = names.get(m.author_id, m.author_name)


def _describe(rec: NewRecord) -> dict:
    return {"layer": rec.layer, "utype": rec.utype, "owner": rec.owner, "source": rec.source, "content": rec.content,
            "updates": rec.updates, "messages": rec.message_ids, "verification": rec.verification}
