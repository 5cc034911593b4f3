"""The evidence-first answer: best Track 1 evidence plus one sentence from the local model.

This is the answer path until the full query pipeline (rows, Track 2, persona) is
used; it is kept as the fallback when no model is available.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .errors import ModelError
from .llm.base import INTERACTIVE, LLM
from .models import SearchHit
from .search import Searcher
from .timefmt import stamp

log = logging.getLogger(__name__)


@dataclass
class QuickAnswer:
    sentence: str
    hits: list[SearchHit]
    model_used: bool
    notes: list[str] = field(default_factory=list)


def evidence_lines(hits: list[SearchHit], max_chars: int = 300) -> list[str]:
    lines = []
    for n, hit in enumerate(hits, 1):
        m = hit.message
        text = " ".join(m.text.split())
        if len(text) > max_chars:
            text = text[: max_chars - 1] + "…"
        lines.append(f"[{n}] {m.author_name} ({stamp(m.ts)}): {text}")
    return lines


def phrase_sentence(llm: LLM, question: str, hits: list[SearchHit], max_tokens: int = 60) -> str:
    """One sentence from the model, grounded in the numbered evidence lines."""
    prompt = ("Below are numbered messages from a group chat, then a question about the chat.\n"
              "Reply with one short sentence that answers from these messages only and cites them like [1].\n\n"
              + "\n".join(evidence_lines(hits)) + f"\n\nQuestion: {question.strip()}\nOne-sentence answer:")
    out = llm.complete(prompt, max_tokens=max_tokens, temperature=0.0, stop=["\n", "Question:"],
                       priority=INTERACTIVE)
    return " ".join(out.text.split())


def quick_answer(searcher: Searcher, scope_ids: list[int], question: str, *, llm: LLM | None,
                 k: int = 3, exclude: set[int] | frozenset[int] = frozenset()) -> QuickAnswer:
    hits = searcher.search(scope_ids, question, k=k, exclude=exclude)
    if not hits:
        return QuickAnswer("I have nothing in this channel's memory about that.", [], False)
    notes: list[str] = []
    if llm is not None:
        try:
            sentence = phrase_sentence(llm, question, hits)
            if sentence:
                return QuickAnswer(sentence, hits, True)
            notes.append("the model returned an empty sentence")
        except ModelError as exc:
            log.warning("answer model failed: %s", exc)
            notes.append(f"model unavailable: {exc}")
    top = hits[0].message
    return QuickAnswer(f"The closest thing I remember is what {top.author_name} said [1].", hits, False, notes)
