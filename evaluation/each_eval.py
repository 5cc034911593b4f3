"""False "Nothing from X": each-member and who-hasn't replies on labelled chats, with and without the reader.

`python -m evaluation.each_eval [CHAT ...]` asks every answerable "each" and "absent" question of the training
chats (evaluation/data/questions/, or only the named chats) through the reply twice, with the shipped encoder
and without it, and counts the members a reply names as silent ("Nothing from X on this.", "X hasn't said
anything about it.") although the labels list an on-topic turn of theirs, beside those it names as silent that
the labels agree with (the default int8 MiniLM embedder, as a fresh install). Chats the shipped encoder trained
on flatter it; docs/reader.md scores the ones it did not.
"""
from __future__ import annotations

import json
import re
import sys

from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
from memory.query.answer import Answerer
from memory.records import Records
from memory.search import Searcher

from .reader_labels import load
from .stores import conversation_stores

_NOTHING = re.compile(r"^Nothing from (.+) on this\.$", re.M)
_ABSENT = re.compile(r"^From what's in this channel, (.+) ha(?:s|ve)n't said anything about it\.", re.M)


def silent_names(text: str) -> set[str]:
    """The members a reply says have not spoken on it, case-folded."""
    names: set[str] = set()
    for m in [*_NOTHING.finditer(text), *_ABSENT.finditer(text)]:
        names |= {x.strip().casefold() for x in re.split(r", | and ", m.group(1))}
    return names


def main(chats: list[str]) -> dict[str, dict[str, int]]:
    convs = [lc for lc in load(["chats"]) if not chats or lc.conv.id in chats]
    by_id = {lc.conv.id: lc for lc in convs}
    out = {name: {"false_silent": 0, "true_silent": 0, "speakers": 0, "questions": 0} for name in ("reader", "without")}
    for cs in conversation_stores([lc.conv for lc in convs], OnnxMiniLMEmbedder()):
        qs = [q for q in by_id[cs.conv.id].questions if q.category in ("each", "absent") and q.answerable]
        author = {m.msg_id: m.author_name for m in cs.conv.messages}
        answerers = {"reader": Answerer(cs.store, Searcher(cs.store), Records(cs.store), None, encoder="shipped"),
                     "without": Answerer(cs.store, Searcher(cs.store), Records(cs.store), None, encoder=None)}
        for name, answerer in answerers.items():
            for q in qs:
                spoke = {author[t].casefold() for t in q.gold if t in author}
                silent = silent_names(answerer.answer(cs.scope_ids, q.question, asked_at=cs.asked_at,
                                                      policy="evidence").text)
                row = out[name]
                row["false_silent"] += len(silent & spoke)
                row["true_silent"] += len(silent - spoke)
                row["speakers"] += len(spoke)
                row["questions"] += 1
        cs.store.close()
        print(cs.conv.id, json.dumps(out), file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))
