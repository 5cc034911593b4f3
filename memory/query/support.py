"""Deterministic checks that a reply's words rest on the messages it cites.

A generated sentence is shown only when every name, number and date in it, and
nearly all of its content words, occur in the messages it cites, and every cited
message shares content with it. The same word machinery scores how well a
message covers a question, which decides between answering and declining.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..ftsquery import terms
from ..question import content_stems

_NUMBER = re.compile(r"(?<![\w])[$€£]?\d[\d,.:/]*(?:am|pm|st|nd|rd|th|k|%)?(?![\w])", re.I)
_CAPITAL = re.compile(r"(?<![\w'’])([A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])")
_MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
# Words an answer uses to frame what the chat says; they need not occur in the cited message.
FRAMING = frozenset("""
said says say saying mention mentioned mentions told tell tells think thinks thought feel feels felt wrote
write asked ask answer answered reply replied chat channel group message messages memory remember
according yes no also still now earlier later latest current currently previously before after then
decided decide agreed agree plan planned wants want wanted likes like prefers prefer prefered preferred
person people someone everyone everybody members member they them their he she his her it its
""".split())


def numbers(text: str) -> set[str]:
    """Numbers, times, amounts and ordinals in ``text``, normalised ("7pm" and "7 pm" alike)."""
    found = set()
    for m in _NUMBER.finditer(text.replace(" pm", "pm").replace(" am", "am")):
        token = m.group(0).lower().rstrip(".,:").replace(",", "")
        token = re.sub(r"(st|nd|rd|th)$", "", token)
        if token:
            found.add(token)
    return found


def proper_names(text: str) -> set[str]:
    """Capitalised words not at a sentence start: names and places, lower-cased."""
    names = set()
    for sentence in _SENTENCE.split(text):
        for m in _CAPITAL.finditer(sentence):
            if m.start() == len(sentence) - len(sentence.lstrip()):
                continue  # the sentence's first word is capitalised anyway
            names.add(m.group(1).casefold())
    return names


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


@dataclass
class SupportResult:
    """Why a sentence is or is not supported by the messages it cites."""

    ok: bool
    missing_words: list[str] = field(default_factory=list)
    missing_names: list[str] = field(default_factory=list)
    missing_numbers: list[str] = field(default_factory=list)
    unrelated_citations: list[int] = field(default_factory=list)
    reason: str = ""


def check_sentence(sentence: str, cited_texts: dict[int, str], *, known_names: Iterable[str] = (),
                   min_coverage: float = 0.85) -> SupportResult:
    """Whether ``sentence`` rests on the cited messages (number -> text, speaker included).

    Names (roster names and other capitalised words), numbers and dates must all occur in the
    cited texts; at least ``min_coverage`` of the remaining content words must; and each cited
    message must share at least one content word with the sentence. No citation, no support.
    """
    if not cited_texts:
        return SupportResult(False, reason="cites no message")
    body = re.sub(r"\[\d{1,3}\]", " ", sentence)
    evidence = " ".join(cited_texts.values())
    ev_stems = set(content_stems(evidence))
    ev_lower = " ".join(evidence.casefold().split())
    missing_numbers = sorted(n for n in numbers(body) if n not in numbers(evidence))
    names = {n.casefold() for n in known_names if n}
    said_names = {n for n in proper_names(body) | {w for w in terms(body) if w in names}
                  if n not in _MONTHS or n not in ev_lower}
    missing_names = sorted(n for n in said_names if not re.search(r"(?<!\w)" + re.escape(n) + r"(?!\w)", ev_lower))
    words = [s for s in content_stems(body, drop=FRAMING) if not s.isdigit()]
    missing_words = [w for w in words if w not in ev_stems]
    coverage = 1.0 - len(missing_words) / len(words) if words else 0.0
    body_stems = set(content_stems(body))
    unrelated = sorted(n for n, text in cited_texts.items() if not body_stems & set(content_stems(text)))
    reasons = []
    if missing_numbers:
        reasons.append(f"numbers not in the cited messages: {', '.join(missing_numbers)}")
    if missing_names:
        reasons.append(f"names not in the cited messages: {', '.join(missing_names)}")
    if not words:
        reasons.append("says nothing of substance")
    elif coverage < min_coverage:
        reasons.append(f"words not in the cited messages: {', '.join(missing_words[:6])}")
    if unrelated:
        reasons.append(f"cited messages that share no words with it: {unrelated}")
    return SupportResult(not reasons, missing_words, missing_names, missing_numbers, unrelated, "; ".join(reasons))


def idf(doc_freq: int, n_docs: int) -> float:
    """BM25's inverse document frequency, floored at a small positive weight."""
    return max(0.05, math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5)))
