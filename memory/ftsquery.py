"""Turn text typed by people into a safe FTS5 query.

User text is always searched as text: quotes, NEAR, *, -, : and brackets are never
interpreted as FTS5 syntax, because every term is emitted as a quoted string.
"""
from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)

# Common function words: matching them costs time and adds nothing to ranking.
STOPWORDS = frozenset("""
a an the and or but if then so of to in on at by for with from as is am are was were be been being do does did
doing have has had having i me my mine we us our ours you your yours he him his she her hers it its they them
their theirs this that these those there here what which who whom whose when where why how not no nor than too
very can could would should will shall may might must just also about into over under again once all any both
each few more most other some such only own same s t don didn doesn isn wasn weren aren won wouldn shouldn
couldn ve ll re d m o y
""".split())


def terms(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """Lower-cased word tokens of ``text`` in order, without duplicates."""
    seen: dict[str, None] = {}
    for w in _WORD.findall(text.casefold()):
        w = w.replace("’", "'")
        for part in w.split("'"):
            if part and (keep_stopwords or part not in STOPWORDS) and part not in seen:
                seen[part] = None
    return list(seen)


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The stem FTS5's porter tokenizer stores for a lower-cased word (nltk's original Porter algorithm).

    Search, grounding and the reply check all compare words this way, so they agree with the index.
    """
    return _porter().stem(word)


@lru_cache(maxsize=1)
def _porter():
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM)


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_any(text: str, *, max_terms: int = 32) -> str | None:
    """An OR query over the content words of ``text`` (None when nothing is searchable)."""
    words = terms(text)[:max_terms]
    if not words:
        words = terms(text, keep_stopwords=True)[:max_terms]
    if not words:
        return None
    return " OR ".join(quote(w) for w in words)


def match_phrase(text: str) -> str | None:
    """An exact-phrase query over every word of ``text`` (stopwords kept)."""
    words = [w.replace("’", "'") for w in _WORD.findall(text.casefold())]
    if not words:
        return None
    return quote(" ".join(words))
