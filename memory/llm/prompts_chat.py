"""The chat form of the writer's, the insight pass's and the answerer's prompts.

The raw prompts (memory/writer/prompt.py, memory/writer/insights.py,
memory/query/answer.py) are written for base models: instructions, a worked
example, then text for the model to continue. An instruct model reads the same
content better as turns: the rules as the system turn, the worked example as a
user/assistant exchange, the real input as the last user turn. The content is
shared with the raw form (same roster, memory and message layout), so both forms
see exactly the same facts and a change to one layout reaches both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import ChatMessage
from .chat import messages_of

JSON_ONLY = ("Reply with the JSON object alone: no prose before or after it, no code fence. "
             "If nothing in the new messages is worth keeping, reply with an empty actions list.")


def _split_example(example: str) -> tuple[str, str]:
    """The worked example's input and its expected actions."""
    head, _, actions = example.partition("Actions:\n")
    body = head.split("\n", 1)[1] if head.startswith("Example\n") else head
    return body.strip(), actions.strip()


def writer_messages(people: Sequence[str], heads: Sequence[Any], names: dict[str, str],
                    window: Sequence[Any], *, extractive: bool = False) -> list[ChatMessage]:
    """The writer's window prompt as chat turns (same arguments as ``writer.prompt.build_prompt``)."""
    from ..writer import prompt as raw

    system = raw.INSTRUCTIONS
    example_in, example_out = _split_example(raw.EXAMPLE)
    if extractive:
        system += "\n\n" + raw.EXTRACTIVE_NOTE
        example_out = raw.EXTRACTIVE_ACTIONS
    system += "\n\n" + JSON_ONLY
    real = (f"People: {', '.join(people)}\nCurrent memory:\n{raw.format_heads(heads, names)}\n"
            f"New messages:\n{raw.format_messages(window)}")
    return messages_of(system, real, examples=[(example_in, example_out)])


def insight_messages(persona: Any, facts: Sequence[Any], names: dict[str, str]) -> list[ChatMessage]:
    """The persona-insight pass as chat turns (same arguments as ``writer.insights.insight_prompt``)."""
    lines = "\n".join(f"F{n} [{names.get(f.owner, f.owner)}] {f.content}" for n, f in enumerate(facts, 1))
    system = (f"You are {persona.name}, {persona.description}, and you care about {persona.cares_about}. "
              "You are given facts the group chat just revealed. Write at most three brief insights about "
              "what they mean for these people or for the group, from the angle of what you care about. "
              "Every insight lists the F numbers of the facts behind it and claims nothing those facts do not "
              'support. Reply with JSON only: {"insights": [{"content": ..., "cites": ["F1"]}]}.')
    return messages_of(system, f"Facts:\n{lines}")


def answer_messages(persona: Any, question: str, evidence: str) -> list[ChatMessage]:
    """The answerer's prompt as chat turns (same task as ``query.answer.answer_prompt``).

    One short sentence over the numbered messages, built only from their words and
    facts, citing them as [n]; the caller's support check decides whether it is shown.
    """
    system = (f"You are {persona.name}, {persona.description}; your manner is {persona.voice}. "
              "You are given numbered messages from a group chat and a question about it. Reply with a single "
              "short sentence that uses only facts and wording found in those messages, and put the number of "
              "every message you draw on in brackets, e.g. [2]. Keep each person's view apart from the others' "
              "and from what the group decided. If the messages do not answer the question, reply exactly: "
              "I don't know.")
    return messages_of(system, f"{evidence}\n\nQuestion: {question.strip()}")
