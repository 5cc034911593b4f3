"""What a chat question says beyond its words, as search reads it: who it names, which periods it
pins, whether the answer is spread over the members. Search turns these into boosts (see
memory/fusion.py); each is measured on its own in docs/retrieval.md. The question itself is read
once, by the question analysis (memory/question.py); this module only picks what search needs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .question import Question, analyse, dense_query
from .store import Person

__all__ = ["QuestionSignals", "dense_query", "of_question", "pinned_periods", "read_question"]


@dataclass
class QuestionSignals:
    authors: list[str] = field(default_factory=list)  # author ids the question names
    periods: list[tuple[float, float]] = field(default_factory=list)  # [start, end) timestamps
    each: bool = False


def of_question(q: Question) -> QuestionSignals:
    """The signals of an analysed question."""
    return QuestionSignals(list(q.named), q.periods, q.spread)


def read_question(question: str, people: Sequence[tuple[str, Sequence[str]]],
                  asked_at: float | None) -> QuestionSignals:
    """Signals of a question given as text and (person id, names) pairs (the offline tuning's form)."""
    roster = [Person(0, pid, names[0] if names else pid, list(names[1:]), 0, 0.0, 0.0) for pid, names in people]
    q = analyse(question, roster, asked_at=asked_at if asked_at is not None else 0.0)
    return of_question(q) if asked_at is not None else QuestionSignals(list(q.named), [], q.spread)


def pinned_periods(question: str, asked_at: float) -> list[tuple[float, float]]:
    """The [start, end) periods the question pins (the question analysis's time pins)."""
    return analyse(question, [], asked_at=asked_at).periods
