"""Evaluation and import datasets, all translated to ``Conversation``s of ``Message``s."""
from .base import Conversation, Question, data_dir, default_path
from .jsonl import dump_jsonl, read_jsonl
from .loaders import DATASET_NAMES, load_dataset

__all__ = ["DATASET_NAMES", "Conversation", "Question", "data_dir", "default_path", "dump_jsonl", "load_dataset",
           "read_jsonl"]
