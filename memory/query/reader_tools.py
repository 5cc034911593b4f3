"""The reader's typed tools over one question's scopes (EGMemory's adaptive evidence navigation).

Four tools, each a thin, typed door onto code that already exists:

- ``search_evidence``: hybrid search of Track 1 (``Searcher.search``); passages an
  earlier call already returned are left out, so a second search brings new ones.
- ``lookup_phrase``: exact wording (``Searcher.phrase``), for "who said ...".
- ``read_current_state``: a person's (or a topic's) current Track 2 records, the
  heads of their update chains (``Records.heads`` / ``Records.search``), each with
  the messages it rests on.
- ``resolve_date``: a relative date ("next Friday") against the time a message was
  sent (``memory/query/dates.py``).

Arguments are checked by pydantic models; an unknown tool or bad arguments raise
``ToolCallError`` with the reason, which the reader shows the model and logs.
Every query is restricted to the question's scopes in SQL by the code underneath;
a message id from outside them resolves to nothing.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ToolCallError
from ..models import StoredMessage
from ..records import Records
from ..search import Searcher
from ..store import Person, Store
from ..timefmt import stamp
from .dates import find_dates

MAX_TEXT = 280  # characters of one message shown to the reader


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str  # each call narrows it to its own name


class SearchEvidence(_Args):
    tool: Literal["search_evidence"]
    query: str = Field(min_length=1, max_length=200)
    k: int = Field(5, ge=1, le=10)


class LookupPhrase(_Args):
    tool: Literal["lookup_phrase"]
    phrase: str = Field(min_length=2, max_length=120)


class ReadCurrentState(_Args):
    tool: Literal["read_current_state"]
    about: str = Field(min_length=1, max_length=120)


class ResolveDate(_Args):
    tool: Literal["resolve_date"]
    expression: str = Field(min_length=1, max_length=80)
    message_id: int = Field(ge=1)


class FinalAnswer(_Args):
    tool: Literal["answer"]
    text: str = Field(min_length=1, max_length=800)
    cite: list[int] = Field(default_factory=list, max_length=8)


TOOL_MODELS: dict[str, type[_Args]] = {
    "search_evidence": SearchEvidence, "lookup_phrase": LookupPhrase,
    "read_current_state": ReadCurrentState, "resolve_date": ResolveDate, "answer": FinalAnswer,
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_MODELS)

TOOL_HELP = """Tools. Reply with exactly one JSON object per turn; the values below are only examples:
- search_evidence: messages of this channel that match some words, best first; a repeated search leaves out
  messages you have already seen. {"tool": "search_evidence", "query": "piano lessons price", "k": 5}
- lookup_phrase: messages containing these exact words (who said it). {"tool": "lookup_phrase", "phrase":
  "the blue kayak"}
- read_current_state: what memory currently holds about a person or a topic (the latest version of each
  record), with the messages each record rests on. {"tool": "read_current_state", "about": "Sam"}
- resolve_date: the calendar date a relative expression meant when message #N was sent.
  {"tool": "resolve_date", "expression": "next Tuesday", "message_id": 17}
- answer: finish, citing the ids (#N) of the messages that support the answer.
  {"tool": "answer", "text": "Sam pays 20 euros a lesson.", "cite": [17]}"""


def call_schema(*, allow_tools: bool = True, allow_answer: bool = True) -> dict:
    """JSON schema of one reader turn: a tool call and/or the final answer.

    String lengths are kept short on purpose: under a grammar they also bound how
    many tokens a turn can take, so a rambling model closes the string instead of
    running into ``max_tokens``.
    """
    def obj(props: dict, required: list[str]) -> dict:
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    answer = obj({"tool": {"const": "answer"}, "text": {"type": "string", "maxLength": 300},
                  "cite": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 6}},
                 ["tool", "text", "cite"])
    if not allow_tools:
        return answer
    variants = [
        obj({"tool": {"const": "search_evidence"}, "query": {"type": "string", "maxLength": 80},
             "k": {"type": "integer", "minimum": 1, "maximum": 10}}, ["tool", "query"]),
        obj({"tool": {"const": "lookup_phrase"}, "phrase": {"type": "string", "maxLength": 60}}, ["tool", "phrase"]),
        obj({"tool": {"const": "read_current_state"}, "about": {"type": "string", "maxLength": 60}},
            ["tool", "about"]),
        obj({"tool": {"const": "resolve_date"}, "expression": {"type": "string", "maxLength": 40},
             "message_id": {"type": "integer", "minimum": 1}}, ["tool", "expression", "message_id"]),
    ]
    return {"anyOf": variants + ([answer] if allow_answer else [])}


def parse_call(data: object) -> _Args:
    """A model's turn as a typed tool call; ``ToolCallError`` says what is wrong with it."""
    if not isinstance(data, dict):
        raise ToolCallError(f"a tool call must be a JSON object, got {type(data).__name__}", raw=str(data)[:300])
    name = data.get("tool")
    model = TOOL_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise ToolCallError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}", raw=str(data)[:300])
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or name}: {e['msg']}" for e in err.errors()[:3])
        raise ToolCallError(f"bad arguments for {name}: {problems}", raw=str(data)[:300]) from None


