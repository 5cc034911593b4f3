"""The language-model protocol the writer and the answer path rely on.

Every backend (local llama.cpp, an OpenAI-compatible server, the scripted fake
used in tests) returns a ``Completion`` with token counts and timings, so the
callers can budget prompts and the benchmarks can report speed the same way
whatever runs underneath.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict, Unpack, runtime_checkable

if TYPE_CHECKING:
    from .capabilities import Capabilities

#: Who is asking. Interactive calls (a person waiting for an answer) jump ahead
#: of queued background calls (the memory writer); see ``ModelGate``.
Priority = Literal["interactive", "background"]
INTERACTIVE: Priority = "interactive"
BACKGROUND: Priority = "background"
PRIORITIES: tuple[str, ...] = (INTERACTIVE, BACKGROUND)


@dataclass(frozen=True)
class Completion:
    """One finished generation, with what it cost.

    ``prompt_seconds`` covers evaluating the prompt tokens that were not already
    in the cache (``reused_prompt_tokens`` says how many were); ``gen_seconds``
    covers producing the completion tokens.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    prompt_seconds: float
    gen_seconds: float
    total_seconds: float
    finish_reason: str  # "stop" (EOS or a stop string) or "length" (hit max_tokens)
    model: str
    reused_prompt_tokens: int = 0
    form: str = "completion"  # "completion" (raw prompt) or "chat" (messages through a chat template)
    structured: str = ""  # how a JSON schema was enforced, when one was asked for (see capabilities.py)

    @property
    def tokens_per_second(self) -> float:
        """Generation speed; 0.0 when nothing was generated or no time was measured."""
        if self.completion_tokens <= 0 or self.gen_seconds <= 0:
            return 0.0
        return self.completion_tokens / self.gen_seconds

    @property
    def truncated(self) -> bool:
        """True when generation stopped because it ran out of ``max_tokens``."""
        return self.finish_reason == "length"


class Options(TypedDict, total=False):
    """The optional settings of one generation call; ``Request`` holds their defaults."""

    temperature: float
    json_schema: dict | None
    stop: list[str] | None
    priority: str


@dataclass(frozen=True)
class Request:
    """One call's generation settings, defaults filled and priority checked, as every backend receives them."""

    max_tokens: int
    temperature: float = 0.0
    json_schema: dict | None = None
    stop: list[str] | None = None
    priority: str = BACKGROUND

    def __post_init__(self) -> None:
        check_priority(self.priority)


@runtime_checkable
class LLM(Protocol):
    """A text-completion model (raw prompt in, text out; no chat template)."""

    name: str
    n_ctx: int

    def complete(self, prompt: str, *, max_tokens: int, **options: Unpack[Options]) -> Completion:
        """Continue ``prompt``.

        With ``json_schema`` the output is constrained to that schema and the
        returned text is guaranteed to parse as JSON; otherwise the call raises
        ``ModelOutputError`` (usually because ``max_tokens`` cut it short).
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` takes in this model's vocabulary (no BOS)."""
        ...


class ChatMessage(TypedDict):
    """One turn of a chat prompt, as OpenAI-style APIs and chat templates take it."""

    role: Literal["system", "user", "assistant"]
    content: str


ROLES: tuple[str, ...] = ("system", "user", "assistant")


@runtime_checkable
class ChatLLM(LLM, Protocol):
    """A model that also takes chat messages and says what it supports.

    ``chat`` has the same contract as ``complete``: with ``json_schema`` the text
    parses as JSON (and matches the schema) or a ``ModelOutputError`` is raised.
    """

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, **options: Unpack[Options]) -> Completion:
        ...

    def capabilities(self) -> Capabilities:
        ...


class Backend:
    """The front every shipped backend shares, so the call contract is written once.

    ``complete`` and ``chat`` check their arguments here and hand one ``Request`` to the
    backend's ``_complete`` / ``_chat``; a subclass implements those and ``count_tokens``.
    """

    name: str
    n_ctx: int

    def complete(self, prompt: str, *, max_tokens: int, **options: Unpack[Options]) -> Completion:
        """Continue ``prompt``; with ``json_schema`` the text is valid JSON or this raises ``ModelOutputError``."""
        return self._complete(prompt, Request(max_tokens, **options))

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, **options: Unpack[Options]) -> Completion:
        """Answer chat ``messages`` (checked first); same contract as ``complete``."""
        turns = check_messages(messages)
        return self._chat(turns, Request(max_tokens, **options))

    def _complete(self, prompt: str, request: Request) -> Completion:
        raise NotImplementedError

    def _chat(self, turns: list[ChatMessage], request: Request) -> Completion:
        raise NotImplementedError


def check_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Reject malformed chat turns before they reach a template or a server."""
    out: list[ChatMessage] = []
    for n, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ROLES or not isinstance(content, str):
            raise ValueError(f"chat message #{n} needs role in {ROLES} and string content, got {m!r}")
        out.append({"role": role, "content": content})
    if not out:
        raise ValueError("a chat prompt needs at least one message")
    return out


def check_priority(priority: str) -> str:
    """Reject typos early: an unknown priority would silently queue wrongly."""
    if priority not in PRIORITIES:
        raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
    return priority
