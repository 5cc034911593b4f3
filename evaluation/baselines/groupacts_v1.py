"""The group-act classifier of 2026-12-01, kept as a baseline: `chorus eval acts` scores it beside the analysis
pass's act model (memory/analysis/acts.py), which replaced it. Nothing in the bot uses it.

Group acts: which messages settle a decision, state a plan, set a norm, take on a task, or change one.

A learned classifier, not a cue list: the message's MiniLM embedding, what it answers (the message it
replies to, else the turn before it) and a few cheap features of its place in the conversation go
through two logistic regressions (is it a group act; which one), trained on SocialMemBench's reference
writer by the former ``chorus train groupacts``. Only numpy reads the exported coefficients
(evaluation/baselines/groupacts-v1.json).
"""
from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from memory.embeddings.base import Embedder, prefix
from memory.models import StoredMessage

log = logging.getLogger(__name__)

KINDS = ("decision", "plan", "norm", "task", "change")
MODEL_PATH = Path(__file__).parent / "groupacts-v1.json"
# The embedder family the coefficients were fitted on; another family's vectors mean nothing to them.
EMBEDDER_FAMILY = "all-MiniLM-L6-v2"
_CACHE_SIZE = 20_000

# Cheap features. Group-speak ("we", "let's", "everyone") and first-person singular are word classes no
# library labels as such (spaCy tags pronouns, not whom a plan binds); dates and times come from spaCy NER.
_WE = re.compile(r"\b(we|we're|we'll|we've|let's|lets|us|our|everyone|all of us|shall we)\b", re.I)
_SELF = re.compile(r"\b(i|i'm|i'll|i've|i'd|me|my)\b", re.I)
# The kinds the reference has too few examples of to learn (3 norms, 5 changes in 582 messages): once the
# classifier has found a group act, these words name it. No library labels "this changes an earlier plan".
NORM_WORDS = re.compile(
    r"\b(rules? ?(?:for|of|is|are|:)|(?:house|ground|new|one|golden|our) rules?|from now on"
    r"|(?:anyone|whoever|whoever's|the first one) (?:who )?\w* ?(?:buys|pays|owes|has to|must|gets|loses|brings)"
    r"|no one (?:is allowed|gets)|nobody (?:is allowed|gets|talks|brings)|everyone (?:has to|must|needs to)"
    r"|we always|we never|tradition)\b", re.I)
# A message that says in so many words that it settles something. No reference network has one (so it costs
# nothing there), and a user who writes "Decision: ..." expects it remembered as the group's decision.
DECISION_WORDS = re.compile(r"\b(decision|decided|we agreed|agreed:|it's settled|settled on|final answer"
                            r"|that's final)\b", re.I)
CHANGE_WORDS = re.compile(
    r"\b(change of plans?|new plan|scratch that|moved to|moving (?:it )?to|postponed?|reschedul\w*|cancel+(?:ed|ing)?"
    r"|called off|pushed (?:back|to)|no longer|not anymore|instead|switched to|changed (?:my|our) minds?)\b", re.I)
# Short assent from others after a message ("ok", "sounds good", "deal"): a settled thing is usually agreed to.
# No library labels assent in chat; it is one learned feature among the others, never a rule by itself.
_ASSENT = re.compile(r"\b(ok|okay|sounds good|deal|agreed?|yes|yep|yeah|sure|perfect|great|done|works|count me in"
                     r"|i'm in|confirmed|good idea|fine)\b", re.I)
# Taking something on for the others ("I'll book it", "I can bring the trophies") is a task for the group.
_COMMIT = re.compile(r"\b(I'll|I will|I can|I'm going to|I am going to|I'm gonna|I've booked|I booked)\b", re.I)
CHEAP = ("we", "self", "question", "words", "date", "replied_by", "parent_question", "position", "after",
         "last", "context_similarity", "assent_after", "next_similarity", "previous_similarity", "speakers_before")
# The act model reads only CHEAP (the 384 vector dimensions overfit 482 labelled messages: nested
# leave-networks-out 24.4% / 44.7% with them, 31.8% / 44.7% without); the kind model reads everything.


@dataclass(frozen=True)
class GroupAct:
    kind: str   # "decision" | "plan" | "norm" | "task" | "change"
    score: float
    # What the act is filed as when it is a "change" with nothing earlier to change: its best other kind.
    fallback: str = "plan"
    basis: str = "classifier"  # or "rule words": a stated rule for the group (NORM_WORDS)


def _contexts(messages: Sequence[StoredMessage],
              context: Mapping[int, Sequence[StoredMessage]] | None) -> list[StoredMessage | None]:
    """What each message answers: the one it replies to when known, else the turn before it."""
    out: list[StoredMessage | None] = []
    for i, m in enumerate(messages):
        before = list(context.get(m.id, ())) if context is not None else list(messages[:i])
        parent = next((p for p in reversed(before) if m.reply_to and p.msg_id == m.reply_to), None)
        out.append(parent if parent is not None else (before[-1] if before else None))
    return out


