"""Persona insights (DualMem): interpretations of committed facts through the persona.

Each insight must cite the fact records it rests on; one citing nothing, or
anything that does not resolve, is rejected. Insights inherit their facts'
provenance, so they can always be traced back to chat messages.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records import GROUP, INSIGHT_LAYER, PERSONA, NewRecord
from .grounding import content_terms, near_duplicate, quotes
from .verify import Rejection

MAX_INSIGHTS = 3
MIN_SHARED_TERMS = 2  # an insight restates at least two content words of the facts it cites
# An insight speaks about the chat, not as the persona about itself ("I'm sorry, I'm not a good listener").
_SELF_TALK = re.compile(r"\b(I|I'm|I am|I'd|I'll|I've|me|my|myself|sorry|apolog\w*|as an ai)\b", re.I)


def not_about_chat(content: str) -> str | None:
    """Why an insight does not read as a statement about the chat, or None."""
    m = _SELF_TALK.search(content)
    if m:
        return f"reads as the bot talking about itself ({m.group(0)!r}), not a statement about the chat"
    if content.rstrip().endswith("?"):
        return "is a question, not a statement about the chat"
    return None


def not_supported(content: str, cited: Sequence[NewRecord]) -> str | None:
    """Why an insight says nothing its facts support, or None: the replies' support check against the cited
    facts (memory/query/support.py), and it must say more than a quote of one of them."""
    from ..query.support import check_sentence  # the same check a reply's model sentence passes

    result = check_sentence(content, {n: f.content for n, f in enumerate(cited, 1)})
    if not result.ok:
        return f"fails the support check against the facts it cites ({result.reason})"
    if any(quotes(content, f.content) for f in cited):
        return "quotes one fact instead of saying what the facts mean"
    return None


@dataclass
class Persona:
    name: str
    description: str
    voice: str
    cares_about: str


def insight_prompt(persona: Persona, facts: Sequence[NewRecord], names: dict[str, str]) -> str:
    lines = "\n".join(f"F{n} [{names.get(f.owner, f.owner)}] {f.content}" for n, f in enumerate(facts, 1))
    return (f"You are {persona.name}, {persona.description}. You care about {persona.cares_about}.\n"
            "Below are facts just learned from the group chat. Write up to three short insights: what these facts "
            "mean for the people or the group, seen from what you care about. Each insight cites the facts it "
            "rests on by their F numbers and must not claim anything the facts do not support.\n\n"
            f"Facts:\n{lines}\n\nInsights as JSON:\n")


def insight_schema(n_facts: int) -> dict:
    return {"type": "object", "properties": {"insights": {"type": "array", "maxItems": MAX_INSIGHTS, "items": {
        "type": "object", "properties": {
            "content": {"type": "string", "maxLength": 240},
            "cites": {"type": "array", "minItems": 1, "maxItems": 4,
                      "items": {"enum": [f"F{i}" for i in range(1, n_facts + 1)]}}},
        "required": ["content", "cites"], "additionalProperties": False}}},
        "required": ["insights"], "additionalProperties": False}


def verify_insights(data: Any, facts: Sequence[NewRecord], existing: Sequence[str],
                    scope_id: int) -> tuple[list[tuple[NewRecord, list[int]]], list[Rejection]]:
    """Accepted insights with the indexes of the facts they cite, and rejections with reasons."""
    accepted: list[tuple[NewRecord, list[int]]] = []
    rejected: list[Rejection] = []
    items = data.get("insights") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], [Rejection(data, "insight output has no 'insights' list")]
    for item in items[:MAX_INSIGHTS]:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str) or not item["content"].strip():
            rejected.append(Rejection(item, "an insight needs non-empty content"))
            continue
        cites = item.get("cites")
        if not isinstance(cites, list) or not cites:
            rejected.append(Rejection(item, "an insight must cite at least one fact"))
            continue
        idx: list[int] = []
        bad = None
        for c in cites:
            s = str(c).strip().upper().lstrip("F")
            if not s.isdigit() or not 1 <= int(s) <= len(facts):
                bad = c
                break
            if int(s) - 1 not in idx:
                idx.append(int(s) - 1)
        if bad is not None:
            rejected.append(Rejection(item, f"cites {bad!r}, which is not one of the facts F1..F{len(facts)}"))
            continue
        content = " ".join(item["content"].split())
        cited = [facts[i] for i in idx]
        shared = content_terms(content) & set().union(*(content_terms(f.content) for f in cited))
        if len(shared) < MIN_SHARED_TERMS:
            rejected.append(Rejection(item, f"shares {len(shared)} content word(s) with the facts it cites (needs "
                                            f"{MIN_SHARED_TERMS}), so it does not rest on them"))
            continue
        off = not_about_chat(content)
        if off:
            rejected.append(Rejection(item, off))
            continue
        unsupported = not_supported(content, cited)
        if unsupported:
            rejected.append(Rejection(item, unsupported))
            continue
        if any(near_duplicate(content, e) for e in existing) or any(near_duplicate(content, a.content)
                                                                    for a, _ in accepted):
            rejected.append(Rejection(item, "duplicates an existing insight"))
            continue
        owners = {f.owner for f in cited}
        message_ids = sorted({m for f in cited for m in f.message_ids})
        latest = max(cited, key=lambda f: f.ts)
        rec = NewRecord(scope_id=scope_id, layer=INSIGHT_LAYER, utype="insight",
                        owner=owners.pop() if len(owners) == 1 else GROUP, source=PERSONA, content=content,
                        ts=latest.ts, session=latest.session, turn=latest.turn,
                        confidence=round(min(f.confidence for f in cited), 3), message_ids=message_ids,
                        verification={"cites": [f"F{i + 1}" for i in idx]})
        accepted.append((rec, idx))
    return accepted, rejected
