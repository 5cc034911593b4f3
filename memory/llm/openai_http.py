"""A backend for any server that speaks the OpenAI /v1/completions API.

For operators who already run llama.cpp's server, vLLM or similar on a bigger
machine. Standard library only (urllib), so it adds no dependencies. It uses raw
text completions, not chat, because Chorus writes its own prompts. Calls still
go through a ``ModelGate`` so interactive questions overtake the writer's
backlog even when the server has a single slot.
"""
from __future__ import annotations

import json
import math
import os
import time
import urllib.error
import urllib.request
from typing import Any

from ..errors import ConfigError, ModelError, ModelOutputError
from .base import Completion, check_priority
from .gate import ModelGate

# How to ask the server for schema-constrained output:
#   "response_format": OpenAI-style {"type": "json_schema", ...} (vLLM, recent llama.cpp)
#   "json_schema":     llama.cpp server's own top-level "json_schema" field
#   "both":            send both (servers ignore fields they do not know, mostly)
#   "none":            send nothing; the output is still required to parse as JSON
SCHEMA_MODES = ("response_format", "json_schema", "both", "none")


class OpenAICompatLLM:
    """Text completion over HTTP; the API key is read from an environment variable."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout: float = 60,
        *,
        n_ctx: int = 4096,
        schema_mode: str = "both",
        gate: ModelGate | None = None,
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"llm.base_url must be an http(s) URL, got {base_url!r}")
        if schema_mode not in SCHEMA_MODES:
            raise ConfigError(f"llm.schema_mode must be one of {SCHEMA_MODES}, got {schema_mode!r}")
        root = base_url.rstrip("/")
        self.endpoint = root + ("/completions" if root.endswith("/v1") else "/v1/completions")
        self.model = model
        self.name = f"openai:{model}"
        self.n_ctx = n_ctx
        self.timeout = timeout
        self.schema_mode = schema_mode
        self.gate = gate or ModelGate()
        self._api_key_env = api_key_env
        if api_key_env and not os.environ.get(api_key_env):
            raise ConfigError(f"environment variable {api_key_env} (llm.api_key_env) is not set")

    def count_tokens(self, text: str) -> int:
        """An estimate (4 characters a token): the API has no standard tokenizer endpoint."""
        return math.ceil(len(text) / 4)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key_env:
            headers["Authorization"] = "Bearer " + os.environ.get(self._api_key_env, "")
        return headers

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.endpoint, data=json.dumps(body).encode("utf-8"), headers=self._headers(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read(300).decode("utf-8", "replace").strip()
            raise ModelError(
                f"{self.endpoint} answered HTTP {err.code} {err.reason}"
                + (f": {detail}" if detail else "")
            ) from None  # drop the chained request object, which carries the headers
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ModelError(f"could not reach {self.endpoint}: {reason}") from None
        try:
            data = json.loads(payload)
            data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ModelError(
                f"{self.endpoint} returned something that is not a completions response: {payload[:200]!r}"
            ) from None
        return data

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
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": False,
        }
        if stop:
            body["stop"] = list(stop)
        if json_schema is not None:
            if self.schema_mode in ("response_format", "both"):
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": json_schema, "strict": True},
                }
            if self.schema_mode in ("json_schema", "both"):
                body["json_schema"] = json_schema
        with self.gate.hold(priority):
            started = time.perf_counter()
            data = self._post(body)
            total = time.perf_counter() - started

        choice = data["choices"][0]
        text = choice.get("text") or ""
        finish = choice.get("finish_reason") or "stop"
        usage = data.get("usage") or {}
        timings = data.get("timings") or {}  # llama.cpp's server reports these
        prompt_seconds = float(timings.get("prompt_ms", 0.0)) / 1000
        gen_seconds = float(timings.get("predicted_ms", 0.0)) / 1000 or max(total - prompt_seconds, 0.0)
        if json_schema is not None:
            try:
                json.loads(text)
            except ValueError as err:
                reason = (
                    f"output cut off at max_tokens={max_tokens}" if finish == "length" else f"output is not JSON ({err})"
                )
                raise ModelOutputError(f"{self.name}: {reason}", raw=text) from None
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or self.count_tokens(prompt)),
            completion_tokens=int(usage.get("completion_tokens") or self.count_tokens(text)),
            prompt_seconds=prompt_seconds,
            gen_seconds=gen_seconds,
            total_seconds=total,
            finish_reason=finish,
            model=str(data.get("model") or self.model),
            reused_prompt_tokens=int(timings.get("cache_n", 0) or 0),
        )
