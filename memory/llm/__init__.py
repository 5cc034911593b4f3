"""Language models behind one protocol (raw completion and chat): local llama.cpp by default, any
OpenAI-compatible server, or a scripted fake.

Heavy backends are imported lazily by ``load_llm`` so importing this package
never needs llama-cpp-python.
"""
from .base import BACKGROUND, INTERACTIVE, LLM, ChatLLM, ChatMessage, Completion
from .capabilities import Capabilities
from .chat import generate
from .factory import load_llm
from .fake import ScriptedLLM, ScriptExhaustedError
from .gate import ModelGate

__all__ = [
    "BACKGROUND",
    "INTERACTIVE",
    "LLM",
    "Capabilities",
    "ChatLLM",
    "ChatMessage",
    "Completion",
    "ModelGate",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "generate",
    "load_llm",
]
