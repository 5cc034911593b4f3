"""Question forms, and the weight each labelled question gets in the reader's loss for its form's balance.

Torch-free, so the bot's tests cover it; `encoder_train` applies it when a run's options ask for it.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from .reader_data import QuestionRows

FORM_FLOOR = 0.2  # the least weight a labelled unanswerable keeps
FORM_PRIOR = 5  # answerables added to every form (small forms are not weighed down on a handful)


def question_form(question: str) -> str:
    """A question's opening two words ("what time", "how much", "who has"): the form its kind shows in."""
    return " ".join(re.findall(r"[a-z]+", question.casefold().replace("'s ", " is "))[:2])


def form_weights(questions: Sequence[QuestionRows]) -> list[float]:
    """Per question, its weight in the loss. Labellers write near misses for the question forms that have a
    tempting value nearby (a time, an amount), so a form can be mostly unanswerable in the data though it is
    not in use ("what time" is two thirds unanswerable here): the model then learns the form, not the reading,
    and declines "what time is dinner?" beside "7pm". Where a form's labelled unanswerables outnumber its
    answerables they are weighed down to match, at least `FORM_FLOOR`; answerables and counterfactuals keep 1."""
    forms = [question_form(q.question) for q in questions]
    answerable = Counter(f for f, q in zip(forms, questions) if q.kind == "answerable")
    unanswerable = Counter(f for f, q in zip(forms, questions) if q.kind in ("near_miss", "off_topic"))
    return [max(FORM_FLOOR, min(1.0, (answerable[f] + FORM_PRIOR) / unanswerable[f]))
            if q.kind in ("near_miss", "off_topic") else 1.0 for f, q in zip(forms, questions)]
