"""Shared shapes, locations and parsing helpers for evaluation and import data.

Every dataset is turned into ``Conversation`` objects holding ordinary
``Message`` values, so the evaluator feeds benchmark chats through exactly the
same ingest path as live platform traffic.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ChorusError, DatasetError
from ..models import Message

DATA_ENV = "CHORUS_DATA_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]

# Where each named dataset lives inside the shared data folder.
DEFAULT_PATHS: dict[str, str] = {
    "locomo": "locomo/locomo10.json",
    "socialmem": "socialmembench",
    "friendsqa": "friendsqa/friendsqa_dev.json",
}
ALIASES = {"socialmembench": "socialmem", "social": "socialmem", "friends": "friendsqa"}


@dataclass
class Question:
    """One benchmark question with the msg_ids that hold its gold evidence."""

    id: str
    question: str
    answer: str | None
    category: str
    evidence: list[str] = field(default_factory=list)
    adversarial: bool = False
    extra: dict = field(default_factory=dict)


@dataclass
class Conversation:
    """One chat history (one memory scope) and the questions asked about it.

    ``dropped_evidence`` counts gold evidence ids that named no message, so a
    scorer can report them instead of silently losing them.
    """

    id: str
    messages: list[Message]
    questions: list[Question] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    dropped_evidence: int = 0

    @property
    def msg_ids(self) -> set[str]:
        return {m.msg_id for m in self.messages}


def data_dir() -> Path:
    """The shared data folder: ``$CHORUS_DATA_DIR`` or ``<repo>/../shared/data``."""
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return REPO_ROOT.parent / "shared" / "data"


def default_path(name: str) -> Path:
    """The default file or folder for a named dataset."""
    key = ALIASES.get(name, name)
    if key not in DEFAULT_PATHS:
        raise DatasetError(f"dataset {name!r} has no default location; pass a path with --data")
    return data_dir() / DEFAULT_PATHS[key]


# ---- helpers shared by the format modules ---------------------------------

def read_text(path: Path, expected: str) -> str:
    """A dataset file's UTF-8 text; every failure is a DatasetError naming the file and what was ``expected``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise DatasetError(f"{path} is a folder; expected {expected}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into a DatasetError that names the file."""
    text = read_text(Path(path), "a JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def require(obj: Any, key: str, where: str, kind: type | tuple[type, ...] | None = None) -> Any:
    """Fetch ``obj[key]`` or raise a DatasetError naming the key and where it was expected."""
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object with key {key!r}, found {type(obj).__name__}")
    if key not in obj:
        raise DatasetError(f"{where}: missing key {key!r}")
    value = obj[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DatasetError(f"{where}: key {key!r} should be {names}, found {type(value).__name__}")
    return value


def make_message(where: str, **fields: Any) -> Message:
    """Build a Message, reporting validation failures as dataset errors with their location."""
    try:
        return Message(**fields)
    except ChorusError as exc:
        raise DatasetError(f"{where}: {exc}") from None


def parse_iso(text: str) -> float:
    """ISO 8601 to unix seconds; a time without a zone is taken as UTC."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def slug(text: str) -> str:
    """A lowercase id-safe form of a display name ("Chandler Bing" -> "chandler_bing")."""
    out = re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")
    return out or "unknown"


def dedupe(items: list[str]) -> list[str]:
    """Drop repeats, keeping first-seen order."""
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
