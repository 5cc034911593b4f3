"""The loader dispatcher: dataset names to the format modules that read them.

It sits above ``base`` and the format modules (which import only ``base``), so the
dependencies point one way and no import has to be deferred to break a circle.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import DatasetError
from .base import ALIASES, DATA_ENV, Conversation, default_path
from .friendsqa import load_friendsqa
from .jsonl import load_jsonl
from .locomo import load_locomo
from .socialmem import load_socialmem

LOADERS: dict[str, Callable[[Path], list[Conversation]]] = {
    "locomo": load_locomo,
    "socialmem": load_socialmem,
    "friendsqa": load_friendsqa,
    "jsonl": load_jsonl,
}
DATASET_NAMES = tuple(LOADERS)


def load_dataset(name: str, path: str | Path | None = None) -> list[Conversation]:
    """Load a named dataset (``locomo``, ``socialmem``, ``friendsqa``, ``jsonl``).

    ``path`` overrides the default location, so other splits of the same
    formats load the same way.
    """
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in LOADERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASET_NAMES)}")
    target = Path(path).expanduser() if path is not None else default_path(key)
    if not target.exists():
        hint = "" if path is not None else f" (set {DATA_ENV} or pass --data to point elsewhere)"
        raise DatasetError(f"{key} data not found at {target}{hint}")
    return LOADERS[key](target)
