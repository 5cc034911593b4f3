"""Chorus's own transcript format: one JSON object per line.

It is the simplest way to import an exported chat or replay a demo. Fields:
``speaker`` and ``text`` (required); ``ts`` (ISO 8601 or unix seconds),
``channel`` (default "import"), ``id`` (default: the line number),
``speaker_id``, ``reply_to``, ``thread``, ``platform`` (default "import"),
``workspace``, and the round-trip extras ``is_dm``, ``is_bot``,
``channel_name``, ``session`` and ``extra``. Every line is parsed before any
message is returned, so a bad file imports nothing.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from ..errors import ChorusError, DatasetError
from ..models import Message
from .base import Conversation, dedupe, parse_iso, read_text

DEFAULT_CHANNEL = "import"
DEFAULT_PLATFORM = "import"
SYNTHETIC_GAP_S = 1.0
# Used only when no line of the file carries a time at all.
SYNTHETIC_START = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
_KNOWN = {"speaker", "text", "ts", "channel", "id", "speaker_id", "reply_to", "thread", "platform",
          "workspace", "is_dm", "is_bot", "channel_name", "session", "extra"}


def read_jsonl(path: str | Path) -> list[Message]:
    """Parse a transcript file into Messages in file order; raises DatasetError naming the bad line."""
    path = Path(path)
    raw_text = read_text(path, "a .jsonl transcript file")

    rows: list[tuple[int, dict, float | None]] = []
    for lineno, line in enumerate(raw_text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected a JSON object, found {type(obj).__name__}")
        for required in ("speaker", "text"):
            if required not in obj:
                raise DatasetError(f"{where}: missing required key {required!r}")
        if not isinstance(obj["text"], str):
            raise DatasetError(f"{where}: 'text' should be a string, found {type(obj['text']).__name__}")
        if not str(obj["speaker"] or "").strip():
            raise DatasetError(f"{where}: 'speaker' is empty")
        rows.append((lineno, obj, _parse_ts(obj.get("ts"), where)))
    if not rows:
        raise DatasetError(f"{path}: no messages (the file is empty)")

    times = _fill_times([ts for _, _, ts in rows])
    messages: list[Message] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    for (lineno, obj, _), ts in zip(rows, times):
        where = f"{path} line {lineno}"
        msg = _message(obj, lineno, ts, where)
        key = (msg.platform, msg.workspace, msg.channel, msg.msg_id)
        if key in seen:
            raise DatasetError(f"{where}: id {msg.msg_id!r} already used on line {seen[key]} "
                               f"in channel {msg.channel!r}")
        seen[key] = lineno
        messages.append(msg)
    return messages


def load_jsonl(path: str | Path) -> list[Conversation]:
    """Load a transcript as Conversations, one per (platform, workspace, channel), no questions."""
    groups: dict[tuple[str, str, str], list[Message]] = {}
    for msg in read_jsonl(path):
        groups.setdefault((msg.platform, msg.workspace, msg.channel), []).append(msg)
    convs = []
    for (platform, workspace, channel), msgs in groups.items():
        conv_id = channel if len(groups) == 1 else "/".join(p for p in (platform, workspace, channel) if p)
        convs.append(Conversation(id=conv_id, messages=msgs, questions=[],
                                  speakers=dedupe([m.author_name for m in msgs]), dropped_evidence=0))
    return convs


def dump_jsonl(messages: Iterable[Message], path: str | Path) -> int:
    """Write messages in the transcript format (read back by ``read_jsonl``); returns lines written."""
    path = Path(path)
    count = 0
    try:
        with open(path, "w", encoding="utf-8") as fh:
            for msg in messages:
                fh.write(json.dumps(_to_row(msg), ensure_ascii=False) + "\n")
                count += 1
    except OSError as exc:
        raise DatasetError(f"cannot write {path}: {exc}") from None
    return count


def _to_row(msg: Message) -> dict:
    row: dict = {"id": msg.msg_id, "speaker": msg.author_name, "speaker_id": msg.author_id,
                 "text": msg.text, "ts": msg.ts, "platform": msg.platform, "channel": msg.channel}
    optional = {"workspace": msg.workspace, "thread": msg.thread, "reply_to": msg.reply_to,
                "is_dm": msg.is_dm, "is_bot": msg.is_bot, "channel_name": msg.channel_name,
                "session": msg.session_hint}
    row.update({k: v for k, v in optional.items() if v not in (None, "", False)})
    if msg.extra:
        try:
            json.dumps(msg.extra)
            row["extra"] = msg.extra
        except (TypeError, ValueError):
            pass  # extras that are not JSON (platform objects) are not part of the transcript
    return row


def _message(obj: dict, lineno: int, ts: float, where: str) -> Message:
    speaker = str(obj["speaker"]).strip()
    session = obj.get("session")
    if session is not None and (isinstance(session, bool) or not isinstance(session, int)):
        raise DatasetError(f"{where}: 'session' should be an integer")
    extra = obj.get("extra") or {}
    if not isinstance(extra, dict):
        raise DatasetError(f"{where}: 'extra' should be a JSON object")
    for key in ("is_dm", "is_bot"):
        if key in obj and not isinstance(obj[key], bool):
            raise DatasetError(f"{where}: {key!r} should be true or false")
    reply_to = obj.get("reply_to")
    try:
        return Message(
            platform=_text(obj.get("platform"), DEFAULT_PLATFORM),
            workspace=_text(obj.get("workspace"), ""),
            channel=_text(obj.get("channel"), DEFAULT_CHANNEL),
            msg_id=_text(obj.get("id"), str(lineno)),
            author_id=_text(obj.get("speaker_id"), speaker),
            author_name=speaker,
            text=obj["text"],
            ts=ts,
            thread=_text(obj.get("thread"), ""),
            reply_to=None if reply_to in (None, "") else str(reply_to),
            is_dm=bool(obj.get("is_dm", False)),
            is_bot=bool(obj.get("is_bot", False)),
            channel_name=_text(obj.get("channel_name"), ""),
            session_hint=session,
            extra=dict(extra),
        )
    except ChorusError as exc:
        raise DatasetError(f"{where}: {exc}") from None


def _text(value: object, default: str) -> str:
    if value is None:
        return default
    text = str(value).strip()
    return text or default


def _parse_ts(value: object, where: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise DatasetError(f"{where}: 'ts' should be ISO 8601 text or unix seconds, found {value!r}")
    if isinstance(value, (int, float)):
        ts = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            ts = float(text)
        except ValueError:
            try:
                ts = parse_iso(text)
            except ValueError:
                raise DatasetError(f"{where}: 'ts' {value!r} is neither ISO 8601 nor unix seconds") from None
    else:
        raise DatasetError(f"{where}: 'ts' should be ISO 8601 text or unix seconds, found {type(value).__name__}")
    if not math.isfinite(ts):
        raise DatasetError(f"{where}: 'ts' is not a finite number")
    return ts


def _fill_times(known: list[float | None]) -> list[float]:
    """Give lines without a time one that keeps file order: a second after the previous line."""
    first = next((t for t in known if t is not None), None)
    leading = next((i for i, t in enumerate(known) if t is not None), len(known))
    out: list[float] = []
    prev: float | None = None
    for i, ts in enumerate(known):
        if ts is None:
            if prev is not None:
                ts = prev + SYNTHETIC_GAP_S
            elif first is not None:
                ts = first - (leading - i) * SYNTHETIC_GAP_S
            else:
                ts = SYNTHETIC_START + i * SYNTHETIC_GAP_S
        out.append(ts)
        prev = ts
    return out
