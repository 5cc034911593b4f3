"""The shipped act and link models (``memory/models/``), loaded once per process.

The linear models (``chorus train acts``) always load; when the shipped encoder carries the analysis heads
(``chorus train heads``) and ``encoder`` is on, they are wrapped by the encoder models of encoded.py, which
read the text itself and lean on the linear ones for their shortlist, owner and topic.
"""
from __future__ import annotations

import threading
from pathlib import Path

from ..errors import AnalysisError, ModelMissing
from .types import ActModel, LinkModel

_lock = threading.Lock()
_loaded: dict[bool, tuple[ActModel, LinkModel]] = {}


def linear_models() -> tuple[ActModel, LinkModel]:
    """The linear act and link models (the baseline, and what the encoder models build on)."""
    try:
        from .acts import load_act_model
        from .links import load_link_model
    except ImportError as exc:
        raise AnalysisError(f"the analysis models are missing from this install ({exc}); reinstall "
                            "Chorus or run `chorus train acts`") from exc
    return load_act_model(), load_link_model()


def shipped_models(*, encoder: bool = True) -> tuple[ActModel, LinkModel]:
    """The act and link models committed with this version; ``encoder``: with the encoder's heads when the
    shipped encoder has them."""
    with _lock:
        if False not in _loaded:
            _loaded[False] = linear_models()
        if encoder and True not in _loaded:
            _loaded[True] = with_heads(*_loaded[False]) or _loaded[False]
        return _loaded[encoder]


def with_heads(acts: ActModel, links: LinkModel, folder: Path | None = None) -> tuple[ActModel, LinkModel] | None:
    """The encoder models over ``acts`` and ``links`` when the encoder (shipped, or the one in ``folder``) carries
    the analysis heads; None when it does not."""
    from ..encoder.model import shipped_encoder
    from .acts import LinearActModel
    from .encoded import EncoderActModel, EncoderLinkModel
    from .links import PairLinkModel

    try:
        enc = shipped_encoder(folder)
    except ModelMissing:
        return None
    heads = enc.meta.get("analysis")
    if not heads or not isinstance(acts, LinearActModel) or not isinstance(links, PairLinkModel):
        return None
    return (EncoderActModel(acts, enc, weight=float(heads["act_weight"]), threshold=float(heads["act_threshold"])),
            EncoderLinkModel(links, enc, thresholds={k: float(v) for k, v in heads["link_thresholds"].items()},
                             read_floor=float(heads.get("read_floor", 0.0)),
                             change_pool=int(heads.get("change_pool", 3)),
                             change_weight=float(heads.get("change_weight", 1.0))))
