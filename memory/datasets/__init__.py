"""Evaluation and import datasets, all translated to ``Conversation``s of ``Message``s."""
from .base import Conversation, Question, data_dir, default_path, load_dataset
from .jsonl import dump_jsonl, read_jsonl

__all__ = ["Conversation", "Question", "data_dir", "default_path", "dump_jsonl", "load_dataset", "read_jsonl"]
