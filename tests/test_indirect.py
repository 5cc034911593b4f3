"""A decline names what the chat doesn't say: questions become clauses ("how much dinner cost")."""
from __future__ import annotations

import pytest

from memory import nlp
from memory.indirect import indirect


@pytest.mark.parametrize("question, clause", [
    ("how much did dinner cost?", "how much dinner cost"),
    ("what GPU does sara-v have?", "what GPU sara-v has"),  # a nick the tokenizer splits stays one word
    ("when did kenji|work leave?", "when kenji|work left"),
    ("where are we having dinner?", "where we are having dinner"),
    ("when is the quiz?", "when the quiz is"),
    ("what's the wifi password?", "what the wifi password is"),
    ("what time should we meet on friday?", "what time we should meet on friday"),
    ("when does the shop open?", "when the shop opens"),
    ("what did Priya say about spicy food?", "what Priya said about spicy food"),
    ("did Sam pay the deposit?", "whether Sam paid the deposit"),
    ("can I bring my dog?", "whether you can bring your dog"),
    ("who is bringing the cake?", "who is bringing the cake"),
    ("who has the key to the club house?", "who has the key to the club house"),
    ("why didn't sam come?", "why sam didn't come"),
    ("who hasnt paid yet?", "who hasn't paid yet"),
    ("what does everyone think about the Thai place?", "what everyone thinks about the Thai place"),
    ("What did Ross want to name his son?", "what Ross wanted to name his son"),
    ("did anyone say they'd be late?", "whether anyone said they'd be late"),
    ("what did Leo say he'll bring?", "what Leo said he'll bring"),
    ("who said we're out of cups?", "who said we're out of cups"),
])
def test_questions_become_the_clause_a_decline_names(question, clause):
    assert indirect(nlp.doc(question)) == clause


@pytest.mark.parametrize("text", ["hi", "pizza!", "lunch at noon", "is the pub dog friendly?",
                                  "Which countries did Bonnie list as places she had sex?"])
def test_what_does_not_read_as_a_plain_question_names_nothing(text):
    # The caller then declines without naming anything, which is never wrong.
    assert indirect(nlp.doc(text)) is None
