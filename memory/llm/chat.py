"""Pick the prompt form a model wants: raw completion or chat messages.

Callers (the writer, the answerer, the reader) build both forms of their prompt
and hand them to ``generate``; it asks the backend's ``capabilities()`` which form
fits and calls ``complete`` or ``chat``. A backend without ``chat`` (an older or
third-party LLM object) is treated as completion-only, so nothing that worked
with raw prompts stops working.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..errors import ModelError
from .base import ChatMessage, Completion
from .capabilities import Capabilities, choose_form

log = logging.getLogger(__name__)


def capabilities_of(llm: Any) -> Capabilities:
    """The backend's own answer, or "completion only" for objects that predate the chat protocol."""
    probe = getattr(llm, "capabilities", None)
    if callable(probe) and callable(getattr(llm, "chat", None)):
        return probe()
    return Capabilities(completion=True, chat=False, chat_template=False, structured_chat="none",
                        structured_completion="json_schema", tool_calls=False,
                        n_ctx=int(getattr(llm, "n_ctx", 0) or 0), preferred="completion")


def messages_of(system: str | None, user: str | None,
                examples: Sequence[tuple[str, str]] = ()) -> list[ChatMessage]:
    """A system turn, worked examples as user/assistant pairs, then the real user turn."""
    out: list[ChatMessage] = []
    if system:
        out.append({"role": "system", "content": system})
    for asked, answered in examples:
        out.append({"role": "user", "content": asked})
        out.append({"role": "assistant", "content": answered})
    if user:
        out.append({"role": "user", "content": user})
    return out


def pick_form(llm: Any, *, have_raw: bool, have_chat: bool, form: str = "auto") -> str:
    """'chat' or 'completion' for this call, given which prompt forms the caller has."""
    caps = capabilities_of(llm)
    chat_ok = have_chat and caps.chat
    raw_ok = have_raw and caps.completion
    if not chat_ok and not raw_ok:
        raise ModelError(f"{getattr(llm, 'name', 'the model')} supports neither prompt form this caller has "
                         f"({caps.describe()})")
    return choose_form(form, has_chat=chat_ok, has_completion=raw_ok, default=caps.preferred)


def generate(llm: Any, *, raw_prompt: str | None = None, messages: Sequence[ChatMessage] | None = None,
             max_tokens: int, temperature: float = 0.0, schema: dict | None = None,
             stop: list[str] | None = None, chat_stop: list[str] | None = None,
             priority: str = "background", form: str = "auto") -> Completion:
    """One generation in the form the model prefers (or ``form`` when the caller insists).

    ``stop`` applies to the raw prompt, ``chat_stop`` to the chat form (a chat model
    ends its turn by itself, so it usually needs fewer stop strings).
    """
    chosen = pick_form(llm, have_raw=raw_prompt is not None, have_chat=bool(messages), form=form)
    if chosen == "chat":
        return llm.chat(list(messages or []), max_tokens=max_tokens, temperature=temperature, json_schema=schema,
                        stop=chat_stop, priority=priority)
    return llm.complete(raw_prompt or "", max_tokens=max_tokens, temperature=temperature, json_schema=schema,
                        stop=stop, priority=priority)
