"""SocialMemBench: multi-person group chats with Q1-Q9 social-memory questions.

Each network file becomes one Conversation. Turn ids in the published files are
already unique per network ("grp_0d1e2f3a_s03_t002"), and evidence anchors name
them, so they are used as msg_ids unchanged.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..errors import DatasetError
from ..models import Message
from .base import Conversation, Question, dedupe, make_message, parse_iso, read_json, require

PLATFORM = "socialmem"
FALLBACK_GAP_S = 60.0
D = TypeVar("D", int, None)
_TURN_NUMBER = re.compile(r"(?:^|_t)(\d+)$")


def load_socialmem(path: str | Path) -> list[Conversation]:
    """Load one network file, or every ``*.json`` in a folder (sorted by name)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise DatasetError(f"{path}: folder holds no SocialMemBench *.json files")
    else:
        files = [path]
    convs = [load_network(f) for f in files]
    seen: set[str] = set()
    for conv in convs:
        if conv.id in seen:
            raise DatasetError(f"{path}: network {conv.id!r} appears in more than one file")
        seen.add(conv.id)
    return convs


def load_network(path: Path) -> Conversation:
    """Load a single SocialMemBench network file."""
    data = read_json(path)
    where = str(path)
    sessions = require(data, "sessions", where, list)
    qa_pairs = require(data, "qa_pairs", where, list)
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    conv_id = str(meta.get("network_id") or path.stem)

    messages: list[Message] = []
    by_position: dict[tuple[int, int], str] = {}
    raw_turns: list[dict] = []
    prev_ts: float | None = None
    for si, session in enumerate(sessions):
        swhere = f"{where} sessions[{si}]"
        turns = require(session, "turns", swhere, list)
        index = _as_int(session.get("session_index"), si + 1)
        session_start = _try_iso(session.get("ts"))
        for ti, turn in enumerate(turns):
            twhere = f"{swhere} turns[{ti}]"
            turn_id = str(require(turn, "turn", twhere)).strip()
            speaker = str(require(turn, "speaker", twhere))
            content = require(turn, "content", twhere)
            ts = _try_iso(turn.get("ts"))
            if ts is None:
                # No usable turn time: session time plus a minute per turn, else after the last turn.
                if session_start is not None:
                    ts = session_start + ti * FALLBACK_GAP_S
                else:
                    ts = (prev_ts + FALLBACK_GAP_S) if prev_ts is not None else 0.0
            prev_ts = ts
            msg_id = turn_id or f"{index}:{ti}"
            by_position[(index, ti)] = msg_id
            raw_turns.append(turn)
            messages.append(make_message(
                twhere, platform=PLATFORM, workspace="", channel=conv_id, msg_id=msg_id,
                author_id=str(turn.get("speaker_id") or speaker), author_name=speaker,
                text="" if content is None else str(content), ts=ts, session_hint=index,
                extra={"session_id": session.get("session_id"), "topic": session.get("topic")}))

    known = {m.msg_id for m in messages}
    if len(known) != len(messages):
        raise DatasetError(f"{where}: duplicate turn ids")
    # Replies point at turn ids; keep those that resolve within the network.
    for i, turn in enumerate(raw_turns):
        target = str(turn.get("reply_to") or "").strip()
        if target and target in known:
            messages[i] = replace(messages[i], reply_to=target)

    questions, dropped = [], 0
    for qi, item in enumerate(qa_pairs):
        q, d = _question(item, qi, conv_id, known, by_position, f"{where} qa_pairs[{qi}]")
        questions.append(q)
        dropped += d
    return Conversation(id=conv_id, messages=messages, questions=questions,
                        speakers=_speakers(data.get("speakers"), messages), dropped_evidence=dropped)


def _question(item: dict[str, Any], qi: int, conv_id: str, known: set[str],
              by_position: dict[tuple[int, int], str], where: str) -> tuple[Question, int]:
    text = str(require(item, "question", where))
    category = str(require(item, "category", where)).strip()
    answer = require(item, "answer", where)
    anchors = item.get("evidence_anchors") or []
    if not isinstance(anchors, list):
        raise DatasetError(f"{where}: 'evidence_anchors' should be a list")
    evidence: list[str] = []
    dropped = 0
    for anchor in anchors:
        resolved = _resolve_anchor(anchor, known, by_position)
        if resolved is None:
            dropped += 1
        else:
            evidence.append(resolved)
    extra: dict[str, Any] = {k: item[k] for k in ("difficulty", "answer_format", "options", "correct_option",
                                                  "temporal_anchors", "per_member") if k in item}
    extra["evidence_anchors"] = anchors
    return Question(id=str(item.get("id") or f"{conv_id}:q{qi}"), question=text,
                    answer=None if answer is None else str(answer), category=category,
                    evidence=dedupe(evidence), adversarial=_unanswerable(item, category), extra=extra), dropped


def _unanswerable(item: dict, category: str) -> bool:
    """Questions the chat cannot answer (our own question sets mark them; the right reply declines)."""
    return bool(item.get("unanswerable")) or category.casefold() == "unanswerable"


def _resolve_anchor(anchor: object, known: set[str], by_position: dict[tuple[int, int], str]) -> str | None:
    """Map an anchor to a msg_id: by its turn id, else by (session_index, turn number)."""
    if not isinstance(anchor, dict):
        return None
    turn_id = str(anchor.get("turn_id") or "").strip()
    if turn_id in known:
        return turn_id
    m = _TURN_NUMBER.search(turn_id)
    session = _as_int(anchor.get("session_index"), None)
    if m and session is not None:
        return by_position.get((session, int(m.group(1))))
    return None


def _speakers(raw: object, messages: list[Message]) -> list[str]:
    if isinstance(raw, list) and raw:
        names = [str(s.get("name") or s.get("display_name") or s.get("id")) if isinstance(s, dict) else str(s)
                 for s in raw]
        return dedupe([n for n in names if n])
    return dedupe([m.author_name for m in messages])


def _try_iso(value: object) -> float | None:
    if not value:
        return None
    try:
        return parse_iso(str(value))
    except ValueError:
        return None


def _as_int(value: object, default: D) -> int | D:
    try:
        return int(value)  # type: ignore[call-overload]  # any JSON value; int() failing is the default
    except (TypeError, ValueError):
        return default
