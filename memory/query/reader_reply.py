"""Put the adaptive reader's answer into an evidence-first reply, only if the reply's own check passes.

The reader (``reader.py``) returns a sentence and the messages it cites. The reply
shows quoted messages and, under the ``model`` policy, one lead sentence that
``support.check_sentence`` has verified against the messages it cites. This module
is the one seam between them: it runs the reader, applies that same check to the
reader's sentence against the reader's cited messages, and only then replaces the
draft's quotes and lead. Anything else (no answer, no citation, a failed check, a
model error) leaves the draft untouched, so the caller's usual path runs.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ChorusError
from .reply import Quoted, ReplyDraft, quote_of
from .support import SupportResult, check_sentence

if TYPE_CHECKING:
    from ..question import Question
    from .reader import Reader, ReaderResult

log = logging.getLogger(__name__)


def adopt(result: ReaderResult, draft: ReplyDraft, stems: Sequence[str]) -> SupportResult:
    """Replace ``draft``'s quotes and lead with the reader's answer if it passes the support check."""
    if not result.answered:
        return SupportResult(False, reason=f"the reader gave no answer ({result.stopped})")
    if not result.cited:
        return SupportResult(False, reason="the reader's answer cites no message a tool returned")
    sentence, texts, names = result.for_support_check()
    check = check_sentence(sentence, texts, known_names=names)
    if check.ok:
        draft.quoted = [Quoted(n, m, quote_of(m.text, stems)) for n, m in enumerate(result.cited, 1)]
        draft.lead = sentence
        draft.notes.append(f"reader: {result.rounds} rounds, tools "
                           f"{[c.tool for c in result.tool_log if c.tool != 'answer']}")
    return check


def read_into(reader: Reader, draft: ReplyDraft, scope_ids: Sequence[int], question: Question,
              *, exclude: frozenset[int] = frozenset()) -> tuple[ReaderResult, SupportResult]:
    """Run the reader for ``question`` and adopt its answer into ``draft`` when it checks out."""
    result = reader.read(list(scope_ids), question, exclude=exclude)
    check = adopt(result, draft, question.stems)
    log.info("reader: %s after %d rounds, %d+%d tokens, %.1fs; support check %s%s", result.stopped,
             result.rounds, result.prompt_tokens, result.completion_tokens, result.seconds,
             "passed" if check.ok else "failed: ", "" if check.ok else check.reason)
    if not check.ok:
        draft.notes.append(f"reader answer not shown ({check.reason})")
    return result, check


def reader_answer(reader: Reader, ans: Any, scope_ids: Sequence[int], question: Question, *,
                  exclude: frozenset[int] = frozenset()) -> bool:
    """The ``Answerer`` hook: True when the reader's checked answer now is ``ans`` (an ``answer.Answer``).

    False leaves ``ans`` as it was (apart from notes and timings), and the caller
    goes on with its one-shot sentence.
    """
    draft = ans.draft
    if draft is None:
        return False
    try:
        result, check = read_into(reader, draft, scope_ids, question, exclude=exclude)
    except ChorusError as err:  # a store or model failure inside a tool: the reply goes on without the reader
        log.warning("reader failed: %s", err, exc_info=True)
        ans.notes.append(f"reader failed: {err}")
        return False
    ans.timings_ms["reader"] = result.seconds * 1000
    ans.notes += [n for n in draft.notes if n.startswith("reader") and n not in ans.notes]
    if not check.ok:
        return False
    ans.text = draft.text()
    ans.cited = [q.n for q in draft.quoted]
    ans.generated = draft.lead
    ans.model_used = True
    ans.support = check
    ans.prompt_tokens = result.prompt_tokens
    return True
