"""One short live call per prompt form, so an operator sees at once what a configured model can do.

Used by ``chorus doctor`` and the GPU check. Each check is a real generation with
a tiny budget; a failure is reported with its reason, never raised, so one broken
path does not hide the others.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ModelError
from .chat import capabilities_of, messages_of

SMOKE_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"], "additionalProperties": False}


@dataclass
class SmokeResult:
    path: str  # "completion", "completion+json", "chat", "chat+json"
    ok: bool
    skipped: bool
    detail: str
    seconds: float = 0.0
    tokens: int = 0
    structured: str = ""

    def line(self) -> str:
        state = "skip" if self.skipped else "ok  " if self.ok else "FAIL"
        timing = "" if self.skipped else f" {self.seconds:5.2f}s {self.tokens:3d} tok"
        how = f" [{self.structured}]" if self.structured else ""
        return f"  {self.path:<16} {state}{timing}{how}  {self.detail}"


def _one(path: str, fn: Any, schema: dict | None) -> SmokeResult:
    started = time.perf_counter()
    try:
        out = fn()
    except (ModelError, ValueError) as err:
        return SmokeResult(path, False, False, f"{type(err).__name__}: {err}"[:240], time.perf_counter() - started)
    text = " ".join(out.text.split())
    if schema is not None:
        text = json.dumps(json.loads(out.text, strict=False))  # the backend already checked it parses
    ok = bool(text.strip())
    return SmokeResult(path, ok, False, repr(text[:80]) if ok else "empty output", out.total_seconds,
                       out.completion_tokens, out.structured)


def smoke_test(llm: Any) -> list[SmokeResult]:
    """Raw completion, raw + JSON schema, chat, chat + JSON schema: each tried if the model offers it."""
    caps = capabilities_of(llm)
    prompt = "Q: What is the capital of France?\nA:"
    json_prompt = 'Answer as JSON. The capital of France, as {"city": ...}:\n'
    question = messages_of("You answer in a few words.", "What is the capital of France?")
    json_question = messages_of('Reply with JSON like {"city": "..."} and nothing else.',
                                "What is the capital of France?")
    results: list[SmokeResult] = []
    if caps.completion:
        results.append(_one("completion", lambda: llm.complete(prompt, max_tokens=8, stop=["\n"],
                                                                 priority="interactive"), None))
        results.append(_one("completion+json", lambda: llm.complete(json_prompt, max_tokens=24,
                                                                      json_schema=SMOKE_SCHEMA,
                                                                      priority="interactive"), SMOKE_SCHEMA))
    else:
        results += [SmokeResult(p, False, True, "no raw completion") for p in ("completion", "completion+json")]
    if caps.chat:
        results.append(_one("chat", lambda: llm.chat(question, max_tokens=12, priority="interactive"), None))
        results.append(_one("chat+json", lambda: llm.chat(json_question, max_tokens=24, json_schema=SMOKE_SCHEMA,
                                                          priority="interactive"), SMOKE_SCHEMA))
    else:
        results += [SmokeResult(p, False, True, "no chat template") for p in ("chat", "chat+json")]
    return results
