"""The link model: the earlier message a message changes, answers or confirms (LinkModel of types.py).

A pair model: each candidate earlier message (the last few turns, then the scope's earlier state acts)
is scored against the new message on the pair features of memory/analysis/features.py (closeness of
vectors, content words shared weighted by their rarity in the scope's recent talk, shared kinds of
value and a changed value, reply structure, turn and time gaps, both acts' kinds, whether the
candidate was changed already). One logistic regression per link kind, trained by ``chorus train
acts`` (evaluation/acts_train.py), exported to memory/models/links-v2.json and read by numpy alone.

A change (the act model's kind, or a state act to which it gave enough of its "change" probability)
links to its likeliest earlier state act; any other message links to
the question it likeliest answers, or the act it likeliest confirms, when that probability passes a
threshold chosen by leave-chats-out validation.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ..people import People
from ..store import Person
from .features import ANSWER_WINDOW, PAIR_FEATURES, Context, Seen, candidates, pair_features
from .types import ACT_KINDS, LINK_KINDS, STATE_ACTS, Act, History, Link, Turn

MODEL_PATH = Path(__file__).resolve().parents[1] / "models" / "links-v2.json"


class _Logit:
    """One link kind's logistic regression over the standardised pair features."""

    def __init__(self, d: dict) -> None:
        self.w = np.asarray(d["weights"], dtype=np.float32)
        self.b = float(d["bias"])
        self.mean = np.asarray(d["mean"], dtype=np.float32)
        scale = np.asarray(d["scale"], dtype=np.float32)
        self.scale = np.where(scale > 0, scale, 1.0)
        self.threshold = float(d.get("threshold", 0.5))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(((x - self.mean) / self.scale) @ self.w + self.b)))


def roster_of(turns: Sequence[Turn], history: History) -> People:
    """The members the link model can tell apart when it is not given the roster: the authors it sees."""
    seen: dict[str, Person] = {}
    for t in (*history.acts, *history.recent, *turns):
        m = t.message
        seen.setdefault(m.author_id, Person(m.scope_id, m.author_id, m.author_name, [], 0, 0.0, 0.0))
    return People(list(seen.values()))


class _PairLinker(Protocol):
    def link(self, turn: Turn, act: Act, ctx: Context) -> Link | None: ...


def link_in_order(model: _PairLinker, turns: Sequence[Turn], acts: Sequence[Act], history: History,
                  people: People | None = None) -> list[Link | None]:
    """Each turn's link in chat order, every link joining the context the next turn is read against (shared by
    the linear and the encoder link models)."""
    ctx = Context.of(history, people if people is not None else roster_of(turns, history))
    out: list[Link | None] = []
    for t, a in zip(turns, acts):
        link = model.link(t, a, ctx)
        out.append(link)
        ctx.push(t, a, link)
    return out


class PairLinkModel:
    """The exported pair models; links a scope's new turns, oldest first, to earlier ones."""

    def __init__(self, model: dict) -> None:
        if tuple(model.get("features", ())) != PAIR_FEATURES:
            raise ValueError("link model was trained on other pair features than memory/analysis/features.py's")
        self.version = str(model["version"])
        self.models = {k: _Logit(model[k]) for k in LINK_KINDS}
        # A state act filed under another kind still links as a change when the act model gave "change" this
        # share of its state probability (a plan that restates an earlier plan with a new day).
        self.change_share = float(model.get("change_share", 1.0))

    def link(self, turn: Turn, act: Act, ctx: Context) -> Link | None:
        """The link of ``turn`` (with its act) to a turn of ``ctx``, or None."""
        cands = candidates(ctx)
        if not cands:
            return None
        x = pair_features(turn, act, cands, ctx)
        recent = min(ANSWER_WINDOW, len(ctx.recent))
        if act.kind == "change" or (act.is_state and self.change_share_of(act) >= self.change_share):
            states = [i for i, s in enumerate(cands) if s.act is not None and s.act.is_state]
            if states:
                p = self.models["changes"](x[states])
                j = int(np.argmax(p))
                return Link("changes", cands[states[j]].turn.message.id, round(float(p[j]), 4))
        best: tuple[float, str, Seen] | None = None
        for kind in ("answers", "confirms"):
            model = self.models[kind]
            pool = [i for i, s in enumerate(cands) if (i < recent or kind == "confirms")
                    and s.turn.message.author_id != turn.message.author_id]
            if not pool:
                continue
            p = model(x[pool])
            j = int(np.argmax(p))
            if p[j] >= model.threshold and (best is None or p[j] - model.threshold > best[0]):
                best = (float(p[j]) - model.threshold, kind, cands[pool[j]])
        if best is None:
            return None
        _, kind, target = best
        return Link(kind, target.turn.message.id, round(best[0] + self.models[kind].threshold, 4))

    def shortlist(self, turn: Turn, act: Act, ctx: Context, k: int) -> list[tuple[Seen, dict[str, float]]]:
        """The earlier turns most likely linked to ``turn``: this model's best ``k`` of each link kind (from the
        pool that kind may link to), with their probabilities, most likely first. The encoder's link head
        reads these (memory/analysis/encoded.py)."""
        cands = candidates(ctx)
        if not cands:
            return []
        x = pair_features(turn, act, cands, ctx)
        recent = min(ANSWER_WINDOW, len(ctx.recent))
        probs = {kind: self.models[kind](x) for kind in LINK_KINDS}
        pools = {"changes": [i for i, s in enumerate(cands) if s.act is not None and s.act.is_state],
                 "answers": [i for i, s in enumerate(cands) if i < recent
                             and s.turn.message.author_id != turn.message.author_id],
                 "confirms": [i for i, s in enumerate(cands) if s.turn.message.author_id != turn.message.author_id]}
        chosen: dict[int, float] = {}
        for kind, pool in pools.items():
            for i in sorted(pool, key=lambda i: -probs[kind][i])[:k]:
                chosen[i] = max(chosen.get(i, 0.0), float(probs[kind][i]))
        order = sorted(chosen, key=lambda i: -chosen[i])
        return [(cands[i], {kind: float(probs[kind][i]) for kind in LINK_KINDS}) for i in order]

    @staticmethod
    def change_share_of(act: Act) -> float:
        """The share of an act's state probability that is "change"."""
        state = sum(p for k, p in zip(ACT_KINDS, act.probs) if k in STATE_ACTS)
        return act.probs[ACT_KINDS.index("change")] / state if state > 0 else 0.0

    def links(self, turns: Sequence[Turn], acts: Sequence[Act], history: History,
              people: People | None = None) -> list[Link | None]:
        return link_in_order(self, turns, acts, history, people)


def load_link_model(path: str | Path = MODEL_PATH) -> PairLinkModel:
    return PairLinkModel(json.loads(Path(path).read_text("utf-8")))
