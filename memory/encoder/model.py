"""The fine-tuned encoder at run time: int8 ONNX through onnxruntime, numpy around it.

`Encoder.read` scores (question, candidate in context) pairs: P(the candidate answers the question) and
the words of the candidate that answer it. One call batches every candidate of a question, sorted by
length so little work goes to padding. The model file and its metadata (threshold, figures, what it was
trained on) ship in ``memory/models/``; `shipped_encoder` loads them once per process.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..embeddings.minilm_onnx import cpu_session_options
from ..errors import ModelMissing
from .build import assembled
from .inputs import Encoded, Tokens, batch, encode_pair, span_text

MODELS = Path(__file__).resolve().parent.parent / "models"
VERSION = "encoder-v2"
MAX_SPAN_TOKENS = 30
BATCH_TOKENS = 2048


@dataclass
class Reading:
    """What the encoder reads in one candidate."""

    p: float  # P(this message answers the question)
    span: str  # the words that answer it ("" when the model points at none)


class Encoder:
    """Scores question-candidate pairs with the shipped encoder file."""

    def __init__(self, path: Path, meta: dict, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.meta = meta
        self.version = str(meta.get("version", path.stem))
        self.threshold = float(meta.get("threshold", 0.5))
        self.rerank_weight = float(meta.get("rerank_weight", 0.25))  # the reranker's share in the reply's order
        # A message of a discussion speaks to the question at this P or above (each member, who hasn't). Not the
        # decline threshold, which asks whether the best of ten answers: chosen per model on held-apart chats.
        self.about_p = float(meta.get("about_p", 0.5))
        # Trained with each candidate's age beside it (inputs.age_tags): it must be read with them too.
        self.reads_age = bool(meta.get("options", {}).get("age", False))
        self.tokens = Tokens()
        full = assembled(path)
        try:
            self._session = ort.InferenceSession(str(full), cpu_session_options(threads),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelMissing(f"could not load the encoder {full}: {exc}; delete it to rebuild it") from exc

    def encode(self, question: str, pairs: Sequence[tuple[str, str]],
               ages: Sequence[str] | None = None) -> list[Encoded]:
        """Input rows for (context, candidate) pairs, tokenised in one batch; ``ages``: their age tags, read
        only by a model trained with them."""
        if self.reads_age and ages is None:
            raise ValueError(f"the encoder {self.version} reads each candidate's age; pass ages")
        tags = list(ages) if self.reads_age and ages is not None else [""] * len(pairs)
        texts = [question] + [t for ctx, cand in pairs for t in (ctx, cand)]
        pieces = self.tokens.pieces(texts)
        return [encode_pair(self.tokens, question, ctx, cand, pieces=(pieces[0], pieces[1 + 2 * i], pieces[2 + 2 * i]),
                            age=tags[i])
                for i, (ctx, cand) in enumerate(pairs)]

    def read(self, question: str, pairs: Sequence[tuple[str, str]],
             ages: Sequence[str] | None = None) -> list[Reading]:
        """One reading per (context, candidate) pair, in order (``ages``: as `encode`)."""
        if not pairs:
            return []
        rows = self.encode(question, pairs, ages)
        out: list[Reading | None] = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
        k = 0
        while k < len(order):
            longest = len(rows[order[min(len(order) - 1, k + 15)]].ids)
            size = max(1, min(16, BATCH_TOKENS // max(1, longest)))
            idx = order[k:k + size]
            ids, mask, types = batch([rows[i] for i in idx], self.tokens.pad)
            logit, spans = self._session.run(["answer_logit", "span_logits"], {
                "input_ids": ids.astype(np.int32), "attention_mask": mask.astype(np.int32),
                "token_type_ids": types.astype(np.int32)})
            for j, i in enumerate(idx):
                r = rows[i]
                a, b = best_span(spans[j, :, 0], spans[j, :, 1], r.cand_start, r.cand_end)
                out[i] = Reading(float(1.0 / (1.0 + np.exp(-logit[j]))), span_text(r, a, b) if a >= 0 else "")
            k += size
        return [r for r in out if r is not None]


    def classify(self, output: str, rows: Sequence[Encoded]) -> np.ndarray:
        """Softmax probabilities of a classification head (``act_logits``, ``link_logits``) for encoded rows."""
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        out: list[np.ndarray | None] = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
        k = 0
        while k < len(order):
            longest = len(rows[order[min(len(order) - 1, k + 31)]].ids)
            size = max(1, min(32, 4096 // max(1, longest)))
            idx = order[k:k + size]
            ids, mask, types = batch([rows[i] for i in idx], self.tokens.pad)
            (logits,) = self._session.run([output], {"input_ids": ids.astype(np.int32),
                                                     "attention_mask": mask.astype(np.int32),
                                                     "token_type_ids": types.astype(np.int32)})
            z = np.exp(logits - logits.max(axis=1, keepdims=True))
            for j, i in enumerate(idx):
                out[i] = z[j] / z[j].sum()
            k += size
        return np.stack([o for o in out if o is not None])


def best_span(start: np.ndarray, end: np.ndarray, lo: int, hi: int, longest: int = MAX_SPAN_TOKENS
              ) -> tuple[int, int]:
    """The (start, end) token pair inside [lo, hi) with the highest summed logit, at most ``longest`` long."""
    if hi <= lo:
        return -1, -1
    s, e = start[lo:hi], end[lo:hi]
    n = hi - lo
    score = s[:, None] + e[None, :]
    ok = np.triu(np.ones((n, n), dtype=bool)) & ~np.triu(np.ones((n, n), dtype=bool), longest)
    score = np.where(ok, score, -np.inf)
    a, b = np.unravel_index(int(np.argmax(score)), score.shape)
    return lo + int(a), lo + int(b)


_lock = threading.Lock()
_loaded: dict[str, Encoder] = {}


def graph_meta(graph: Path) -> dict:
    """The metadata an encoder graph is read with: the shipped ``<version>.json`` beside it, else its training
    run's ``options.json`` (a run folder), else only its name. The options say what the model reads."""
    shipped = graph.with_suffix(".json")
    if shipped.exists():
        return dict(json.loads(shipped.read_text("utf-8")))
    options = graph.parent / "options.json"
    if options.exists():
        return {"version": graph.parent.name, "options": json.loads(options.read_text("utf-8"))}
    return {"version": graph.stem}


def shipped_encoder(folder: Path | None = None, version: str = VERSION) -> Encoder:
    """The encoder committed with this version (``chorus train answer`` rebuilds it), loaded once."""
    base = folder or MODELS
    key = str(base / version)
    with _lock:
        if key not in _loaded:
            meta_path = base / f"{version}.json"
            try:
                meta = json.loads(meta_path.read_text("utf-8"))
            except (OSError, ValueError) as exc:
                raise ModelMissing(f"the encoder's metadata {meta_path} is missing or unreadable ({exc}); "
                                   "reinstall Chorus or run `chorus train answer`") from exc
            _loaded[key] = Encoder(base / f"{version}.onnx", meta)
        return _loaded[key]