def cheap_features(messages: Sequence[StoredMessage], parents: Sequence[StoredMessage | None],
                   dated: Sequence[bool], context_similarity: Sequence[float],
                   vectors: np.ndarray | None = None) -> np.ndarray:
    """The ``CHEAP`` features of each message, from its words and its place among ``messages``
    (``vectors``: the messages' unit MiniLM vectors, for closeness to the turns around it)."""
    rows = []
    for i, m in enumerate(messages):
        after_ids = [j for j in range(i + 1, min(len(messages), i + 4)) if messages[j].session == m.session]
        before_ids = [j for j in range(max(0, i - 3), i) if messages[j].session == m.session]
        assent = sum(1 for j in after_ids
                     if messages[j].author_id != m.author_id and _ASSENT.search(messages[j].text))
        near_next = near_prev = 0.0
        if vectors is not None:
            near_next = max((float(vectors[i] @ vectors[j]) for j in after_ids), default=0.0)
            near_prev = max((float(vectors[i] @ vectors[j]) for j in before_ids), default=0.0)
        speakers = len({messages[j].author_id for j in range(i) if messages[j].session == m.session})
        text = m.text
        same = [j for j, o in enumerate(messages) if o.session == m.session]
        pos = same.index(i) if i in same else 0
        replied = len({o.author_id for o in messages if o.reply_to == m.msg_id and o.author_id != m.author_id})
        parent = parents[i]
        after = len(same) - pos - 1
        rows.append([len(_WE.findall(text)), len(_SELF.findall(text)), float(text.rstrip().endswith("?")),
                     np.log1p(len(text.split())), float(dated[i]), replied,
                     float(parent is not None and parent.text.rstrip().endswith("?")),
                     pos / max(1, len(same) - 1), np.log1p(after), float(after < 3), context_similarity[i],
                     assent, near_next, near_prev, np.log1p(speakers)])
    return np.asarray(rows, dtype=np.float32).reshape(len(messages), len(CHEAP))


