"""Language models behind one protocol: local llama.cpp by default, any OpenAI-compatible server, or a scripted fake.

Heavy backends are imported lazily by ``load_llm`` so importing this package
never needs llama-cpp-python.
"""
from .base import BACKGROUND, INTERACTIVE, LLM, Completion
from .factory import load_llm
from .fake import ScriptedLLM, ScriptExhaustedError
from .gate import ModelGate

__all__ = [
    "BACKGROUND",
    "INTERACTIVE",
    "LLM",
    "Completion",
    "ModelGate",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "load_llm",
]
