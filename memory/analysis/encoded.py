"""The act and link models on the fine-tuned encoder (the reader's, memory/encoder/), beside the linear ones.

The linear models read words, parse and closeness measures; they cannot tell that "gig's moved to the 21st"
changes the gig plan and not the rehearsal plan set the same week, or that "yes from me" answers the vote
above it. The encoder reads the text itself:

- the act head reads a message with its context (the message it replies to and the two turns before it) and
  gives P(kind) for the eight ACT_KINDS; it is averaged with the linear model's P (weight chosen leave-chats-
  out) and filed by the same state threshold;
- the link head reads a message beside one earlier message (with that message's act and how far back it is)
  and gives P(none / changes / answers / confirms). The linear link model shortlists the earlier messages
  (its best few of each kind), so the encoder reads a handful of pairs, not every turn of the window; and of
  those it reads only a state act's earlier state acts (a change's possible targets) and the pairs the linear
  model gives an answers or confirms link at least ``read_floor`` (most messages are chatter with no link,
  and each pair read is a forward pass: this cascade is where the analysis pass's time goes).

Owner and topic come from the same rules as the linear model's (owner.py, topic.py), on the kind filed here.
Both classes keep the ActModel / LinkModel protocols (types.py), so the analysis pass runs either.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..encoder.inputs import candidate_text, encode_two
from ..encoder.model import Encoder
from ..people import People
from .acts import LinearActModel
from .features import ANSWER_WINDOW, Context, Seen
from .links import PairLinkModel, link_in_order
from .owner import owner_of
from .topic import topic_of
from .types import ACT_KINDS, LINK_KINDS, STATE_ACTS, Act, History, Link, Turn

HEAD_LINKS = ("none", *LINK_KINDS)  # the link head's classes, in its output order
SHORTLIST = 3  # the linear model's best candidates of each link kind the encoder reads
_STATE = np.asarray([k in STATE_ACTS for k in ACT_KINDS])


def act_context(turn: Turn, before: Sequence[Turn]) -> str:
    """What the act head reads beside a message: the message it replies to, then the two turns before it."""
    m = turn.message
    parent = next((t for t in reversed(before) if m.reply_to and t.message.msg_id == m.reply_to), None)
    near = [t for t in before[-2:] if parent is None or t.message.id != parent.message.id]
    parts = ([f"replying to {candidate_text(parent.message.author_name, parent.message.text)}"] if parent else [])
    parts += [candidate_text(t.message.author_name, t.message.text) for t in near]
    return " | ".join(parts)


def link_text(seen: Seen, gap: int) -> str:
    """An earlier message as the link head reads it: its act, how far back it is, its author and words."""
    kind = seen.act.kind if seen.act is not None else "chatter"
    return f"({kind}, {gap} back) " + candidate_text(seen.turn.message.author_name, seen.turn.message.text)


class EncoderActModel:
    """The act head averaged with the linear act model."""

    def __init__(self, linear: LinearActModel, encoder: Encoder, *, weight: float, threshold: float) -> None:
        self.linear = linear
        self.encoder = encoder
        self.weight = weight  # the encoder's share of the averaged P
        self.threshold = threshold  # summed state P at which a message is filed as a state act
        self.version = f"{encoder.version}-acts+{linear.version}"

    def head_probs(self, turns: Sequence[Turn], history: History) -> np.ndarray:
        """The act head's P(kind) for a batch of new turns (their context: the history and the batch before)."""
        seen = list(history.recent)
        rows = []
        for t in turns:
            rows.append((candidate_text(t.message.author_name, t.message.text), act_context(t, seen)))
            seen.append(t)
        return self.encoder.classify("act_logits", [encode_two(self.encoder.tokens, a, b, keep_end=True)
                                                    for a, b in rows])

    def acts(self, turns: Sequence[Turn], history: History, people: People) -> list[Act]:
        if not turns:
            return []
        head = self.head_probs(turns, history)
        ctx = Context.of(history, people)
        out: list[Act] = []
        for t, h in zip(turns, head):
            p = (1.0 - self.weight) * self.linear.probabilities(t, ctx) + self.weight * h
            if float(p[_STATE].sum()) >= self.threshold:
                k = int(np.argmax(np.where(_STATE, p, -1.0)))
            else:
                k = int(np.argmax(np.where(_STATE, -1.0, p)))
            kind = ACT_KINDS[k]
            a = Act(kind, round(float(p[k]), 4), tuple(round(float(x), 4) for x in p), owner_of(kind, t, ctx),
                    "" if kind == "chatter" else topic_of(t, ctx))
            out.append(a)
            ctx.push(t, a, None)
        return out


