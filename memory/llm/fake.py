"""A scripted stand-in model for testing control flow without loading weights.

It honours the same contract as the real backends (stop strings cut the text,
``json_schema`` output must parse or ``ModelOutputError`` is raised), so code
under test sees the failures it would see in production.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

from ..errors import ModelOutputError
from .base import Completion, check_priority

Response = Union[str, Callable[[str], str], BaseException]


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


@dataclass
class ScriptedLLM:
    """Returns the scripted responses in order and records every prompt.

    Each response is a string, a function of the prompt returning a string, or
    an exception instance to raise (to test error handling).
    """

    responses: Sequence[Response]
    name: str = "scripted"
    n_ctx: int = 4096
    calls: list[ScriptedCall] = field(default_factory=list)

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

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_schema: dict | None = None,
        stop: list[str] | None = None,
        priority: str = "background",
    ) -> Completion:
        check_priority(priority)
        started = time.perf_counter()
        with self._lock:
            index = len(self.calls)
            self.calls.append(ScriptedCall(prompt, max_tokens, temperature, json_schema, stop, priority))
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
            try:
                json.loads(text, strict=False)
            except ValueError as err:
                reason = "output cut off at max_tokens" if finish == "length" else f"output is not JSON ({err})"
                raise ModelOutputError(f"{self.name}: {reason}", raw=text) from err
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
        )
