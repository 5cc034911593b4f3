"""EGMemory's adaptive reader: a capable model calls typed tools for a few rounds, then answers.

Each round the model sends one JSON tool call (constrained by a schema where the
backend can), the tool runs over the question's scopes, and its result goes back
to the model as the next turn; later requests can follow up on earlier results.
The loop ends when the model answers, or when the round or token budget runs out;
then one last turn allows only the answer. Every call is logged (``ToolCall``).

The answer's citations are message ids; only ids that a tool actually showed the
model are kept, and the caller still applies its own citation/support check to
``ReaderResult.cited`` before anything is shown. Off by default: the shipped 270M
model cannot drive tools (``answer.reader = true`` turns it on).
"""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelError, ModelOutputError, ToolCallError
from ..llm.base import INTERACTIVE, ChatMessage, Completion
from ..llm.chat import generate, pick_form
from ..llm.structured import parse_checked
from ..models import StoredMessage
from ..question import Question
from ..records import Records
from ..search import Searcher
from ..store import Store
from ..timefmt import stamp
from .reader_tools import TOOL_HELP, FinalAnswer, ReaderTools, call_schema, parse_call

log = logging.getLogger(__name__)

SYSTEM = ("You answer questions about a group chat by looking things up in its memory first. You cannot see the "
          "chat itself: use the tools to find the messages that matter, one call per turn, then answer. Base the "
          "answer only on what the tools returned, keep each person's words and views apart, and cite the "
          "message ids (#N) you rely on. If the tools find nothing that answers the question, answer that the "
          "memory does not say.\n\n" + TOOL_HELP)
LAST_ROUND = "That was your last lookup. Now reply with the answer tool, citing the messages you rely on."


@dataclass
class ReaderConfig:
    max_rounds: int = 4  # tool rounds before the answer is required (the paper allows up to ten)
    token_budget: int = 6000  # prompt + completion tokens over all rounds
    max_tokens_per_call: int = 160
    min_lookups: int = 1  # rounds that must be tool calls before an answer is accepted (no answering blind)


@dataclass
class ToolCall:
    """One round: what the model asked for and what came back (or why it failed)."""

    round: int
    tool: str
    args: dict
    ok: bool
    result: str
    message_ids: list[int] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class ReaderResult:
    """The reader's answer with the messages it cites and how it got there."""

    text: str
    cited: list[StoredMessage]
    tool_log: list[ToolCall]
    rounds: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    stopped: str  # "answered", "rounds" (answer forced after the budget), "tokens", "model_error"
    form: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return bool(self.text)

    def for_support_check(self) -> tuple[str, dict[int, str], list[str]]:
        """The answer with its citations as [1]..[k], the cited messages' texts by number (speaker
        included) and the speakers' names: the arguments ``support.check_sentence`` takes."""
        body = re.sub(r"\s*\(?#\d+\)?", "", self.text).strip()
        marks = "".join(f"[{n}]" for n in range(1, len(self.cited) + 1))
        texts = {n: f"{m.author_name}: {m.text}" for n, m in enumerate(self.cited, 1)}
        return (f"{body} {marks}".strip(), texts, [m.author_name for m in self.cited])