class EncoderLinkModel:
    """The link head over the linear link model's shortlist."""

    def __init__(self, linear: PairLinkModel, encoder: Encoder, *, thresholds: dict[str, float],
                 read_floor: float = 0.0, change_pool: int = SHORTLIST, change_weight: float = 1.0) -> None:
        self.linear = linear
        self.encoder = encoder
        self.thresholds = thresholds  # P an answers / confirms link needs (a change always links)
        self.read_floor = read_floor  # the linear answers / confirms P below which a pair is not read
        self.change_pool = change_pool  # how many earlier state acts a change's link reads
        self.change_weight = change_weight  # the head's share of a change target's score (the rest: linear P)
        self.version = f"{encoder.version}-links+{linear.version}"

    def read(self, turn: Turn, pool: Sequence[Seen], ctx: Context) -> np.ndarray:
        """P(none, changes, answers, confirms) for ``turn`` beside each earlier message of ``pool``."""
        first = candidate_text(turn.message.author_name, turn.message.text)
        rows = [encode_two(self.encoder.tokens, first, link_text(s, ctx.count - s.index)) for s in pool]
        return self.encoder.classify("link_logits", rows)

    def link(self, turn: Turn, act: Act, ctx: Context) -> Link | None:
        changes = act.kind == "change" or (act.is_state and
                                           self.linear.change_share_of(act) >= self.linear.change_share)
        short = self.linear.shortlist(turn, act, ctx, SHORTLIST)
        pool = [s for s, lp in short if max(lp["answers"], lp["confirms"]) >= self.read_floor]
        if changes and self.change_pool > SHORTLIST:
            short = self.linear.shortlist(turn, act, ctx, self.change_pool)
        linear_p = {s.turn.message.id: lp for s, lp in short}
        if changes:  # a change reads the linear model's best `change_pool` earlier state acts
            seen = {s.turn.message.id for s in pool}
            ranked = sorted(((s, lp) for s, lp in short if s.act is not None and s.act.is_state),
                            key=lambda x: -x[1]["changes"])
            pool += [s for s, _ in ranked[:self.change_pool] if s.turn.message.id not in seen]
        if not pool:
            return None
        p = self.read(turn, pool, ctx)
        col = {k: HEAD_LINKS.index(k) for k in LINK_KINDS}
        if changes:
            states = [i for i, s in enumerate(pool) if s.act is not None and s.act.is_state]
            if states:
                w = self.change_weight
                score = {i: w * float(p[i, col["changes"]])
                         + (1 - w) * linear_p.get(pool[i].turn.message.id, {}).get("changes", 0.0) for i in states}
                j = max(states, key=lambda i: score[i])
                return Link("changes", pool[j].turn.message.id, round(score[j], 4))
        recent = min(ANSWER_WINDOW, len(ctx.recent))
        recent_ids = {s.turn.message.id for s in list(ctx.recent)[-recent:]}
        best: tuple[float, str, int] | None = None
        for kind in ("answers", "confirms"):
            ok = [i for i, s in enumerate(pool) if s.turn.message.author_id != turn.message.author_id
                  and (kind == "confirms" or s.turn.message.id in recent_ids)]
            if not ok:
                continue
            j = max(ok, key=lambda i: p[i, col[kind]])
            margin = float(p[j, col[kind]]) - self.thresholds[kind]
            if margin >= 0 and (best is None or margin > best[0]):
                best = (margin, kind, j)
        if best is None:
            return None
        _, kind, j = best
        return Link(kind, pool[j].turn.message.id, round(float(p[j, col[kind]]), 4))

    def links(self, turns: Sequence[Turn], acts: Sequence[Act], history: History,
              people: People | None = None) -> list[Link | None]:
        return link_in_order(self, turns, acts, history, people)
