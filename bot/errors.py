"""The errors adapters catch or raise, as the bot hands them out (the engine defines them).

Adapters import only ``bot`` and ``memory.models`` (tests/test_layers.py checks): this keeps the
error types they need on that side of the line.
"""
from memory.errors import ChorusError, InputError

__all__ = ["ChorusError", "InputError"]
