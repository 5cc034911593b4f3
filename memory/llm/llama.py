"""A local GGUF model run in-process through llama.cpp (llama-cpp-python).

Design points:
- Loading is lazy (first call) so importing Chorus or building the config never
  pays for the model; ``load()`` forces it at startup when an early failure is
  wanted.
- Prompts are raw text (the default model is a base model), or chat messages
  rendered through the GGUF's own chat template (``chat``) for instruct models.
- Successive prompts usually share a long prefix (instructions, examples). The
  Llama object keeps the KV cache of the previous call and only evaluates the
  tokens after the longest common prefix. Gemma 3 uses sliding-window attention,
  whose trimmed KV cache cannot be rolled back safely, so the context is created
  with ``swa_full=True`` (a full-size window cache: about 18 KB a token for the
  270M model) to make that reuse correct.
- ``json_schema`` output is constrained by a GBNF grammar built from the schema;
  the grammars are cached because converting the schema is pure overhead.
- Every call goes through a ``ModelGate`` so interactive questions overtake
  queued background work and the non-thread-safe context is never shared.
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ModelError
from .base import Backend, ChatMessage, Completion, Request
from .capabilities import Capabilities, choose_form
from .constrained import generate_constrained
from .gate import ModelGate
from .structured import parse_checked

SETUP_HINT = "run scripts/setup.sh (it builds llama-cpp-python with CPU flags that are safe on this machine)"
CONFIG_KEY = "llm.model_path"
GGUF_MAGIC = b"GGUF"
_GRAMMAR_CACHE_SIZE = 64


def _default_threads() -> int:
    """Use every core we may run on; llama-cpp-python's default (half) wastes a 2-core box."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _common_prefix(a: Any, b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaCppLLM(Backend):
    """The default backend: one GGUF model, shared by all callers through a gate."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        seed: int = 0,
        n_batch: int = 512,
        verbose: bool = False,
        *,
        swa_full: bool = True,
        gate: ModelGate | None = None,
        prompt_form: str = "auto",
        base_model: bool = False,
    ) -> None:
        self.model_path = Path(model_path).expanduser()
        self.name = self.model_path.stem
        self.n_ctx = n_ctx
        self.n_gpu_layers = n_gpu_layers
        self.n_threads = n_threads or _default_threads()
        self.seed = seed
        self.n_batch = n_batch
        self.verbose = verbose
        self.swa_full = swa_full
        self.gate = gate or ModelGate()
        choose_form(prompt_form, has_chat=True, has_completion=True, default="completion")  # validates
        self.prompt_form = prompt_form
        self.base_model = base_model  # a base model is prompted raw even when its GGUF has a template
        self._formatter: Any = None
        self._llama: Any = None
        self._llama_cpp: Any = None
        self._load_lock = threading.Lock()
        self._grammar_lock = threading.Lock()
        self._grammars: dict[str, Any] = {}
        # One seed per call drawn from a seeded stream: a run is reproducible, yet a
        # retry of the same prompt at temperature > 0 gets a fresh sample.
        self._seeds = random.Random(seed)

    # ------------------------------------------------------------------ loading

    @property
    def loaded(self) -> bool:
        return self._llama is not None

    def load(self) -> None:
        """Load the model now (idempotent); raises ModelError saying what to fix."""
        if self._llama is not None:
            return
        with self._load_lock:
            if self._llama is not None:
                return
            self._check_file()
            llama_cpp = self._import_llama_cpp()
            try:
                llama = llama_cpp.Llama(
                    model_path=str(self.model_path),
                    n_ctx=self.n_ctx,
                    n_gpu_layers=self.n_gpu_layers,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    n_batch=self.n_batch,
                    n_ubatch=self.n_batch,
                    seed=self.seed,
                    swa_full=self.swa_full,
                    verbose=self.verbose,
                )
            except (ValueError, RuntimeError, OSError) as err:
                raise ModelError(
                    f"could not load {self.model_path} as a GGUF model ({err}); the file is probably "
                    f"corrupt or truncated, or made for a newer llama.cpp. Re-download it or set "
                    f"{CONFIG_KEY} to a working GGUF file"
                ) from None
            self._llama_cpp = llama_cpp
            self._llama = llama

    def _check_file(self) -> None:
        path = self.model_path
        if not path.is_file():
            what = "is a directory, not a model file" if path.is_dir() else "does not exist"
            raise ModelError(
                f"model file {path} {what}; set {CONFIG_KEY} to a GGUF file, "
                f"or leave it empty to use the shipped default model"
            )
        try:
            with path.open("rb") as handle:
                magic = handle.read(4)
        except OSError as err:
            raise ModelError(f"cannot read model file {path}: {err}; check {CONFIG_KEY} and file permissions") from None
        if magic != GGUF_MAGIC:
            raise ModelError(
                f"{path} is not a GGUF model file (it starts with {magic!r}, not {GGUF_MAGIC!r}); "
                f"it may be corrupt or in another format. Set {CONFIG_KEY} to a .gguf file"
            )

    @staticmethod
    def _import_llama_cpp() -> Any:
        # llama.cpp's CPU threads meet at an OpenMP barrier after every operation.
        # By default waiting threads spin; when anything else wants the CPU (the
        # embedder, a neighbour on a small VPS) spinning threads starve the one doing
        # the work: on this 2-core box under load, 2 threads fell from ~15 to 1-5
        # tok/s. Passive waiting sleeps instead. Must be set before libgomp loads;
        # an operator's own OMP_WAIT_POLICY wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import llama_cpp
        except ImportError as err:
            raise ModelError(f"llama-cpp-python is not installed ({err}); {SETUP_HINT}") from None
        except OSError as err:  # the shared library is there but will not load
            raise ModelError(f"llama-cpp-python is installed but its library failed to load ({err}); "
                             f"{SETUP_HINT}") from None
        return llama_cpp

    def close(self) -> None:
        """Free the model's memory; the next call loads it again."""
        with self.gate.hold("interactive"):  # never pull the model from under a running call
            with self._load_lock:
                if self._llama is not None:
                    self._llama.close()
                    self._llama = None
                    self._formatter = None

    # ---------------------------------------------------------------- helpers

    def _loaded(self) -> Any:
        """The Llama object, loading it again if ``close()`` ran meanwhile (call under the gate)."""
        self.load()
        return self._llama

    @staticmethod
    def _tokenize_prompt(llama: Any, prompt: str) -> list[int]:
        # Exactly how create_completion tokenizes, so counts and prefix reuse agree.
        return llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as it would appear inside a prompt (no BOS)."""
        # Tokenizing only reads the vocabulary, which llama.cpp allows alongside a
        # running generation, so prompt budgeting never queues at the gate.
        self.load()
        llama = self._llama
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _grammar(self, schema: dict) -> Any:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self._grammar_lock:
            grammar = self._grammars.get(key)
            if grammar is None:
                try:
                    # Property order matters to the model (it writes fields in this order), so the
                    # grammar is built from the schema as given; the sorted form is only the cache key.
                    grammar = self._llama_cpp.LlamaGrammar.from_json_schema(json.dumps(schema),
                                                                           verbose=self.verbose)
                except Exception as err:  # the converter raises bare Exceptions
                    raise ModelError(f"cannot turn this JSON schema into a grammar: {err}") from None
                if len(self._grammars) >= _GRAMMAR_CACHE_SIZE:
                    self._grammars.pop(next(iter(self._grammars)))
                self._grammars[key] = grammar
            return grammar

    @staticmethod
    def _reusable_prefix(llama: Any, tokens: list[int]) -> int:
        """How many prompt tokens llama.cpp will take from the KV cache (mirrors Llama.generate)."""
        try:
            cached = int(llama.n_tokens)
            if cached == 0:
                return 0
            common = _common_prefix(llama.input_ids[:cached], tokens)
        except (AttributeError, TypeError):
            return 0
        if common == len(tokens):
            exact = cached == len(tokens) and not getattr(llama, "_requires_eval", True)
            return common if exact else common - 1
        return common

    def _perf_reset(self, llama: Any) -> None:
        self._llama_cpp.llama_perf_context_reset(llama.ctx)

    def _perf_prompt_seconds(self, llama: Any) -> float:
        """Time llama.cpp spent on batched prompt evaluation since the last reset."""
        return self._llama_cpp.llama_perf_context(llama.ctx).t_p_eval_ms / 1000.0

    # ------------------------------------------------------------- generation

    def _complete(self, prompt: str, request: Request) -> Completion:
        return self._run(lambda llama: self._tokenize_prompt(llama, prompt), request, form="completion")

    def _chat(self, turns: list[ChatMessage], request: Request) -> Completion:
        """Answer chat ``turns`` through the GGUF's own chat template.

        The template is rendered exactly as llama-cpp-python's ``create_chat_completion``
        renders it (same Jinja formatter, same BOS handling), then generation runs on
        the same path as ``complete`` so prefix reuse and the fast grammar decoder apply.
        """
        formatter = self._chat_formatter()
        try:
            rendered = formatter(messages=turns)
        except Exception as err:  # jinja raises its own errors (e.g. a template that rejects system turns)
            raise ModelError(f"{self.name}: its chat template failed on these messages: {err}") from None
        extra = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop] if rendered.stop else []
        stops = list(request.stop or []) + [s for s in extra if s]
        add_bos = not rendered.added_special
        return self._run(lambda llama: llama.tokenize(rendered.prompt.encode("utf-8"), add_bos=add_bos, special=True),
                         replace(request, stop=stops), form="chat")

    def chat_template(self) -> str | None:
        """The Jinja chat template stored in the GGUF, or None for a model without one."""
        self.load()
        template = (getattr(self._llama, "metadata", None) or {}).get("tokenizer.chat_template")
        return template or None

    def _chat_formatter(self) -> Any:
        with self._load_lock:
            if self._formatter is not None:
                return self._formatter
        template = self.chat_template()
        if template is None:
            raise ModelError(f"{self.name} has no chat template in its GGUF; use the completion form "
                             f"(llm.prompt_form = \"completion\") or a model that ships one")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = self._llama
        eos_id, bos_id = llama.token_eos(), llama.token_bos()
        eos = llama._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = llama._model.token_get_text(bos_id) if bos_id != -1 else ""
        formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                        stop_token_ids=[eos_id] if eos_id != -1 else None)
        with self._load_lock:
            self._formatter = formatter
        return formatter

    def capabilities(self) -> Capabilities:
        """What this GGUF supports; loads the model to read its metadata."""
        has_template = self.chat_template() is not None
        default = "chat" if has_template and not self.base_model else "completion"
        preferred = choose_form(self.prompt_form, has_chat=has_template, has_completion=True, default=default)
        return Capabilities(completion=True, chat=has_template, chat_template=has_template,
                            structured_chat="json_schema" if has_template else "none",
                            structured_completion="json_schema", tool_calls=False, n_ctx=self.n_ctx,
                            preferred=preferred)

    def _run(self, tokenize: Callable[[Any], list[int]], request: Request, *, form: str) -> Completion:
        max_tokens, json_schema, stop = request.max_tokens, request.json_schema, request.stop
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.load()  # a slow first load should not hold the gate
        grammar = self._grammar(json_schema) if json_schema is not None else None
        with self.gate.hold(request.priority):
            llama = self._loaded()
            tokens = tokenize(llama)
            if len(tokens) >= self.n_ctx:
                raise ModelError(
                    f"prompt is {len(tokens)} tokens but the context window is {self.n_ctx}; "
                    f"shorten the prompt or raise llm.n_ctx"
                )
            reused = self._reusable_prefix(llama, tokens)
            self._perf_reset(llama)
            started = time.perf_counter()
            result: dict[str, Any]  # create_completion's response shape, which the grammar path builds too
            try:
                if grammar is not None:
                    # JSON output: check the best few tokens against the grammar instead of filtering
                    # the whole vocabulary each step (see memory/llm/constrained.py).
                    decoded = generate_constrained(self._llama_cpp, llama, grammar, tokens, max_tokens,
                                                   temperature=request.temperature,
                                                   seed=self._seeds.getrandbits(32))
                    result = {"choices": [{"text": llama.detokenize(decoded.tokens, prev_tokens=tokens).decode(
                        "utf-8", "replace"), "finish_reason": decoded.finish_reason}],
                              "usage": {"prompt_tokens": len(tokens), "completion_tokens": len(decoded.tokens)}}
                    reused = decoded.reused_prompt_tokens
                else:
                    result = llama.create_completion(
                        tokens,
                        max_tokens=max_tokens,
                        temperature=request.temperature,
                        stop=list(stop) if stop else [],
                        seed=self._seeds.getrandbits(32),
                        stream=False,
                    )
            except (ValueError, RuntimeError) as err:
                raise ModelError(f"{self.name}: generation failed: {err}") from None
            total = time.perf_counter() - started
            prompt_seconds = min(self._perf_prompt_seconds(llama), total)

        choice = result["choices"][0]
        text: str = choice["text"]
        finish = choice.get("finish_reason") or "stop"
        usage = result.get("usage") or {}
        if json_schema is not None:
            # The grammar guarantees the shape; only a cut-off or unparsable text can still fail here.
            parse_checked(text, None, finish_reason=finish, name=self.name, max_tokens=max_tokens)
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", len(tokens))),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            prompt_seconds=prompt_seconds,
            gen_seconds=max(total - prompt_seconds, 0.0),
            total_seconds=total,
            finish_reason=finish,
            model=self.name,
            reused_prompt_tokens=max(reused, 0),
            form=form,
            structured="json_schema" if json_schema is not None else "",
        )

    def raw_generate_speed(self, prompt: str, n_tokens: int) -> Completion:
        """Generate exactly ``n_tokens`` greedily with llama.cpp directly, for benchmarks.

        No grammar, no stop strings, no end-of-text check and a cold KV cache, so
        the figure is what llama-cpp-python itself manages on this machine. The gate
        is still taken (the context must not be used by two threads) but waiting
        for it is not timed.
        """
        if n_tokens < 1:
            raise ValueError("n_tokens must be at least 1")
        self.load()
        with self.gate.hold("background"):
            llama = self._loaded()
            tokens = self._tokenize_prompt(llama, prompt)
            if len(tokens) + n_tokens > self.n_ctx:
                raise ModelError(f"prompt plus {n_tokens} tokens does not fit in n_ctx={self.n_ctx}")
            llama.reset()
            self._perf_reset(llama)
            generated: list[int] = []
            started = time.perf_counter()
            for token in llama.generate(tokens, temp=0.0, reset=True):
                generated.append(token)
                if len(generated) >= n_tokens:
                    break
            total = time.perf_counter() - started
            prompt_seconds = min(self._perf_prompt_seconds(llama), total)
            text = llama.detokenize(generated, prev_tokens=tokens).decode("utf-8", "replace")
        return Completion(
            text=text,
            prompt_tokens=len(tokens),
            completion_tokens=len(generated),
            prompt_seconds=prompt_seconds,
            gen_seconds=max(total - prompt_seconds, 0.0),
            total_seconds=total,
            finish_reason="length",
            model=self.name,
        )
