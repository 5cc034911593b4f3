"""Labelling rounds: which chat questions a round wrote, and a replay set around them.

A round that adds questions to the chats records each chat's last question id before it
(`checks/<round>/last_before.json`), so a continued run can read the round's questions with a seeded sample of
the earlier ones beside them instead of a whole pass over everything. Torch-free, so the bot's tests cover it.
"""
from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from .reader_data import QuestionRows

CHECKS = Path(__file__).parent / "data" / "questions" / "checks"
ROUNDS = ("forms", "persons", "states", "askers")  # the labelling rounds, in the order they were written


def last_before(round_name: str, checks: Path = CHECKS) -> dict[str, str]:
    """Each chat's last question id before the round."""
    return json.loads((checks / round_name / "last_before.json").read_text("utf-8"))


def in_round(qid: str, before: dict[str, str]) -> bool:
    """Whether a chat question was written in the round: its number is past its chat's last one before."""
    chat, _, number = qid.rpartition("_r")
    last = before.get(chat)
    return last is not None and number.isdigit() and int(number) > int(last.rpartition("_r")[2])


def replay_set(questions: Sequence[QuestionRows], per_new: int, round_name: str = "forms", seed: int = 13,
               checks: Path = CHECKS) -> list[QuestionRows]:
    """The round's questions and ``per_new`` times as many of those from before it, drawn with a fixed seed.
    A later round's questions are in neither, so a replay run reads the same data after later rounds."""
    start = last_before(round_name, checks)
    later = _next_round(round_name, checks)
    new = [q for q in questions if _chat(q) and in_round(q.qid, start) and not (later and in_round(q.qid, later))]
    rest = before_round(questions, round_name, checks)
    return new + random.Random(seed).sample(rest, min(len(rest), per_new * len(new)))


def before_round(questions: Sequence[QuestionRows], round_name: str, checks: Path = CHECKS) -> list[QuestionRows]:
    """``questions`` without the ones that round or a later one wrote: a run started before that round keeps
    reading (and is scored on) the data it started with, so resuming it after the round changes nothing."""
    start = last_before(round_name, checks)
    return [q for q in questions if not (_chat(q) and in_round(q.qid, start))]


def _chat(q: QuestionRows) -> bool:
    return q.source == "chats"


def _next_round(round_name: str, checks: Path) -> dict[str, str] | None:
    """The last ids before the round that followed ``round_name``, when one has started."""
    if round_name not in ROUNDS:
        return None
    for later in ROUNDS[ROUNDS.index(round_name) + 1:]:
        if (checks / later / "last_before.json").exists():
            return last_before(later, checks)
    return None
