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
    """The round's questions and ``per_new`` times as many of the rest, drawn with a fixed seed."""
    new, rest = _split(questions, last_before(round_name, checks))
    return new + random.Random(seed).sample(rest, min(len(rest), per_new * len(new)))


def before_round(questions: Sequence[QuestionRows], round_name: str, checks: Path = CHECKS) -> list[QuestionRows]:
    """``questions`` without the ones a later round wrote: a run started before that round keeps reading (and
    is scored on) the data it started with, so resuming it after the round changes nothing."""
    return _split(questions, last_before(round_name, checks))[1]


def _split(questions: Sequence[QuestionRows], before: dict[str, str]) -> tuple[list[QuestionRows], list[QuestionRows]]:
    """The round's chat questions, and the rest, each in their order."""
    new: list[QuestionRows] = []
    rest: list[QuestionRows] = []
    for q in questions:
        (new if q.source == "chats" and in_round(q.qid, before) else rest).append(q)
    return new, rest
