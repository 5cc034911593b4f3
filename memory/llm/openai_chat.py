"""Any OpenAI-compatible server (llama.cpp server, llama-cpp-python, vLLM, Ollama) through the ``openai`` client.

- Chat goes to ``/v1/chat/completions`` (the server applies the model's template);
  raw prompts still go to ``/v1/completions`` where the server offers it.
- The API key is read from the environment variable named in the config, never
  from the config itself. Timeouts and retries (429, 5xx, dropped connections,
  with backoff) are the client's; what is left after them becomes a named
  ``ModelUnavailableError`` / ``ModelTimeoutError`` with the cause.
- Structured output: each server spells it differently. We ask ``/v1/models``
  who answers and try the strongest mode that server is known to honour
  (``json_schema``, then JSON mode, then a GBNF grammar, then nothing); a mode the
  server rejects (HTTP 400/422) is dropped for the rest of the run and the log
  says which one is in use. Whatever the mode, the output is parsed and checked
  against the schema here, so a server that ignored it cannot slip bad JSON past.
- Calls go through a ``ModelGate`` so interactive questions overtake the writer's
  backlog even when the server has a single slot.
"""
from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import ConfigError, ModelError, ModelTimeoutError, ModelUnavailableError
from .base import Backend, ChatMessage, Completion, Request
from .capabilities import STRUCTURED_MODES, Capabilities, choose_form
from .gate import ModelGate
from .structured import parse_checked

log = logging.getLogger(__name__)

#: ``owned_by`` in /v1/models tells the servers apart.
_OWNERS = {"me": "llama-cpp-python", "llamacpp": "llama.cpp", "vllm": "vllm", "library": "ollama",
           "ollama": "ollama"}
#: Structured-output modes to try, strongest first, per server kind and prompt form.
_LADDERS: dict[str, dict[str, list[str]]] = {
    "llama-cpp-python": {"chat": ["json_object", "grammar", "none"], "completion": ["grammar", "none"]},
    "llama.cpp": {"chat": ["json_schema", "grammar", "none"], "completion": ["json_schema", "grammar", "none"]},
    "vllm": {"chat": ["json_schema", "json_object", "none"], "completion": ["json_schema", "none"]},
    "ollama": {"chat": ["json_schema", "json_object", "none"], "completion": ["none"]},
    "unknown": {"chat": ["json_schema", "json_object", "none"], "completion": ["json_schema", "none"]},
}
NO_KEY = "sk-no-key-required"  # the client insists on some key; local servers ignore it


