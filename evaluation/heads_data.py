"""Rows for the encoder's act and link heads, read from the labelled chats as the analysis pass reads them.

Each chat is streamed turn by turn through the shipped linear models (what ingest does: the history holds
their acts and links, mistakes included), and every turn gives:

- an act row: the message and its context as the act head reads them (memory/analysis/encoded.py), with the
  gold kind;
- link rows: the message beside each earlier message the linear link model shortlists (and the gold target,
  where there is one and it is in the scope's window), labelled with the gold link kind or "none".

Sources: our labelled chats (evaluation/data/train) and SocialMemBench dev's act labels
(../shared/data/socialmembench-acts, CC BY 4.0), joined to its networks. The blind sets are never read.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memory.analysis.acts import LinearActModel
from memory.analysis.encoded import HEAD_LINKS, SHORTLIST, act_context, link_text
from memory.analysis.features import Context
from memory.analysis.links import PairLinkModel
from memory.analysis.types import ACT_KINDS, Turn
from memory.datasets.base import data_dir
from memory.encoder.inputs import candidate_text

from .acts_data import Chat, Gold, Inputs, load_chat


@dataclass
class ActRow:
    chat: str
    message: str
    context: str
    kind: int  # index in ACT_KINDS


@dataclass
class LinkRow:
    chat: str
    turn: int  # the message's index in its chat (a group of rows)
    message: str
    earlier: str
    label: int  # index in HEAD_LINKS
    gold_change: bool  # the message is a gold change (its rows decide the "changes" figure)


def smb_chats(inputs: Inputs) -> list[Chat]:
    """SocialMemBench dev's networks with their act labels, as labelled chats."""
    folder = data_dir() / "socialmembench-acts"
    labels: dict[str, dict] = {}
    for part in sorted(folder.glob("part_*.jsonl")):
        for line in part.read_text("utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                labels[str(item["turn"])] = item
    chats = []
    for path in sorted((data_dir() / "socialmembench").glob("*.json")):
        raw = json.loads(path.read_text("utf-8"))
        turns = [t for s in raw["sessions"] for t in s["turns"]]
        if not all(str(t["turn"]) in labels for t in turns):
            continue
        for t in turns:
            lab = labels[str(t["turn"])]
            t["act"] = {k: lab.get(k) for k in ("kind", "topic", "owner", "changes", "answers", "confirms")}
        tmp = Path("out/cache/heads") / f"{path.stem}.json"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(raw), "utf-8")
        chats.append(load_chat(tmp, inputs))
    return chats


def read_chat(chat: Chat, acts: LinearActModel, links: PairLinkModel) -> tuple[list[ActRow], list[LinkRow]]:
    """One chat's act and link rows (the linear models' reading as history, gold labels)."""
    ctx = Context(chat.people)
    act_rows: list[ActRow] = []
    link_rows: list[LinkRow] = []
    before: list[Turn] = []
    for i, turn in enumerate(chat.turns):
        g: Gold = chat.gold[i]
        message = candidate_text(turn.message.author_name, turn.message.text)
        act_rows.append(ActRow(chat.id, message, act_context(turn, before), ACT_KINDS.index(g.kind)))
        act = acts.act(turn, ctx)
        short = links.shortlist(turn, act, ctx, SHORTLIST)
        pool = [s for s, _ in short]
        targets = {chat.turns[j].message.id: kind for kind, j in g.links.items()}
        seen_ids = {s.turn.message.id for s in pool}
        window = {s.turn.message.id: s for s in (*ctx.recent, *ctx.acts)}
        pool += [window[t] for t in targets if t in window and t not in seen_ids]
        for s in pool:
            kind = targets.get(s.turn.message.id)
            link_rows.append(LinkRow(chat.id, i, message, link_text(s, ctx.count - s.index),
                                     HEAD_LINKS.index(kind) if kind else 0, "changes" in g.links))
        link = links.link(turn, act, ctx)
        ctx.push(turn, act, link)
        before.append(turn)
    return act_rows, link_rows


def build(chats: Sequence[Chat], acts: LinearActModel, links: PairLinkModel
          ) -> tuple[list[ActRow], list[LinkRow]]:
    all_acts: list[ActRow] = []
    all_links: list[LinkRow] = []
    for chat in chats:
        a, b = read_chat(chat, acts, links)
        all_acts += a
        all_links += b
    return all_acts, all_links
