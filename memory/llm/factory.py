"""Build the configured language model from plain settings."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import LLM

BACKENDS = ("llama", "openai")


def load_llm(backend: str = "llama", model_path: str | None = None, **opts: Any) -> LLM:
    """Return an LLM for ``backend``; nothing heavy is loaded until the first call.

    "llama": a local GGUF through llama.cpp; ``model_path=None`` means the
    shipped default model. Other options go to ``LlamaCppLLM`` (n_ctx, n_threads...).
    "openai": an OpenAI-compatible server; needs ``base_url``, and takes ``model``,
    ``api_key_env``, ``timeout``, ``max_retries``, ``structured``, ``prompt_form``
    and the other ``OpenAIChatLLM`` options.
    """
    if backend == "llama":
        from .llama import LlamaCppLLM

        if model_path is None:
            from .default_model import default_model_path

            model_path = str(default_model_path())
            opts.setdefault("base_model", True)  # the shipped Gemma 3 270M is a base model: raw prompts
        try:
            return LlamaCppLLM(model_path, **opts)
        except TypeError as err:
            raise ConfigError(f"unknown option for the llama backend: {err}") from None
    if backend == "openai":
        from .openai_chat import OpenAIChatLLM

        if model_path is not None:
            raise ConfigError("llm.model_path is for the llama backend; the openai backend uses llm.model")
        if not opts.get("base_url"):
            raise ConfigError("the openai backend needs llm.base_url (e.g. http://localhost:8080/v1)")
        try:
            return OpenAIChatLLM(**opts)
        except TypeError as err:
            raise ConfigError(f"unknown option for the openai backend: {err}") from None
    raise ConfigError(f"unknown llm.backend {backend!r}; choose one of {', '.join(BACKENDS)}")
