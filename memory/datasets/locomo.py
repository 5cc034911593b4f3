"""LoCoMo: long two-person conversations with gold evidence turn ids.

Each sample becomes one Conversation whose messages keep LoCoMo's own dia_ids
("D3:12") as msg_ids, so gold evidence maps onto stored messages directly.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..models import Message
from .base import Conversation, Question, dedupe, make_message, read_json, require

PLATFORM = "locomo"
TURN_GAP_S = 30.0
ADVERSARIAL_CATEGORY = "5"

_SESSION_KEY = re.compile(r"session_(\d+)")
# "1:56 pm on 8 May, 2023" (and small variations in spacing / comma / case).
_DATE_RE = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s*(?:on\s+)?(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})", re.I)
# Evidence ids are sometimes glued together ("D8:6; D9:17", "D9:1 D4:4") or
# mistyped ("D:11:26", "D30:05"); pull every D<session>:<turn> out of the string.
_EVIDENCE_RE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.I)
_MONTHS = {m.lower(): i for i, m in enumerate(
    ["January", "February", "March", "April", "May", "June", "July", "August",
     "September", "October", "November", "December"], start=1)}


def parse_locomo_time(text: str) -> float | None:
    """Parse LoCoMo's "1:56 pm on 8 May, 2023" as UTC seconds; None when it does not fit."""
    m = _DATE_RE.search(text or "")
    if not m:
        return None
    hour, minute, ampm, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower()) or next(
        (v for k, v in _MONTHS.items() if len(month_name) >= 3 and k.startswith(month_name.lower())), None)
    if month is None:
        return None
    h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        dt = datetime(int(year), month, int(day), h, int(minute), tzinfo=UTC)
    except ValueError:
        return None
    return dt.timestamp()


def parse_evidence(raw: object) -> tuple[list[str], int]:
    """Normalise raw evidence into "D<s>:<t>" ids; returns (ids, entries with no id at all)."""
    entries = raw if isinstance(raw, list) else [raw] if raw not in (None, "") else []
    ids: list[str] = []
    unparsable = 0
    for entry in entries:
        found = _EVIDENCE_RE.findall(str(entry))
        if not found:
            unparsable += 1
        ids.extend(f"D{int(s)}:{int(t)}" for s, t in found)
    return dedupe(ids), unparsable


def load_locomo(path: str | Path) -> list[Conversation]:
    """Load a LoCoMo JSON file (a list of samples) into Conversations."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of LoCoMo samples, found {type(data).__name__}")
    return [_sample(sample, i, path) for i, sample in enumerate(data)]


def _sample(sample: object, index: int, path: Path) -> Conversation:
    where = f"{path} sample {index}"
    conv = require(sample, "conversation", where, dict)
    sample_id = str(require(sample, "sample_id", where)) or f"sample-{index}"
    where = f"{path} sample {sample_id}"
    qa = require(sample, "qa", where, list)
    speakers = [str(conv[k]) for k in ("speaker_a", "speaker_b") if conv.get(k)]

    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    if not numbers:
        raise DatasetError(f"{where}: 'conversation' has no 'session_N' keys")
    messages: list[Message] = []
    prev_start: float | None = None
    for n in numbers:
        turns = conv[f"session_{n}"]
        if not isinstance(turns, list):
            raise DatasetError(f"{where}: 'session_{n}' should be a list of turns")
        stamp = conv.get(f"session_{n}_date_time")
        start = parse_locomo_time(str(stamp)) if stamp else None
        if start is None:
            # Unknown date: keep order by placing the session a day after the last one.
            start = (prev_start + 86400.0) if prev_start is not None else datetime(
                2023, 1, 1, tzinfo=UTC).timestamp()
        prev_start = start
        for k, turn in enumerate(turns):
            twhere = f"{where} session_{n} turn {k}"
            messages.append(_turn(turn, k, n, start, sample_id, stamp, twhere))
        if not speakers:
            speakers = dedupe([m.author_name for m in messages])

    known = {m.msg_id for m in messages}
    if len(known) != len(messages):
        raise DatasetError(f"{where}: duplicate dia_id values")
    questions, dropped = [], 0
    for qi, item in enumerate(qa):
        q, d = _question(item, qi, sample_id, known, f"{where} qa {qi}")
        questions.append(q)
        dropped += d
    return Conversation(id=sample_id, messages=messages, questions=questions,
                        speakers=speakers, dropped_evidence=dropped)


def _turn(turn: dict[str, Any], k: int, n: int, start: float, sample_id: str, stamp: object, where: str) -> Message:
    speaker = str(require(turn, "speaker", where))
    dia_id = str(require(turn, "dia_id", where)).strip()
    text = require(turn, "text", where)
    text = "" if text is None else str(text)
    extra: dict = {"session_date_time": stamp}
    caption = turn.get("blip_caption")
    if caption:
        # Photos are part of what was said; keep the caption so nothing is lost.
        text = f"{text} [shares a photo: {caption}]".strip()
        extra["blip_caption"] = caption
        for key in ("img_url", "query"):
            if turn.get(key):
                extra[key] = turn[key]
    return make_message(
        where, platform=PLATFORM, workspace="", channel=sample_id, msg_id=dia_id,
        author_id=speaker, author_name=speaker, text=text,
        ts=start + k * TURN_GAP_S, session_hint=n, extra=extra)


def _question(item: dict[str, Any], qi: int, sample_id: str, known: set[str], where: str) -> tuple[Question, int]:
    text = str(require(item, "question", where))
    category = str(require(item, "category", where)).strip()
    ids, unparsable = parse_evidence(item.get("evidence"))
    evidence = [e for e in ids if e in known]
    dropped = unparsable + len(ids) - len(evidence)
    adversarial = category == ADVERSARIAL_CATEGORY
    extra: dict = {"raw_evidence": item.get("evidence")}
    if adversarial:
        # The right reply is to abstain; the trap answer is kept for scoring.
        answer = None
        extra["adversarial_answer"] = item.get("adversarial_answer")
        if "answer" in item:
            extra["reference_answer"] = item["answer"]
    else:
        raw = require(item, "answer", where)
        answer = str(raw)
    return Question(id=f"{sample_id}:q{qi}", question=text, answer=answer, category=category,
                    evidence=evidence, adversarial=adversarial, extra=extra), dropped