def _gbnf(schema: dict) -> str | None:
    """A GBNF grammar for ``schema`` via llama-cpp-python's converter, when it is installed."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except (ImportError, OSError):
        return None
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as err:  # the converter raises bare Exceptions
        log.warning("cannot turn this JSON schema into a grammar (%s); grammar mode skipped", err)
        return None


def structured_fields(mode: str, schema: dict, form: str) -> dict[str, Any] | None:
    """Request fields that ask for ``schema`` in ``mode``; None when the mode cannot be expressed."""
    spec = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
    if mode == "json_schema":
        # llama.cpp's server reads a top-level json_schema on /completions; the others read response_format.
        return {"response_format": spec} if form == "chat" else {"response_format": spec, "json_schema": schema}
    if mode == "json_object":
        # llama-cpp-python's server takes the schema inside JSON mode; other servers ignore the extra key.
        return {"response_format": {"type": "json_object", "schema": schema}}
    if mode == "grammar":
        grammar = _gbnf(schema)
        return None if grammar is None else {"grammar": grammar}
    return {}


class OpenAIChatLLM(Backend):
    """Chat and text completion over HTTP with the official ``openai`` client."""

    def __init__(
        self,
        base_url: str,
        model: str = "",
        api_key_env: str | None = None,
        timeout: float = 60,
        *,
        n_ctx: int = 4096,
        max_retries: int = 2,
        structured: str = "auto",
        prompt_form: str = "auto",
        gate: ModelGate | None = None,
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"llm.base_url must be an http(s) URL, got {base_url!r}")
        if structured != "auto" and structured not in STRUCTURED_MODES:
            raise ConfigError(f"llm.structured must be auto or one of {STRUCTURED_MODES}, got {structured!r}")
        try:
            choose_form(prompt_form, has_chat=True, has_completion=True, default="chat")
        except ValueError as err:
            raise ConfigError(f"llm.prompt_form: {err}") from None
        if api_key_env and not os.environ.get(api_key_env):
            raise ConfigError(f"environment variable {api_key_env} (llm.api_key_env) is not set")
        try:
            import openai
        except ImportError as err:
            raise ConfigError(f"the openai backend needs the openai package ({err}); run scripts/setup.sh") from None
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else root + "/v1"
        self.model = model
        self.name = f"openai:{model or 'default'}"
        self.n_ctx = n_ctx
        self.timeout = timeout
        self.structured = structured
        self.prompt_form = prompt_form
        self.gate = gate or ModelGate()
        self._openai = openai
        for noisy in ("httpx", "httpx2"):  # one INFO line per request drowns the bot's own log
            if logging.getLogger(noisy).level == logging.NOTSET:
                logging.getLogger(noisy).setLevel(logging.WARNING)
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key or NO_KEY, timeout=timeout,
                                     max_retries=max_retries)
        self._lock = threading.Lock()
        self._server: str | None = None
        self._rejected: set[tuple[str, str]] = set()  # (form, mode) pairs this server refused
        self._no_completions = False

    # ------------------------------------------------------------ discovery

    def server_kind(self) -> str:
        """Which server answers (from /v1/models), probed once; also fills in the model name if unset."""
        with self._lock:
            if self._server is not None:
                return self._server
        kind = "unknown"
        try:
            listing = self._call(lambda: self._client.models.list())
            models = list(getattr(listing, "data", []) or [])
            if models:
                kind = _OWNERS.get(str(getattr(models[0], "owned_by", "")).lower(), "unknown")
                if not self.model:
                    self.model = str(models[0].id)
                    self.name = f"openai:{self.model}"
        except ModelError as err:
            log.warning("could not list models at %s (%s); assuming a generic OpenAI-compatible server",
                        self.base_url, err)
        with self._lock:
            self._server = kind
        return kind

    def _ladder(self, form: str) -> list[str]:
        modes = [self.structured] if self.structured != "auto" else _LADDERS[self.server_kind()][form]
        return [m for m in modes if (form, m) not in self._rejected]

    def capabilities(self) -> Capabilities:
        kind = self.server_kind()
        chat_modes, completion_modes = self._ladder("chat"), self._ladder("completion")
        preferred = choose_form(self.prompt_form, has_chat=True, has_completion=not self._no_completions,
                                default="chat")
        return Capabilities(completion=not self._no_completions, chat=True, chat_template=True,
                            structured_chat=chat_modes[0] if chat_modes else "none",
                            structured_completion=completion_modes[0] if completion_modes else "none",
                            tool_calls=False, n_ctx=self.n_ctx, preferred=preferred, server=kind)

    def count_tokens(self, text: str) -> int:
        """An estimate (4 characters a token): the API has no standard tokenizer endpoint."""
        return math.ceil(len(text) / 4)

    # ------------------------------------------------------------ transport

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run one client call; turn what is left after the client's retries into a named error."""
        o = self._openai
        try:
            return fn()
        except o.APITimeoutError:
            raise ModelTimeoutError(f"{self.base_url} did not answer within {self.timeout:g}s "
                                    f"(llm.timeout); the server may be overloaded or the model too slow") from None
        except o.APIConnectionError as err:
            raise ModelUnavailableError(f"could not reach {self.base_url}: {err.__cause__ or err}") from None
        except o.RateLimitError as err:
            raise ModelUnavailableError(f"{self.base_url} kept answering HTTP 429 (rate limited) after "
                                        f"{self._client.max_retries} retries: {_detail(err)}") from None
        except o.InternalServerError as err:
            raise ModelUnavailableError(f"{self.base_url} answered HTTP {err.status_code} after "
                                        f"{self._client.max_retries} retries: {_detail(err)}") from None
        except o.APIStatusError:
            raise  # 4xx: the caller decides (structured-mode fallback, missing endpoint)
        except (o.APIError, ValueError) as err:
            raise ModelError(f"{self.base_url} sent a response that is not an OpenAI-style answer: {err}") from None

    def _request(self, form: str, body: dict[str, Any], schema: dict | None) -> tuple[Any, str]:
        """Send ``body``, adding the strongest structured mode the server takes; returns (response, mode)."""
        create = self._client.chat.completions.create if form == "chat" else self._client.completions.create
        o = self._openai
        modes = self._ladder(form) if schema is not None else [""]
        if not modes:
            modes = ["none"]
        last: Exception | None = None
        for mode in modes:
            extra = structured_fields(mode, schema, form) if schema is not None else {}
            if extra is None:
                continue
            fields = dict(body)
            if form == "chat" and "response_format" in extra:  # /completions takes it only as an extra field
                fields["response_format"] = extra.pop("response_format")
            try:
                return self._call(partial(create, **fields, extra_body=extra or None)), mode
            except o.NotFoundError as err:
                if form == "completion":
                    self._no_completions = True
                    raise ModelError(f"{self.base_url} has no /completions endpoint ({_detail(err)}); set "
                                     f"llm.prompt_form = \"chat\"") from None
                raise ModelError(f"{self.base_url} has no /chat/completions endpoint: {_detail(err)}") from None
            except (o.BadRequestError, o.UnprocessableEntityError) as err:
                if not mode or mode == "none":
                    raise ModelError(f"{self.base_url} rejected the request: {_detail(err)}") from None
                log.warning("%s rejected structured mode %r for %s (%s); trying the next one",
                            self.base_url, mode, form, _detail(err))
                self._rejected.add((form, mode))
                last = err
            except o.APIStatusError as err:
                raise ModelError(f"{self.base_url} answered HTTP {err.status_code}: {_detail(err)}") from None
        raise ModelError(f"{self.base_url} rejected every structured-output mode: {last and _detail(last)}")

    # ------------------------------------------------------------ generation

    def _complete(self, prompt: str, request: Request) -> Completion:
        """Raw text completion on /v1/completions."""
        return self._generate("completion", {"prompt": prompt}, request, self.count_tokens(prompt))

    def _chat(self, turns: list[ChatMessage], request: Request) -> Completion:
        """Chat on /v1/chat/completions; the server applies the model's chat template."""
        prompt_estimate = sum(self.count_tokens(m["content"]) + 4 for m in turns)
        return self._generate("chat", {"messages": turns}, request, prompt_estimate)

    def _model_name(self) -> str:
        self.server_kind()  # fills in the served model's name when none is configured
        return self.model or "default"

    def _generate(self, form: str, prompt: dict[str, Any], request: Request, prompt_estimate: int) -> Completion:
        """Send ``prompt`` (the prompt or the messages) with the request's settings; one Completion back."""
        schema, max_tokens = request.json_schema, request.max_tokens
        body: dict[str, Any] = {"model": self._model_name(), **prompt, "max_tokens": max_tokens,
                                "temperature": request.temperature}
        if request.stop:
            body["stop"] = list(request.stop)
        with self.gate.hold(request.priority):
            started = time.perf_counter()
            response, mode = self._request(form, body, schema)
            total = time.perf_counter() - started
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            raise ModelError(f"{self.base_url} sent a response that is not an OpenAI-style answer: "
                             f"{str(response)[:200]!r}")
        if not choices:
            raise ModelError(f"{self.base_url} returned no choices: {str(response)[:200]}")
        choice = choices[0]
        if form == "chat":
            message = getattr(choice, "message", None)
            text = (getattr(message, "content", None) or "") if message is not None else ""
        else:
            text = getattr(choice, "text", None) or ""
        finish = getattr(choice, "finish_reason", None) or "stop"
        if schema is not None:
            parse_checked(text, schema, finish_reason=finish, name=f"{self.name} ({form}, {mode or 'none'})",
                          max_tokens=max_tokens)
        usage = getattr(response, "usage", None)
        extra = getattr(response, "model_extra", None) or {}
        timings = extra.get("timings") or {}  # llama.cpp's server reports these
        prompt_seconds = float(timings.get("prompt_ms", 0.0)) / 1000
        gen_seconds = float(timings.get("predicted_ms", 0.0)) / 1000 or max(total - prompt_seconds, 0.0)
        return Completion(
            text=text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or prompt_estimate),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or self.count_tokens(text)),
            prompt_seconds=prompt_seconds,
            gen_seconds=gen_seconds,
            total_seconds=total,
            finish_reason=finish,
            model=str(getattr(response, "model", "") or self.model),
            reused_prompt_tokens=int(timings.get("cache_n", 0) or 0),
            form=form,
            structured=mode if schema is not None else "",
        )


def _detail(err: Exception) -> str:
    """The server's own words about an error, short, without request headers."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else inner
        return str(text or body)[:300]
    message = getattr(err, "message", None) or str(err)
    return str(message)[:300]