def cap_per_session(sessions: Sequence[int], scores: np.ndarray, threshold: float, per_block: int) -> list[int]:
    """Indexes of the acts: over the threshold, and among the best ``per_block`` per 10 messages of a session
    (a session settles few things; the cap was chosen with the threshold by validation)."""
    out: list[int] = []
    for session in sorted(set(sessions)):
        members = [i for i, s in enumerate(sessions) if s == session]
        over = [i for i in members if scores[i] >= threshold]
        out += sorted(over, key=lambda i: -scores[i])[: per_block * max(1, -(-len(members) // 10))]
    return sorted(out)


def stated(text: str) -> str | None:
    """Why a message states a rule or a decision as such ("rule words", "decision words"), or None."""
    if NORM_WORDS.search(text):
        return "rule words"
    return "decision words" if DECISION_WORDS.search(text) else None


def own_news(text: str) -> bool:
    """The author speaking of themself alone: first person singular, nobody else bound ("we", "let's",
    "everyone"), nothing taken on. The learned score fires on such messages in short sessions ("I bought
    four records today" in a session of two); they are the author's own news, not the group's act.
    Measured on the reference (nested leave-networks-out): 31.8% / 44.7% without this rule, 31.0% / 38.3%
    with it; kept because a self-report filed as GROUP is lost to its author's row."""
    return bool(_SELF.search(text)) and not _WE.search(text) and not _COMMIT.search(text)


def _dated(texts: Sequence[str]) -> list[bool]:
    try:
        from memory.nlp import parse_many

        return ["time" in p.kinds() for p in parse_many(list(texts))]
    except Exception:  # noqa: BLE001 - the pipeline is installed by setup; without it the feature reads 0
        log.warning("spaCy unavailable: the date feature of the group-act classifier reads 0", exc_info=True)
        return [False] * len(texts)


def asks(text: str) -> bool:
    """Whether a message ends by asking something (its last sentence is a question)."""
    return text.rstrip().rstrip(")").rstrip().endswith("?")


class GroupActClassifier:
    """The exported model plus an embedder; classifies a window of messages in one call."""

    def __init__(self, model: dict, embedder: Embedder) -> None:
        self.model = model
        self.embedder = embedder
        self.act_weights = np.asarray(model["act_weights"], dtype=np.float32)     # (features,)
        self.act_bias = float(model["act_bias"])
        self.kind_weights = np.asarray(model["kind_weights"], dtype=np.float32)   # (kinds, features)
        self.kind_bias = np.asarray(model["kind_bias"], dtype=np.float32)
        self.max_per_session = int(model["max_per_session"])
        self.mean = np.asarray(model["mean"], dtype=np.float32)
        scale = np.asarray(model["scale"], dtype=np.float32)
        self.scale = np.where(scale > 0, scale, 1.0)  # a feature constant in training carries no weight
        self.threshold = float(model["threshold"])
        self.kinds = tuple(model["kinds"])
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if todo:
            vecs = np.asarray(self.embedder.embed([prefix(t) for t in todo]), dtype=np.float32)
            with self._lock:
                for t, v in zip(todo, vecs):
                    self._cache[t] = v
                    if len(self._cache) > _CACHE_SIZE:
                        self._cache.popitem(last=False)
        with self._lock:
            return np.stack([self._cache.get(t, np.zeros(self.embedder.dim, np.float32)) for t in texts])

    def features(self, messages: Sequence[StoredMessage],
                 context: Mapping[int, Sequence[StoredMessage]] | None = None) -> np.ndarray:
        """Raw (unscaled) features: the message's vector, then the cheap features (its context among them)."""
        parents = _contexts(messages, context)
        texts = [m.text for m in messages]
        ctx_texts = [p.text for p in parents if p is not None]
        vecs = self._embed(texts + ctx_texts)
        own = vecs[: len(texts)]
        ctx = np.zeros_like(own)
        k = len(texts)
        for i, p in enumerate(parents):
            if p is not None:
                ctx[i] = vecs[k]
                k += 1
        sim = (own * ctx).sum(axis=1)
        return np.hstack([own, cheap_features(messages, parents, _dated(texts), sim, own)])

    def scores(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probability that each message is a group act, probability of each kind given that it is one)."""
        z = (x - self.mean) / self.scale
        act = 1.0 / (1.0 + np.exp(-(z @ self.act_weights + self.act_bias)))
        k = z @ self.kind_weights.T + self.kind_bias
        k -= k.max(axis=1, keepdims=True)
        kinds = np.exp(k)
        return act, kinds / kinds.sum(axis=1, keepdims=True)

    def classify(self, messages: Sequence[StoredMessage],
                 context: Mapping[int, Sequence[StoredMessage]] | None = None) -> list[GroupAct | None]:
        if not messages:
            return []
        act, kinds = self.scores(self.features(messages, context))
        keep = set(cap_per_session([m.session for m in messages], act, self.threshold, self.max_per_session))
        out: list[GroupAct | None] = []
        for i, m in enumerate(messages):
            # A message that states a rule or a decision as such is one whatever the score (3 labelled norms
            # are too few to learn; no labelled message says "decision:").
            said = stated(m.text)
            # A question asks for a decision, a plan or a task; it does not settle one ("Sam, are you coming?").
            if said is None and (i not in keep or own_news(m.text) or asks(m.text)):
                out.append(None)
                continue
            kind, fallback = self._kind(m.text, kinds[i])
            out.append(GroupAct(kind, round(float(act[i]), 4), fallback, "classifier" if i in keep else str(said)))
        return out

    def _kind(self, text: str, probs: np.ndarray) -> tuple[str, str]:
        """(the act's kind, its best kind other than a change)."""
        order = [self.kinds[j] for j in np.argsort(-probs)]
        fallback = next(k for k in order if k != "change")
        if NORM_WORDS.search(text):
            return "norm", "norm"
        if CHANGE_WORDS.search(text):
            return "change", fallback
        if DECISION_WORDS.search(text):
            return "decision", "decision"
        return order[0], fallback


def load_model(path: str | Path = MODEL_PATH) -> dict:
    """The exported coefficients (a small JSON file in the repository)."""
    data = json.loads(Path(path).read_text("utf-8"))
    if tuple(data.get("kinds", ())) != KINDS:
        raise ValueError(f"{path}: kinds {data.get('kinds')} are not {KINDS}")
    return data


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """The shipped MiniLM (ONNX int8 as the bot's default embedder, else the numpy port)."""
    from memory.embeddings.factory import load_embedder

    try:
        return load_embedder("minilm-onnx", dtype="int8")
    except Exception:  # noqa: BLE001 - onnxruntime or its cached graph missing: the numpy port needs neither
        log.info("ONNX MiniLM unavailable; the group-act classifier uses the numpy MiniLM", exc_info=True)
        return load_embedder("minilm")


_classifiers: dict[tuple[str, str], GroupActClassifier] = {}
_classifiers_lock = threading.Lock()


def classifier(embedder: Embedder | None = None, path: str | Path = MODEL_PATH) -> GroupActClassifier:
    """A classifier reading ``path``, using ``embedder`` when it is the MiniLM the model was fitted on."""
    if embedder is None or not str(getattr(embedder, "name", "")).startswith(EMBEDDER_FAMILY):
        embedder = default_embedder()
    key = (str(path), str(embedder.name))
    with _classifiers_lock:
        if key not in _classifiers:
            _classifiers[key] = GroupActClassifier(load_model(path), embedder)
        return _classifiers[key]


def classify_group_acts(messages: Sequence[StoredMessage],
                        context: Mapping[int, Sequence[StoredMessage]] | None = None) -> list[GroupAct | None]:
    """The group act of each message (None when it is not one), in order.

    ``context`` maps a message's store id to the messages before it (the one it replies to among them);
    when None, ``messages`` itself is the context, in order, and nothing else is read.
    """
    return classifier().classify(messages, context)


__all__ = ["GroupAct", "KINDS", "classify_group_acts", "classifier", "GroupActClassifier"]
