"""Labelled long chats as the analysis models read them: turns (message, vector, parse) and gold acts.

The format is tests/data/longblind/README.md's (a SocialMemBench network whose turns carry an ``act``
label). Messages go through the same dataset loader as ``chorus ingest --format socialmem``; vectors
come from the bot's default embedder and parses from the bot's spaCy pipeline, so the models are
trained and measured on the inputs they get at ingest. Vectors and parses are cached under
``out/cache/acts`` (keyed by the embedder and the text), as a run re-reads the same 6,000 messages.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memory.analysis.types import ACT_KINDS, LINK_KINDS, Turn
from memory.datasets.socialmem import load_network
from memory.embeddings.base import Embedder
from memory.models import GROUP, StoredMessage
from memory.nlp import Parsed, parse_many
from memory.people import People
from memory.store import Person

CACHE = Path("out/cache/acts")


@dataclass(frozen=True)
class Gold:
    """One turn's label: its act kind, topic key, owner, and the index of each earlier turn it links to."""

    kind: str
    topic: str
    owner: str | None
    links: dict[str, int]  # link kind -> index of the earlier turn in the chat


@dataclass
class Chat:
    """One labelled chat: its turns in order, their gold labels and its roster."""

    id: str
    turns: list[Turn]
    gold: list[Gold]
    people: People


def chat_files(path: str | Path) -> list[Path]:
    """The labelled chats in a folder (every ``*.json``), or the one file given."""
    path = Path(path)
    return sorted(p for p in path.glob("*.json") if p.is_file()) if path.is_dir() else [path]


def _gold(raw: dict, index: dict[str, int], where: str) -> Gold:
    act = raw.get("act") or {}
    kind = str(act.get("kind") or "chatter")
    if kind not in ACT_KINDS:
        raise ValueError(f"{where}: act kind {kind!r} is not one of {ACT_KINDS}")
    links = {k: index[str(act[k])] for k in LINK_KINDS if act.get(k) and str(act[k]) in index}
    owner = act.get("owner")
    return Gold(kind, str(act.get("topic") or ""), None if owner in (None, "") else str(owner), links)


def _roster(data: dict, messages: Sequence[StoredMessage]) -> People:
    people: dict[str, Person] = {}
    for s in data.get("speakers") or []:
        if isinstance(s, dict) and s.get("id"):
            people[str(s["id"])] = Person(1, str(s["id"]), str(s.get("name") or s["id"]), [], 0, 0.0, 0.0)
    for m in messages:
        people.setdefault(m.author_id, Person(1, m.author_id, m.author_name, [], 0, 0.0, 0.0))
    return People(list(people.values()))


class Inputs:
    """Vectors and parses of texts, computed once and kept on disk."""

    def __init__(self, embedder: Embedder, cache: Path | None = CACHE) -> None:
        self.embedder = embedder
        self.path = None if cache is None else cache / f"{embedder.name}.pkl"
        self.vectors: dict[str, np.ndarray] = {}
        self.parses: dict[str, Parsed] = {}
        if self.path is not None and self.path.exists():
            self.vectors, self.parses = pickle.loads(self.path.read_bytes())

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()

    def get(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Parsed]]:
        keys = [self.key(t) for t in texts]
        todo = {k: t for k, t in zip(keys, texts) if k not in self.vectors or k not in self.parses}
        if todo:
            ks, ts = list(todo), list(todo.values())
            vecs = np.asarray(self.embedder.embed(ts), dtype=np.float32)
            for k, v, p in zip(ks, vecs, parse_many(ts)):
                self.vectors[k], self.parses[k] = v, p
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_bytes(pickle.dumps((self.vectors, self.parses)))
        return np.stack([self.vectors[k] for k in keys]), [self.parses[k] for k in keys]


def load_chat(path: Path, inputs: Inputs) -> Chat:
    """One labelled chat file as turns (ids 1..n in order, one scope) with their gold labels."""
    conv = load_network(path)
    data = json.loads(path.read_text("utf-8"))
    raw = [t for s in data["sessions"] for t in s["turns"]]
    index = {str(t["turn"]): i for i, t in enumerate(raw)}
    msgs = [StoredMessage(id=i + 1, scope_id=1, platform=m.platform, workspace=m.workspace, channel=m.channel,
                          thread="", msg_id=m.msg_id, author_id=m.author_id, author_name=m.author_name, text=m.text,
                          ts=m.ts, session=m.session_hint or 0, turn=i, reply_to=m.reply_to)
            for i, m in enumerate(conv.messages)]
    vecs, parses = inputs.get([m.text for m in msgs])
    turns = [Turn(m, vecs[i], parses[i]) for i, m in enumerate(msgs)]
    gold = [_gold(t, index, f"{path} turn {t.get('turn')}") for t in raw]
    for i, g in enumerate(gold):
        for k, j in g.links.items():
            if j >= i:
                raise ValueError(f"{path}: turn {raw[i]['turn']} {k} a later turn")
    return Chat(conv.id, turns, gold, _roster(data, msgs))


def load_chats(path: str | Path, inputs: Inputs) -> list[Chat]:
    return [load_chat(p, inputs) for p in chat_files(path)]


def group_owner(owner: str | None) -> str | None:
    """Gold owners as the model states them (GROUP spelled as memory.models.GROUP)."""
    return GROUP if owner == "GROUP" else owner
