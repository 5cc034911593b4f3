"""``chorus doctor``: what the configured model supports, and one live smoke test of each prompt form."""
from __future__ import annotations

import argparse
import logging

from memory.errors import ChorusError
from memory.llm.chat import capabilities_of
from memory.llm.smoke import smoke_test

from .app import load_llm_from
from .config import Settings

log = logging.getLogger(__name__)


def describe_settings(settings: Settings) -> str:
    cfg = settings.llm
    if cfg.backend == "openai":
        return (f"backend openai: {cfg.base_url or '(no base_url)'} model={cfg.model or '(first served)'} "
                f"structured={cfg.structured} prompt_form={cfg.prompt_form} timeout={cfg.timeout:g}s "
                f"retries={cfg.max_retries}")
    return (f"backend llama: {cfg.model_path or 'shipped default (Gemma 3 270M base)'} n_ctx={cfg.n_ctx} "
            f"n_gpu_layers={cfg.n_gpu_layers} prompt_form={cfg.prompt_form}")


def doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Print the model's capabilities and smoke-test each path; exit 1 if any path that exists fails."""
    print(describe_settings(settings))
    try:
        llm = load_llm_from(settings)
        caps = capabilities_of(llm)
    except ChorusError as exc:
        log.debug("doctor could not load the model", exc_info=True)
        print(f"model: FAIL {exc}")
        return 1
    print(f"model: {getattr(llm, 'name', '?')}")
    print(f"supports: {caps.describe()}")
    reader = settings.answer.reader
    print(f"reader: {'on' if reader else 'off'} (answer.reader)"
          + ("; needs a model that follows instructions" if reader and not caps.chat else ""))
    print("smoke tests:")
    results = smoke_test(llm)
    for r in results:
        print(r.line())
    failed = [r for r in results if not r.ok and not r.skipped]
    print("all paths that exist work" if not failed else f"{len(failed)} path(s) failed")
    return 1 if failed else 0
