"""The shared evaluation data (``../shared/data`` or ``$CHORUS_DATA_DIR``) for tests that read it.

A checkout without that folder skips those tests with the reason, as tests/test_datasets.py does, instead of
failing on a missing file.
"""
from __future__ import annotations

import pytest

from memory.datasets import Conversation, load_dataset
from memory.errors import DatasetError


def real_dataset(name: str) -> list[Conversation]:
    """The named dataset from the shared data folder, or a skip that says where it was looked for."""
    try:
        return load_dataset(name)
    except DatasetError as exc:
        pytest.skip(str(exc))
