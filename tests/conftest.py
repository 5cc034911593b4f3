"""Shared fixtures: real temporary SQLite stores and the real shipped embedding model."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.models import Message  # noqa: E402
from memory.store import Store  # noqa: E402
from tests._properties import CI, PROFILE_ENV, register_profiles  # noqa: E402

register_profiles()
# Derandomized unless CHORUS_HYPOTHESIS names another profile (`make fuzz` sets it to "fuzz").
settings.load_profile(os.environ.get(PROFILE_ENV, CI))


@pytest.fixture(scope="session")
def embedder():
    from memory.embeddings.minilm import MiniLMEmbedder

    return MiniLMEmbedder()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "chorus.db")
    yield s
    s.close()


@pytest.fixture
def vstore(tmp_path, embedder):
    s = Store(tmp_path / "chorus.db", embedder=embedder)
    yield s
    s.close()


def msg(i: int | str, text: str, *, author: str = "alice", channel: str = "general", ts: float | None = None,
        platform: str = "console", workspace: str = "w", **kw) -> Message:
    return Message(platform, workspace, channel, str(i), author.casefold(), author, text,
                   ts if ts is not None else 1_700_000_000 + float(i if isinstance(i, int) else 0) * 60, **kw)
