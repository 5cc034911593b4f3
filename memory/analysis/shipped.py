"""The shipped act and link models (``memory/models/``), loaded once per process."""
from __future__ import annotations

import threading

from ..errors import AnalysisError
from .types import ActModel, LinkModel

_lock = threading.Lock()
_loaded: tuple[ActModel, LinkModel] | None = None


def shipped_models() -> tuple[ActModel, LinkModel]:
    """The act and link models committed with this version (``chorus train acts`` rebuilds them)."""
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                from .acts import load_act_model
                from .links import load_link_model
            except ImportError as exc:
                raise AnalysisError(f"the analysis models are missing from this install ({exc}); reinstall "
                                    "Chorus or run `chorus train acts`") from exc
            _loaded = (load_act_model(), load_link_model())
        return _loaded
