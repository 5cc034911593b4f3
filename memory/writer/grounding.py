"""Lexical grounding: does a proposed record say only what a chat message said?

A record is grounded in a message when enough of its content words appear in that
message (after Porter stemming). Messages that try to instruct the memory writer
(fake system lines, fake JSON actions, "ignore previous instructions") can never be
the ground for a record.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..ftsquery import STOPWORDS, stem, terms

_STEERING = [
    re.compile(r"ignore\s+(all\s+|any\s+|the\s+)?(previous|prior|above|earlier)\s+(instructions|rules|prompts?)", re.I),
    re.compile(r"^\s*(system|assistant|developer)\s*[:>]", re.I | re.M),
    re.compile(r"\[\s*(system|inst)\s*\]|<\s*/?\s*(system|s|inst)\s*>|<\|[a-z_]+\|>", re.I),
    re.compile(r"[\"']?(op|action|type)[\"']?\s*:\s*[\"']?(ADD|UPDATE|NOOP)\b", re.I),
    re.compile(r"[{\[]\s*[\"']?actions[\"']?\s*:", re.I),
    re.compile(r"\b(memory|record)\s+writer\b|\bentry_id\b|\bnew\s+instructions?\b", re.I),
    # Fake entry ids ("UPDATE E1: ...", "E1 := ...") and lines copying the writer prompt's own layout.
    re.compile(r"\b(ADD|UPDATE|DELETE|REMOVE|RETRACT|NOOP)\s*[:(-]?\s*E\d{1,9}\b|\bE\d{1,9}\s*(:=|=>|->)", re.I),
    re.compile(r"^\s*(current\s+memory|new\s+messages)\s*:|^\s*E\d{1,9}\s*\[[a-z_]+\||"
               r"^\s*\(\d{1,3}\)\s*[^\n]{1,60}?\s@\s\d{4}-\d\d-\d\d", re.I | re.M),
]


def steering_reason(text: str) -> str | None:
    """Why a message looks like an attempt to steer the writer, or None."""
    for pattern in _STEERING:
        m = pattern.search(text)
        if m:
            return f"the message tries to instruct the memory writer ({m.group(0).strip()[:40]!r})"
    return None


@lru_cache(maxsize=65536)
def content_terms(text: str) -> frozenset[str]:
    """The stemmed content words of ``text``.

    Cached: the writer compares every proposal with every message of its window and every current
    head of the scope, so the same texts are tokenised window after window (profiled under
    `chorus bench load`: this was a third of a window's time).
    """
    return frozenset(stem(t) for t in terms(text) if t not in STOPWORDS)


@dataclass
class Grounding:
    score: float
    message_index: int | None
    matched: int
    total: int


def ground(content: str, messages: Sequence[str]) -> Grounding:
    """The best-supporting message for ``content`` and the share of its words found there."""
    wanted = content_terms(content)
    if not wanted:
        return Grounding(0.0, None, 0, 0)
    best = Grounding(0.0, None, 0, len(wanted))
    for i, text in enumerate(messages):
        have = content_terms(text)
        matched = len(wanted & have)
        score = matched / len(wanted)
        if score > best.score:
            best = Grounding(score, i, matched, len(wanted))
    return best


def near_duplicate(a: str, b: str, threshold: float = 0.85) -> bool:
    """Same statement worded (almost) the same way: token overlap both ways."""
    ta, tb = content_terms(a), content_terms(b)
    if not ta or not tb:
        return " ".join(a.casefold().split()) == " ".join(b.casefold().split())
    inter = len(ta & tb)
    return inter / len(ta) >= threshold and inter / len(tb) >= threshold


class DuplicateIndex:
    """Finds, among many texts, the first that ``near_duplicate`` matches, without comparing them all.

    Two texts with content words can only be near duplicates if they share one, so a text is only
    compared with those sharing a word (an inverted index); texts without content words are matched
    by their normalised wording, as ``near_duplicate`` does. The answer is the same as a scan in order.
    """

    def __init__(self, items: Iterable[tuple[int, str]]) -> None:
        self.items: list[tuple[int, str]] = list(items)
        self._by_term: dict[str, list[int]] = {}
        self._by_wording: dict[str, list[int]] = {}
        for pos, (_, text) in enumerate(self.items):
            words = content_terms(text)
            if words:
                for w in words:
                    self._by_term.setdefault(w, []).append(pos)
            else:
                self._by_wording.setdefault(" ".join(text.casefold().split()), []).append(pos)

    def first(self, text: str, *, skip: int | None = None, threshold: float = 0.85) -> int | None:
        """The key of the first item that ``text`` nearly duplicates (``skip``: a key to pass over)."""
        words = content_terms(text)
        if words:
            cands = sorted({pos for w in words for pos in self._by_term.get(w, ())})
        else:
            cands = self._by_wording.get(" ".join(text.casefold().split()), [])
        for pos in cands:
            key, other = self.items[pos]
            if key != skip and near_duplicate(other, text, threshold):
                return key
        return None


def quotes(a: str, b: str) -> bool:
    """``a`` is a quote of ``b``: the same statement worded (almost) the same way, or a run of its words."""
    norm = lambda t: " " + " ".join(re.findall(r"\w+", t.casefold())) + " "  # noqa: E731
    return near_duplicate(a, b) or (len(norm(a).split()) >= 2 and norm(a) in norm(b))


def contained(a: str, b: str, threshold: float = 0.85) -> bool:
    """One statement says (almost) nothing the other does not: the shorter's words sit in the longer."""
    ta, tb = content_terms(a), content_terms(b)
    if not ta or not tb:
        return False
    return len(ta & tb) / min(len(ta), len(tb)) >= threshold
