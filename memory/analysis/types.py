"""What the analysis pass stores with each message, and what its models read.

Every message goes through one analysis at ingest (a background backlog, like its vector): its named
entities (spaCy), its act (what it does for the group), its topic, the roster member it binds, and the
earlier message it changes, answers or confirms. Readers (replies, catch-up, timeline, "what did we
decide?") read these stored results; none of them runs NER or a classifier at question time.

The models are learned (``chorus train acts``) and read only the message, its vector, its parse and
what came before it in its scope: a message is analysed when it arrives, with no look at later turns.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..models import StoredMessage
from ..nlp import Parsed

if TYPE_CHECKING:  # the store imports these types, and People imports the store
    from ..people import People

# What a message does for the group.
ACT_KINDS = ("decision", "plan", "change", "rule", "task", "question", "news", "chatter")
# The acts that make up the group's state (a GROUP record each, chained by "changes" links).
STATE_ACTS = ("decision", "plan", "change", "rule", "task")
# How a message points back at an earlier one.
LINK_KINDS = ("changes", "answers", "confirms")


@dataclass(frozen=True)
class Act:
    """A message's act: its kind with the model's probability, whom it binds, and its topic."""

    kind: str                     # one of ACT_KINDS
    score: float                  # the model's probability of ``kind``
    probs: tuple[float, ...]      # the probability of each of ACT_KINDS, in that order
    owner: str | None = None      # "GROUP", a roster person id (who does a task, who is asked), or None
    topic: str = ""               # a short phrase naming what it is about ("quiz night"); "" for chatter

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_ACTS


@dataclass(frozen=True)
class Link:
    """The earlier message a message changes, answers or confirms."""

    kind: str      # one of LINK_KINDS
    target: int    # the earlier message's store id (same scope, or a linked one)
    score: float   # the model's probability of this link


@dataclass(frozen=True)
class Analysis:
    """Everything the analysis pass stores for one message."""

    message_id: int
    parsed: Parsed
    act: Act
    link: Link | None = None


@dataclass(frozen=True)
class Turn:
    """One message as the models read it: the message, its unit MiniLM vector and its parse.

    ``analysis`` is set for turns that were analysed before (the history a new message is read against).
    """

    message: StoredMessage
    vector: np.ndarray | None
    parsed: Parsed
    analysis: Analysis | None = None


@dataclass(frozen=True)
class History:
    """What came before a batch of new messages in their scope.

    ``recent``: the last turns before the batch, oldest first (what a message replies to or follows).
    ``acts``: earlier state acts of the scope (decisions, plans, changes, rules, tasks), oldest first,
    reaching further back than ``recent`` (a change can name a plan set weeks before).
    """

    recent: Sequence[Turn]
    acts: Sequence[Turn]


class ActModel(Protocol):
    """Classifies new messages (oldest first, one scope) given what came before them."""

    version: str

    def acts(self, turns: Sequence[Turn], history: History, people: People) -> list[Act]: ...


class LinkModel(Protocol):
    """Finds, for each new message, the earlier message it changes, answers or confirms (or None).

    A new message may link to an earlier message of the same batch as well as to one of ``history``.
    ``people`` is the scope's roster (members' names and aliases: who a message names).
    """

    version: str

    def links(self, turns: Sequence[Turn], acts: Sequence[Act], history: History,
              people: People | None = None) -> list[Link | None]: ...