@dataclass
class _Loop:
    """The running state of one question's tool loop."""

    form: str
    turns: list[ChatMessage]
    log: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    stopped: str = "rounds"
    started: float = field(default_factory=time.perf_counter)

    @property
    def used(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Reader:
    """Runs the tool loop for one question at a time; holds no per-question state between calls."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, llm: Any, *,
                 config: ReaderConfig | None = None, form: str = "auto") -> None:
        self.store = store
        self.searcher = searcher
        self.records = records
        self.llm = llm
        self.config = config or ReaderConfig()
        self.form = form

    def read(self, scope_ids: Sequence[int], question: Question, *,
             exclude: frozenset[int] = frozenset()) -> ReaderResult:
        """Run the tool loop for ``question``; never raises for model trouble (see ``ReaderResult.stopped``)."""
        asked_at = question.asked_at
        cfg = self.config
        roster = [p for sid in scope_ids for p in self.store.roster(sid) if not p.is_bot]
        tools = ReaderTools(self.store, self.searcher, self.records, scope_ids, roster=roster, exclude=exclude)
        opening = (f"Question: {question.text.strip()}\nAsked: {stamp(asked_at or time.time())}\n"
                   f"People in this channel: {', '.join(p.display_name for p in roster) or '(none yet)'}")
        loop = _Loop(pick_form(self.llm, have_raw=True, have_chat=True, form=self.form),
                     [{"role": "system", "content": SYSTEM}, {"role": "user", "content": opening}])
        rnd = 0
        while True:
            rnd += 1
            final = rnd > cfg.max_rounds
            if not final and self._estimate(loop.turns) + 2 * cfg.max_tokens_per_call > cfg.token_budget - loop.used:
                final, loop.stopped = True, "tokens"
            if final:
                if self._estimate(loop.turns) + cfg.max_tokens_per_call > cfg.token_budget - loop.used:
                    loop.notes.append("token budget spent before an answer could be asked for")
                    break
                loop.turns.append({"role": "user", "content": LAST_ROUND})
            t = time.perf_counter()
            try:
                completion, data = self._turn(loop.turns, loop.form, allow_tools=not final,
                                              allow_answer=final or rnd > cfg.min_lookups)
            except ModelOutputError as err:
                self._unusable(loop, rnd, err, t)
                if final:
                    break
                continue
            except ModelError as err:
                loop.log.append(ToolCall(rnd, "?", {}, False, "", error=str(err), seconds=time.perf_counter() - t))
                log.warning("reader round %d: model failed: %s", rnd, err)
                loop.notes.append(f"model failed: {err}")
                loop.stopped = "model_error"
                break
            answer = self._step(loop, rnd, completion, data, tools, final, t, blind=rnd <= cfg.min_lookups)
            if answer is not None:
                return self._result(loop, rnd, answer, tools, final)
            if final:
                break
        return self._result(loop, rnd, None, tools, final)

    def _unusable(self, loop: _Loop, rnd: int, err: ModelOutputError, t: float) -> None:
        """Not a usable turn (not JSON, wrong shape, cut off): log it, tell the model, go on. The tokens
        it burnt count against the budget (estimated: a failed call reports no usage)."""
        spent_prompt, spent_out = self._estimate(loop.turns), self.llm.count_tokens(err.raw or "")
        loop.prompt_tokens += spent_prompt
        loop.completion_tokens += spent_out
        loop.log.append(ToolCall(rnd, "?", {}, False, "", error=str(err), seconds=time.perf_counter() - t,
                                 prompt_tokens=spent_prompt, completion_tokens=spent_out))
        log.warning("reader round %d: unusable model output: %s", rnd, err)
        loop.turns += [{"role": "assistant", "content": err.raw[:400] or "(empty)"},
                       {"role": "user", "content": f"That was not a valid tool call ({err.reason[:200]}). "
                                                   "Reply with one JSON tool call."}]

    def _step(self, loop: _Loop, rnd: int, completion: Completion, data: Any, tools: ReaderTools, final: bool,
              t: float, *, blind: bool = False) -> FinalAnswer | None:
        """Log one parsed turn and run its tool; returns the final answer when the model gave one."""
        loop.prompt_tokens += completion.prompt_tokens
        loop.completion_tokens += completion.completion_tokens
        is_obj = isinstance(data, dict)
        entry = ToolCall(rnd, str(data.get("tool", "?")) if is_obj else "?",
                         {k: v for k, v in data.items() if k != "tool"} if is_obj else {}, False, "",
                         prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens)
        loop.log.append(entry)
        loop.turns.append({"role": "assistant", "content": json.dumps(data, ensure_ascii=False)})
        try:
            call = parse_call(data)
            if isinstance(call, FinalAnswer) and blind and not final:
                raise ToolCallError("look something up first: answer only after at least one tool call")
            if isinstance(call, FinalAnswer):
                entry.ok, entry.result, entry.seconds = True, call.text, time.perf_counter() - t
                return call
            if final:
                raise ToolCallError("only the answer tool is allowed in the last round")
            obs = tools.run(call)
            entry.ok, entry.result, entry.message_ids = True, obs.text, [m.id for m in obs.messages]
            loop.turns.append({"role": "user", "content": f"Result of {call.tool}:\n{obs.text}"})
        except ToolCallError as err:
            entry.error = err.reason
            loop.turns.append({"role": "user", "content": f"Tool error: {err.reason}"})
        entry.seconds = time.perf_counter() - t
        log.info("reader round %d: %s %s -> %s", rnd, entry.tool, entry.args,
                 "ok" if entry.ok else f"error: {entry.error}")
        return None

    def _result(self, loop: _Loop, rnd: int, answer: FinalAnswer | None, tools: ReaderTools,
                final: bool) -> ReaderResult:
        seconds = time.perf_counter() - loop.started
        if answer is None:
            return ReaderResult("", [], loop.log, rnd, loop.prompt_tokens, loop.completion_tokens, seconds,
                                loop.stopped, loop.form, loop.notes)
        text, cited, dropped = self._cited(answer, tools)
        if dropped:
            loop.notes.append(f"dropped citations of messages no tool had shown: {dropped}")
        if not cited:
            loop.notes.append("the answer cites no message a tool returned")
        log.info("reader answered after %d rounds (%d tool calls), %d+%d tokens", rnd,
                 sum(1 for c in loop.log if c.ok and c.tool != "answer"), loop.prompt_tokens, loop.completion_tokens)
        return ReaderResult(text, cited, loop.log, rnd, loop.prompt_tokens, loop.completion_tokens, seconds,
                            loop.stopped if final else "answered", loop.form, loop.notes)

    def _estimate(self, turns: list[ChatMessage]) -> int:
        return sum(self.llm.count_tokens(t["content"]) + 4 for t in turns)

    def _turn(self, turns: list[ChatMessage], form: str, *, allow_tools: bool,
              allow_answer: bool = True) -> tuple[Completion, Any]:
        schema = call_schema(allow_tools=allow_tools, allow_answer=allow_answer)
        out = generate(self.llm, raw_prompt=render_raw(turns) if form == "completion" else None,
                       messages=turns if form == "chat" else None, max_tokens=self.config.max_tokens_per_call,
                       temperature=0.0, schema=schema, priority=INTERACTIVE, form=form)
        data = parse_checked(out.text, None, finish_reason=out.finish_reason, name=getattr(self.llm, "name", "model"),
                             max_tokens=self.config.max_tokens_per_call)
        return out, data

    def _cited(self, call: FinalAnswer, tools: ReaderTools) -> tuple[str, list[StoredMessage], list[int]]:
        keep = [i for i in dict.fromkeys(call.cite) if i in tools.shown]
        dropped = [i for i in call.cite if i not in tools.shown]
        messages = {m.id: m for m in self.store.messages(keep)}
        return " ".join(call.text.split()), [messages[i] for i in keep if i in messages], dropped


def render_raw(turns: Sequence[ChatMessage]) -> str:
    """The transcript as one raw prompt, for models used in completion form."""
    parts = []
    for t in turns:
        if t["role"] == "system":
            parts.append(t["content"])
        elif t["role"] == "user":
            parts.append(t["content"])
        else:
            parts.append("Call: " + t["content"])
    return "\n\n".join(parts) + "\n\nCall: "
