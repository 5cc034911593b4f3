"""A question as the clause a decline can name: "how much did dinner cost?" -> "how much dinner cost".

A reply that declines should say what the chat does not hold ("The chat doesn't say how much dinner
cost."), not only that something is missing. English embeds a question by undoing its subject-auxiliary
inversion: the auxiliary moves after the subject ("when is the quiz" -> "when the quiz is"), do-support
goes and its tense moves onto the verb ("did dinner cost" -> "dinner cost", "does the shop open" -> "the
shop opens"), and a yes/no question becomes a "whether" clause. The asker's "I/my" become "you/your".

Works on spaCy's tags and noun chunks; the auxiliaries are a closed class of English, listed here.
lemminflect (a library) inflects the verb. Anything that does not read as a plain question gives None,
and the caller falls back to a decline that names nothing.
"""
from __future__ import annotations

import re
from typing import Any

_AUX = {
    "is": "be", "s": "be", "are": "be", "was": "be", "were": "be", "'s": "be", "'re": "be", "am": "be", "'m": "be",
    "do": "do", "does": "do", "did": "do",
    "has": "have", "have": "have", "had": "have", "'ve": "have",
    "can": "modal", "could": "modal", "will": "modal", "would": "modal", "should": "modal", "shall": "modal",
    "may": "modal", "might": "modal", "must": "modal", "'ll": "modal", "'d": "modal",
}
_SPELL = {"nt": "n't", "s": "is", "'s": "is", "'re": "are", "'m": "am", "'ve": "have", "'ll": "will", "'d": "would"}
_PERSON = {"i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "am": "are", "'m": "are"}
_NEG = {"n't", "not", "never", "nt"}
_WH_TAGS = {"WDT", "WP", "WP$", "WRB"}
_FILLERS = {"so", "and", "ok", "okay", "hey", "um", "uh", "but", "then", "also", "oh", "well", "wait", ","}
_DO_TENSE = {"did": "VBD", "does": "VBZ"}
# A clitic the tokenizer split off and that stays as written goes back onto its word: "they 'd" -> "they'd".
_CLITIC = re.compile(r" ((?:n['’]t|['’](?:s|d|ll|re|ve|m)))(?=\W|$)", re.I)


def indirect(doc: Any) -> str | None:
    """The embedded form of a one-clause question, or None when it is not one."""
    toks = [t for t in doc if not (t.is_punct and t.text in "?!.") and not t.text.startswith("@")]
    while toks and toks[0].lower_ in _FILLERS:
        toks = toks[1:]
    if len(toks) < 2:
        return None
    first = toks[0]
    if first.tag_ in _WH_TAGS:
        words = _wh(doc, toks)
    elif first.lower_ in _AUX:
        rest = _inverted(doc, toks, 0, yes_no=True)
        words = None if rest is None else ["whether", *rest]
    else:
        return None
    if not words:
        return None
    if words[0][:1].isupper() and toks[0].tag_ != "NNP" and words[0] != "I":
        words[0] = words[0][0].lower() + words[0][1:]
    out = " ".join(_PERSON.get(w.lower(), w) if w.lower() in _PERSON else w for w in words)
    return _rejoin(doc, _CLITIC.sub(r"\1", out).replace(" ,", ",")).strip() or None


def _rejoin(doc: Any, out: str) -> str:
    """Words the question wrote without spaces between them ("sara-v", "kenji|work", "wi-fi") written so again:
    the clause above is built from tokens joined by spaces."""
    run: list[str] = []
    for t in doc:
        run.append(t.text)
        if t.whitespace_ or t.i == len(doc) - 1:
            if len(run) > 1 and (spaced := " ".join(run)) in out:
                out = out.replace(spaced, "".join(run))
            run = []
    return out


def _wh(doc: Any, toks: list) -> list[str] | None:
    """wh-phrase + clause: the auxiliary after the wh-phrase moves after the subject."""
    k = 1
    while k < len(toks) and toks[k].lower_ not in _AUX and not toks[k].tag_.startswith("VB") \
            and toks[k].tag_ not in _WH_TAGS:
        k += 1
    if k >= len(toks):
        return None
    phrase = [t.text for t in toks[:k]]
    if toks[k].lower_ not in _AUX:  # "who brought the cake": the wh-word is the subject, no inversion
        return phrase + [t.text for t in toks[k:]]
    after = toks[k + 1:]
    if not after or after[0].tag_ in ("VBG", "VBN") or after[0].lower_ in _NEG and len(after) > 1 and \
            after[1].tag_ in ("VBG", "VBN", "VB"):
        # "who is bringing the cake", "who hasn't paid": the wh-word is the subject
        return phrase + [_spell(toks[k])] + [_spell(t) for t in after]
    if _AUX[toks[k].lower_] == "have" and not any(t.tag_ == "VBN" for t in after):
        return phrase + [t.text for t in toks[k:]]  # "who has the key": have is the verb, the wh-word its subject
    rest = _inverted(doc, toks, k)
    return None if rest is None else phrase + rest


def _inverted(doc: Any, toks: list, k: int, yes_no: bool = False) -> list[str] | None:
    """The words from the auxiliary ``toks[k]`` on, in statement order: subject, auxiliary, the rest."""
    aux = toks[k]
    kind = _AUX[aux.lower_]
    rest = toks[k + 1:]
    neg = []
    if rest and rest[0].lower_ in _NEG:
        neg, rest = [rest[0]], rest[1:]
    if not rest:
        return None
    verb = next((i for i, t in enumerate(rest) if t.tag_ in ("VB", "VBG", "VBN", "VBD", "VBP", "VBZ")
                 and t.lower_ not in _AUX), None)
    if kind == "be" and (verb is None or rest[verb].tag_ not in ("VBG", "VBN")):
        verb = None  # a copula: the subject is the noun phrase after it
    if verb is None and kind == "do" and len(rest) >= 2:
        # The tagger often reads a bare verb as a noun ("how much did dinner cost"): the verb is the word
        # after the subject, or the last word when the parse swallows it into the subject.
        end = _subject_end(doc, rest)
        verb = end if end < len(rest) else len(rest) - 1
    if verb is not None:
        if verb == 0:
            return None
        subject, tail = rest[:verb], rest[verb:]
    else:
        end = _subject_end(doc, rest)
        subject, tail = rest[:end], rest[end:]
    if not subject or yes_no and kind == "be" and verb is None and not tail:
        return None  # "is X Y?" with nothing left after the subject: not a parse to trust
    words = [t.text for t in subject]
    if kind == "do" and not neg:
        if verb is None:
            return None
        main = tail[0]
        if not main.tag_.startswith(("VB", "NN", "JJ")):
            return None  # what was taken for the verb cannot be one
        tag = _DO_TENSE.get(aux.lower_)
        if tag == "VBZ" and not _third_singular(subject):
            tag = None
        return words + [_inflect(main, tag)] + [t.text for t in tail[1:]]
    return words + [_spell(aux)] + [_spell(t) for t in neg] + [t.text for t in tail]


def _subject_end(doc: Any, rest: list) -> int:
    """Where the subject that starts ``rest`` ends: the parse's subject subtree, else spaCy's noun chunk,
    else one word."""
    start = rest[0].i
    for t in rest:
        if t.dep_ in ("nsubj", "nsubjpass", "expl") and t.left_edge.i == start:
            return max(1, min(len(rest), t.right_edge.i + 1 - start))
    for chunk in doc.noun_chunks:
        if chunk.start <= start < chunk.end:
            return max(1, min(len(rest), chunk.end - start))
    return 1


def _third_singular(subject: list) -> bool:
    head = subject[-1]
    return head.lower_ not in ("i", "you", "we", "they") and head.tag_ not in ("NNS", "NNPS")


def _spell(tok: Any) -> str:
    return _SPELL.get(tok.lower_, tok.text)


def _inflect(tok: Any, tag: str | None) -> str:
    if tag is None:
        return tok.text
    from lemminflect import getInflection, getLemma

    lemmas = getLemma(tok.lower_, upos="VERB")
    lemma = lemmas[0] if lemmas else tok.lower_
    if not lemma.isalpha():
        return tok.text
    forms = getInflection(lemma, tag=tag)
    return forms[0] if forms else tok.text
