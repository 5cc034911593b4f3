"""Transcripts the bot reads: the console's demo chat and ``.jsonl`` files (``memory.datasets.jsonl``)."""
from __future__ import annotations

from importlib import resources

from memory.datasets.jsonl import read_jsonl
from memory.models import Message


def demo_messages() -> list[Message]:
    """The demo conversation the console preloads into an empty channel."""
    demo = resources.files("bot").joinpath("demo/demo.jsonl")
    with resources.as_file(demo) as path:
        return read_jsonl(path)


__all__ = ["demo_messages", "read_jsonl"]
