"""A scripted stand-in model for testing control flow without loading weights.

It honours the same contract as the real backends (stop strings cut the text,
``json_schema`` output must parse or ``ModelOutputError`` is raised), so code
under test sees the failures it would see in production.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .base import Backend, ChatMessage, Completion, Request
from .capabilities import Capabilities
from .structured import parse_checked

Response = str | Callable[[str], str] | BaseException


class ScriptExhaustedError(AssertionError):
    """The code under test asked the model more often than the test scripted.

    An AssertionError on purpose: it must fail the test, not be swallowed by
    code that handles ``ModelError``.
    """


@dataclass
class ScriptedCall:
    """What one ``complete`` call asked for."""

    prompt: str
    max_tokens: int
    temperature: float
    json_schema: dict | None
    stop: list[str] | None
    priority: str
    messages: list[ChatMessage] | None = None  # set for chat calls; ``prompt`` then holds them rendered


@dataclass
class ScriptedLLM(Backend):
    """Returns the scripted responses in order and records every prompt.

    Each response is a string, a function of the prompt returning a string, or
    an exception instance to raise (to test error handling).

    With ``chat_template=True`` it also takes chat messages (rendered as
    "role: content" lines for the response functions) and prefers that form, like
    an instruct model; ``check_schema=True`` makes JSON that breaks the schema raise
    ``ModelSchemaError``, as a server in JSON mode would.
    """

    responses: Sequence[Response]
    name: str = "scripted"
    n_ctx: int = 4096
    calls: list[ScriptedCall] = field(default_factory=list)
    chat_template: bool = False
    check_schema: bool = False

    def __post_init__(self) -> None:
        self._script = list(self.responses)
        self._lock = threading.Lock()

    @property
    def prompts(self) -> list[str]:
        return [call.prompt for call in self.calls]

    @property
    def remaining(self) -> int:
        return max(0, len(self._script) - len(self.calls))

    def count_tokens(self, text: str) -> int:
        """Roughly four characters a token, which is close for English text."""
        return math.ceil(len(text) / 4)

    def capabilities(self) -> Capabilities:
        form = "chat" if self.chat_template else "completion"
        return Capabilities(completion=True, chat=self.chat_template, chat_template=self.chat_template,
                            structured_chat="json_schema" if self.chat_template else "none",
                            structured_completion="json_schema", tool_calls=False, n_ctx=self.n_ctx,
                            preferred=form)

    def _chat(self, turns: list[ChatMessage], request: Request) -> Completion:
        if not self.chat_template:
            raise AssertionError("ScriptedLLM.chat called on a model scripted without a chat template")
        rendered = "\n".join(f"{m['role']}: {m['content']}" for m in turns) + "\nassistant:"
        return self._answer(rendered, request, turns)

    def _complete(self, prompt: str, request: Request) -> Completion:
        return self._answer(prompt, request, None)

    def _answer(self, prompt: str, request: Request, messages: list[ChatMessage] | None) -> Completion:
        """The next scripted response to ``prompt``, cut by stop strings and ``max_tokens`` like a real model."""
        max_tokens, json_schema, stop = request.max_tokens, request.json_schema, request.stop
        started = time.perf_counter()
        with self._lock:
            index = len(self.calls)
            self.calls.append(ScriptedCall(prompt, max_tokens, request.temperature, json_schema, stop,
                                           request.priority, messages))
            if index >= len(self._script):
                raise ScriptExhaustedError(
                    f"ScriptedLLM ran out of responses: call #{index + 1} but only "
                    f"{len(self._script)} scripted. Prompt began: {prompt[:200]!r}"
                )
            response = self._script[index]
        if isinstance(response, BaseException):
            raise response
        text = response(prompt) if callable(response) else response
        finish = "stop"
        for marker in stop or []:
            cut = text.find(marker)
            if cut != -1:
                text = text[:cut]
        if self.count_tokens(text) > max_tokens:
            text, finish = text[: max_tokens * 4], "length"
        if json_schema is not None:
            parse_checked(text, json_schema if self.check_schema else None, finish_reason=finish, name=self.name,
                          max_tokens=max_tokens)
        elapsed = time.perf_counter() - started
        return Completion(
            text=text,
            prompt_tokens=self.count_tokens(prompt),
            completion_tokens=self.count_tokens(text),
            prompt_seconds=0.0,
            gen_seconds=elapsed,
            total_seconds=elapsed,
            finish_reason=finish,
            model=self.name,
            form="completion" if messages is None else "chat",
            structured="json_schema" if json_schema is not None else "",
        )
