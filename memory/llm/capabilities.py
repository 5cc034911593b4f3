"""What a configured model can do, so callers pick the prompt form that fits.

A base model (the shipped Gemma 3 270M) only continues raw text; an instruct
model wants its own chat template; a server may or may not honour a JSON schema.
Each backend answers ``capabilities()`` with this record, and ``generate`` (see
``memory/llm/chat.py``) reads it instead of guessing from the model's name.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

#: How structured (JSON-schema) output is enforced, strongest first:
#:   "json_schema": the server/backend constrains output to the schema itself;
#:   "json_object": JSON mode (any JSON object; llama-cpp-python's server also takes a schema there);
#:   "grammar":     a GBNF grammar built from the schema is sent (llama.cpp servers);
#:   "none":        nothing is enforced; the output is parsed and checked against the schema afterwards.
Structured = Literal["json_schema", "json_object", "grammar", "none"]
STRUCTURED_MODES: tuple[str, ...] = ("json_schema", "json_object", "grammar", "none")

#: Which prompt form a caller should use: raw text completion or chat messages.
Form = Literal["completion", "chat"]
FORMS: tuple[str, ...] = ("completion", "chat")


@dataclass(frozen=True)
class Capabilities:
    """One model's abilities as far as the backend can tell (servers are probed lazily)."""

    completion: bool  # raw-prompt completion is available
    chat: bool  # chat messages are available (a chat template locally, /v1/chat/completions on a server)
    chat_template: bool  # the model carries its own chat template (local GGUF) or the server applies one
    structured_chat: str  # how a JSON schema is enforced in chat form (one of STRUCTURED_MODES)
    structured_completion: str  # the same for raw completions
    tool_calls: bool  # the backend accepts OpenAI-style ``tools`` natively (the reader does not need it)
    n_ctx: int
    preferred: str  # the form ``generate`` picks by default ("completion" or "chat")
    server: str = ""  # for HTTP backends: what kind of server answered (llama-cpp-python, llama.cpp, vllm ...)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for logs and ``chorus doctor``."""
        forms = [f for f, ok in (("completion", self.completion), ("chat", self.chat)) if ok]
        return (f"forms={'+'.join(forms) or 'none'} preferred={self.preferred} "
                f"chat_template={'yes' if self.chat_template else 'no'} "
                f"json(chat)={self.structured_chat} json(completion)={self.structured_completion} "
                f"tools={'yes' if self.tool_calls else 'no'} n_ctx={self.n_ctx}"
                + (f" server={self.server}" if self.server else ""))


def choose_form(preference: str, *, has_chat: bool, has_completion: bool, default: str) -> str:
    """Resolve a configured ``prompt_form`` ('auto', 'chat', 'completion') against what exists."""
    if preference not in ("auto", *FORMS):
        raise ValueError(f"prompt form must be auto, chat or completion, got {preference!r}")
    if preference == "chat" and has_chat:
        return "chat"
    if preference == "completion" and has_completion:
        return "completion"
    if preference == "auto" and default in FORMS:
        if (default == "chat" and has_chat) or (default == "completion" and has_completion):
            return default
    return "chat" if has_chat and not has_completion else "completion"
