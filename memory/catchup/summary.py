"""An optional one-sentence summary per group of a digest, written by a capable model.

Shown only when the reply support check (``memory.query.support.check_sentence``) finds its names,
numbers and words in the messages that group cites; otherwise the group stays quotes only. The shipped
tiny model is never asked (the caller decides, as for replies).
"""
from __future__ import annotations

import logging
from typing import Any

from ..errors import ModelError
from ..llm.base import INTERACTIVE
from ..llm.chat import generate
from ..query.support import check_sentence, sentences
from .digest import Digest
from .render import HEADINGS, excerpt

log = logging.getLogger(__name__)
MAX_TOKENS = 60


def summary_prompt(kind: str, quotes: list[str]) -> str:
    listed = "\n".join(f"- {q}" for q in quotes)
    return (f"These chat messages are the group's {HEADINGS[kind].lower()} from a member's catch-up digest.\n"
            f"{listed}\nIn one short sentence, using only names and facts from these messages, say what they "
            "add up to.\nSentence:")


def summarise(llm: Any, digest: Digest, *, known_names: list[str]) -> dict[str, str]:
    """kind -> one checked sentence, for groups of two or more lines (a single line speaks for itself)."""
    out: dict[str, str] = {}
    for kind in HEADINGS:
        group = [ln for ln in digest.lines if ln.kind == kind]
        if len(group) < 2:
            continue
        cited = [digest.messages[mid] for ln in group for mid in ln.cited if mid in digest.messages]
        quotes = [f"{m.author_name}: {excerpt(m.text)}" for m in cited]
        prompt = summary_prompt(kind, quotes)
        try:
            done = generate(llm, raw_prompt=prompt, messages=[{"role": "user", "content": prompt}],
                            max_tokens=MAX_TOKENS, temperature=0.0, stop=["\n"], chat_stop=["\n"],
                            priority=INTERACTIVE)
        except ModelError as exc:
            log.warning("catch-up summary not written: %s", exc)
            return out
        said = sentences(done.text.strip())
        if not said:
            continue
        check = check_sentence(said[0], {n: f"{m.author_name}: {m.text}" for n, m in enumerate(cited, 1)},
                               known_names=known_names)
        if check.ok:
            out[kind] = said[0]
        else:
            log.info("catch-up summary of %s dropped: %s", kind, check.reason)
    return out