@dataclass
class Observation:
    """What a tool returned: the text the model reads and the messages it showed."""

    text: str
    messages: list[StoredMessage] = field(default_factory=list)


def show(m: StoredMessage) -> str:
    text = " ".join(m.text.split())
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "…"
    return f"#{m.id} {m.author_name} @ {stamp(m.ts)}: {text}"


class ReaderTools:
    """The tools bound to one question: its scopes, roster and excluded messages."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, scope_ids: Sequence[int], *,
                 roster: Sequence[Person] = (), exclude: frozenset[int] = frozenset()) -> None:
        self.store = store
        self.searcher = searcher
        self.records = records
        self.scope_ids = list(scope_ids)
        self.roster = list(roster)
        self.exclude = exclude
        self.shown: set[int] = set()  # message ids any tool has returned for this question

    def run(self, call: _Args) -> Observation:
        """Run one (already parsed) tool call; remembers which messages were shown."""
        match call:
            case SearchEvidence():
                obs = self._search(call)
            case LookupPhrase():
                obs = self._phrase(call)
            case ReadCurrentState():
                obs = self._state(call)
            case ResolveDate():
                obs = self._date(call)
            case _:  # the answer is not a tool to run
                raise ToolCallError(f"{getattr(call, 'tool', call)!r} is not a tool that can be run")
        self.shown.update(m.id for m in obs.messages)
        return obs

    def _listing(self, messages: list[StoredMessage], empty: str) -> Observation:
        keep = [m for m in messages if m.id not in self.exclude and m.scope_id in self.scope_ids]
        if not keep:
            return Observation(empty)
        keep.sort(key=lambda m: (m.ts, m.id))  # chosen by relevance, shown in time order
        return Observation("\n".join(show(m) for m in keep), keep)

    def _search(self, call: SearchEvidence) -> Observation:
        hits = self.searcher.search(self.scope_ids, call.query, k=call.k, exclude=self.exclude | self.shown)
        return self._listing([h.message for h in hits], "no further messages match that search")

    def _phrase(self, call: LookupPhrase) -> Observation:
        return self._listing(self.searcher.phrase(self.scope_ids, call.phrase, limit=8),
                             f"no message contains the words {call.phrase!r}")

    def _person(self, about: str) -> Person | None:
        wanted = about.strip().casefold().lstrip("@")
        for p in self.roster:
            if wanted in (n.casefold() for n in p.names()) or wanted == p.person_id.casefold():
                return p
        return None

    def _state(self, call: ReadCurrentState) -> Observation:
        person = self._person(call.about)
        if person is not None:
            heads = self.records.heads(self.scope_ids, owners=[person.person_id], limit=6)
            label = person.display_name
        else:
            heads = [r for r, _ in self.records.search(self.scope_ids, call.about, limit=6)]
            label = call.about
        if not heads:
            return Observation(f"memory holds no current records about {label}")
        full = self.records.get([h.id for h in heads], with_sources=True)
        sources = self.store.messages(sorted({mid for r in full for mid in r.sources}))
        by_id = {m.id: m for m in sources if m.scope_id in self.scope_ids and m.id not in self.exclude}
        names = {p.person_id: p.display_name for p in self.roster}
        lines, shown = [], []
        for r in full:
            backing = [by_id[mid] for mid in r.sources if mid in by_id]
            revised = " (revised)" if r.prev_id is not None else ""
            lines.append(f"- [{names.get(r.owner, r.owner)}] {r.content}{revised}, as of {stamp(r.ts)}; "
                         f"rests on {', '.join(f'#{m.id}' for m in backing) or 'no visible message'}")
            shown += [m for m in backing if m not in shown]
        lines += [show(m) for m in shown]
        return Observation(f"current records about {label}:\n" + "\n".join(lines), shown)

    def _date(self, call: ResolveDate) -> Observation:
        found = [m for m in self.store.messages([call.message_id]) if m.scope_id in self.scope_ids]
        if not found:
            raise ToolCallError(f"message #{call.message_id} is not in this channel's memory")
        msg = found[0]
        refs = find_dates(call.expression, msg.ts)
        if not refs:
            return Observation(f"{call.expression!r} is not a date expression I can resolve "
                               f"(message #{msg.id} was sent {stamp(msg.ts)})", [msg])
        ref = refs[0]
        return Observation(f"{call.expression!r} said at {stamp(msg.ts)} (message #{msg.id}) means {ref.label()}",
                           [msg])
