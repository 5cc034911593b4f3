"""The analysis pass over the backlog: NER once per message, the act and link models, then the group state.

It runs in the background after the embedder (it reads the stored vectors), a batch of one scope at a
time: the models run outside the store's write lock, and the batch's analyses and the GROUP records they
file are committed in one transaction, so a failure leaves the store as it was. A batch the models fail on
is retried message by message; a message that fails alone is taken out of the backlog and logged
(`chorus status` counts them, `chorus analyse --retry-failed` puts them back).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from ..errors import AnalysisError, ChorusError
from ..groupstate import GroupState
from ..models import GROUP, StoredMessage
from ..nlp import Parsed, parse_many
from ..people import People
from ..records import Records
from ..store import Store
from .features import ACTS, RECENT
from .types import ACT_KINDS, LINK_KINDS, STATE_ACTS, Act, ActModel, Analysis, History, Link, LinkModel, Turn

log = logging.getLogger(__name__)

RECENT_TURNS = RECENT  # turns before a batch that the models read as its recent context
EARLIER_ACTS = ACTS    # earlier state acts of the scope a change may point back to
BATCH = 64
_NO_PARSE = Parsed((), False, False)


class AnalysisPass:
    """Works through the analysis backlog of one store."""

    def __init__(self, store: Store, records: Records, acts: ActModel, links: LinkModel) -> None:
        self.store = store
        self.state = GroupState(records)
        self.acts = acts
        self.links = links
        self.version = f"{acts.version}+{links.version}"
        self._lock = threading.Lock()  # one batch at a time: a message is never analysed twice at once

    def run(self, *, batch_size: int = BATCH, limit: int | None = None, scope_ids: Sequence[int] | None = None,
            progress: Callable[[int], None] | None = None) -> int:
        """Analyse waiting messages (all of them, or up to ``limit``); returns how many were read."""
        done = 0
        while limit is None or done < limit:
            with self._lock:
                batch = self.store.analysis_batch(batch_size if limit is None else min(batch_size, limit - done),
                                                  scope_ids)
                if not batch:
                    break
                self._analyse_or_isolate(batch)
            done += len(batch)
            if progress:
                progress(len(batch))
        return done

    def _analyse_or_isolate(self, batch: list[StoredMessage]) -> None:
        try:
            self.analyse(batch)
        except AnalysisError:
            if len(batch) == 1:
                log.exception("the analysis pass cannot read message %s/%s; taken out of its backlog",
                              batch[0].channel, batch[0].msg_id)
                self.store.mark_analysis_failed([batch[0].id])
                return
            log.warning("an analysis batch of %d messages failed; reading them one by one", len(batch),
                        exc_info=True)
            for m in batch:
                self._analyse_or_isolate([m])

    def analyse(self, batch: list[StoredMessage]) -> list[Analysis]:
        """Analyse and commit one batch of waiting messages of one scope (oldest first)."""
        scope = batch[0].scope_id
        if any(m.scope_id != scope for m in batch):
            raise ValueError("an analysis batch holds one scope")
        recent = self.store.recent_before(scope, batch[0].id, RECENT_TURNS)
        earlier = self.store.acts_before(scope, batch[0].id, STATE_ACTS, EARLIER_ACTS)
        known = {m.id: m for m in (*recent, *earlier)}
        stored = self.store.analyses(known)
        vectors = self.store.message_vectors([*known, *(m.id for m in batch)])
        try:
            parsed = parse_many([m.text for m in batch])  # NER runs here, once per message, never at question time
        except ChorusError:
            raise
        except Exception as exc:  # spaCy is third-party code: name it
            raise AnalysisError(f"spaCy failed on a batch of {len(batch)} messages: {exc}") from exc

        def turn(m: StoredMessage, p: Parsed | None = None) -> Turn:
            a = stored.get(m.id)
            return Turn(m, vectors.get(m.id), p if p is not None else (a.parsed if a else _NO_PARSE), a)

        turns = [turn(m, p) for m, p in zip(batch, parsed)]
        history = History([turn(m) for m in recent], [turn(m) for m in earlier])
        roster = self.store.roster(scope)
        people = People(roster)
        try:
            acts = self.acts.acts(turns, history, people)
            links = self.links.links(turns, acts, history, people)
        except ChorusError:
            raise
        except Exception as exc:
            raise AnalysisError(f"the act or link model failed: {exc}") from exc
        if len(acts) != len(batch) or len(links) != len(batch):
            raise AnalysisError(f"the models returned {len(acts)} acts and {len(links)} links for {len(batch)} "
                                "messages")
        members = {p.person_id for p in roster}
        allowed = {m.id for m in (*recent, *earlier)}
        analyses: list[Analysis] = []
        for i, (m, p) in enumerate(zip(batch, parsed)):
            act = check_act(acts[i], members, m)
            link = check_link(links[i], allowed | {b.id for b in batch[:i]}, m)
            analyses.append(Analysis(m.id, p, act, link))
        texts = {m.id: m.text for m in batch}
        by_id = {m.id: m for m in batch}
        with self.store.write() as conn:
            kept = self.store.save_analyses(conn, analyses, texts, self.version)
            self.state.file(conn, [(by_id[a.message_id], a) for a in kept], vectors, self.version)
        return kept


def check_act(act: Act, members: set[str], m: StoredMessage) -> Act:
    """The model's act for ``m`` if it keeps the contract, else ``AnalysisError`` naming what is wrong."""
    if act.kind not in ACT_KINDS:
        raise AnalysisError(f"unknown act kind {act.kind!r} for message {m.msg_id}")
    if len(act.probs) != len(ACT_KINDS) or not np.all(np.isfinite(act.probs)) or not 0.0 <= act.score <= 1.0:
        raise AnalysisError(f"malformed act probabilities for message {m.msg_id}")
    if act.owner is not None and act.owner != GROUP and act.owner not in members:
        raise AnalysisError(f"act owner {act.owner!r} of message {m.msg_id} is no member of its channel")
    return replace(act, topic=" ".join(act.topic.split())[:80])


def check_link(link: Link | None, allowed: set[int], m: StoredMessage) -> Link | None:
    """The model's link for ``m``: to an earlier message the model was shown, of a known kind."""
    if link is None:
        return None
    if link.kind not in LINK_KINDS:
        raise AnalysisError(f"unknown link kind {link.kind!r} for message {m.msg_id}")
    if link.target not in allowed:
        raise AnalysisError(f"message {m.msg_id} links to message {link.target}, which it was not shown")
    return link
