"""Whole replies on labelled reader questions: which message the reply leads with, by the kind of reply it gave.

`python -m evaluation.reply_eval [--chats A B ...] [--staged DIR] [--state scoped|all|off] [--encoder GRAPH]
[--write FILE]` asks every answerable and near-miss question of the named chats (default: the reader's validation
chats, which no shipped reader trained on) through the reply as the bot gives it, and scores what a member reads:

- answerable: the first cited message is a labelled answer (its turn or an ``also`` turn; cite-hit@1), one is
  among the first three (cite-hit@3), or the reply declined (a false decline);
- near miss: the reply declined.

Every figure is broken down by the reply's kind (``state``: the plan's chain read at the end asked for;
``evidence``: the reader's order; ``each``, ``change``, ...) and by the question's labelling-round premise
(``now``, ``before``, ...), because the state reply takes over from the reader's order whenever a top candidate
rests on a chain. ``--state all`` gives the same questions with the state reply taking every chain-backed answer
(as it did before `Question.reads_chain`), ``--state off`` with it turned off (the reader's order stands), so they
can be compared question by question. The reader's figures on rows
(`evaluation.reader_compare`) never see the state reply; this does.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
from memory.encoder.model import MODELS, VERSION, Encoder, graph_meta
from memory.query.answer import Answerer
from memory.records import Records
from memory.search import Searcher

from .reader_labels import QUESTIONS_DIR, LabelledConversation, load
from .round_check import marked
from .stores import conversation_stores


def validation_chats(meta: dict) -> set[str] | None:
    """The conversations a reader held apart for validation, as its metadata says (None where it does not)."""
    held = meta.get("trained_on", {}).get("validation")
    return set(held) if held is not None else None


STATE = ("scoped", "all", "off")


@contextmanager
def state_reply(how: str) -> Iterator[None]:
    """The state reply as the code has it (``scoped``: only questions `Question.reads_chain` lets through), for
    every chain-backed answer (``all``: as before it was scoped), or turned off (``off``: the reader's order)."""
    from memory import question
    from memory.query import state_reply as module

    draft, reads = module.StateReader.draft, question.Question.reads_chain
    if how == "off":
        module.StateReader.draft = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    elif how == "all":
        question.Question.reads_chain = property(lambda self: True)  # type: ignore[assignment, method-assign]
    try:
        yield
    finally:
        module.StateReader.draft = draft  # type: ignore[method-assign]
        question.Question.reads_chain = reads  # type: ignore[method-assign]


def ask(convs: list[LabelledConversation], premise: dict[str, str], state: str,
        reader: Encoder | Literal["shipped"] = "shipped") -> list[dict]:
    """One record per question: its reply's kind, what it cited first, whether it declined, and its labels.
    ``reader``: the encoder the replies read with (default the shipped one)."""
    by_id = {lc.conv.id: lc for lc in convs}
    out: list[dict] = []
    with state_reply(state):
        for cs in conversation_stores([lc.conv for lc in convs], OnnxMiniLMEmbedder()):
            answerer = Answerer(cs.store, Searcher(cs.store), Records(cs.store), None, encoder=reader)
            for q in by_id[cs.conv.id].questions:
                if q.kind not in ("answerable", "near_miss") or q.each:
                    continue
                ans = answerer.answer(cs.scope_ids, q.question, asked_at=cs.asked_at, policy="evidence")
                out.append({"id": q.id, "conversation": cs.conv.id, "kind": q.kind, "category": q.category,
                            "premise": premise.get(q.id, ""), "reply": ans.draft.kind if ans.draft else "",
                            "declined": ans.abstained, "cited": [m.msg_id for m in ans.cited_messages][:3],
                            "gold": sorted(q.gold)})
            print(cs.conv.id, len(out), file=sys.stderr, flush=True)
    return out


def figures(records: list[dict]) -> dict[str, dict[str, float]]:
    """cite-hit@1, cite-hit@3 and false declines of the answerable, declines of the near misses: overall, by
    reply kind and by premise."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        for key in ("all", f"reply:{r['reply']}", f"premise:{r['premise']}" if r["premise"] else ""):
            if key:
                groups[key].append(r)
    out: dict[str, dict[str, float]] = {}
    for key, rs in sorted(groups.items()):
        answerable = [r for r in rs if r["kind"] == "answerable"]
        near = [r for r in rs if r["kind"] == "near_miss"]
        row: dict[str, float] = {"answerable": len(answerable), "near_misses": len(near)}
        if answerable:
            row["cite_hit@1"] = round(100 * sum(bool(r["cited"][:1]) and r["cited"][0] in r["gold"]
                                                for r in answerable) / len(answerable), 1)
            row["cite_hit@3"] = round(100 * sum(bool(set(r["cited"]) & set(r["gold"])) for r in answerable)
                                      / len(answerable), 1)
            row["false_declines"] = round(100 * sum(r["declined"] for r in answerable) / len(answerable), 1)
        if near:
            row["near_misses_declined"] = round(100 * sum(r["declined"] for r in near) / len(near), 1)
        out[key] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", nargs="*", help="chats to ask (default: the reader's validation chats)")
    parser.add_argument("--staged", type=Path, help="read the chats from this folder (with questions/) instead")
    parser.add_argument("--state", choices=STATE, default="scoped", help="the state reply as the code has it, "
                        "for every chain-backed answer, or off")
    parser.add_argument("--encoder", type=Path, help="read with this encoder graph instead of the shipped one: a "
                        "shipped-style <version>.onnx with its .json beside it, as `chorus train answer "
                        "--evaluate-only --models DIR` writes it, so its threshold is the one it would ship with")
    parser.add_argument("--write", type=Path, help="write the records and figures here as JSON")
    args = parser.parse_args(argv)
    if args.staged is not None:
        convs = load(["chats"], chats_dir=args.staged, questions_dir=args.staged / "questions")
        premise, _ = marked(args.staged / "questions")
    else:
        convs = load(["chats"])
        premise, _ = marked(QUESTIONS_DIR)
    graph = args.encoder or MODELS / f"{VERSION}.onnx"
    meta = graph_meta(graph)
    reader: Encoder | Literal["shipped"] = Encoder(graph, meta) if args.encoder else "shipped"
    if args.staged is None or args.chats:
        wanted = set(args.chats) if args.chats else validation_chats(meta)
        if wanted is None:
            parser.error(f"{graph} names no validation chats (no shipped-style metadata beside it); pass --chats")
        convs = [lc for lc in convs if lc.conv.id in wanted]
    if not convs:
        parser.error("no labelled chats to ask")
    records = ask(convs, premise, state=args.state, reader=reader)
    result = {"state_reply": args.state, "encoder": str(args.encoder or "shipped"),
              "chats": [lc.conv.id for lc in convs], "figures": figures(records),
              "records": records}
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    print(json.dumps(result["figures"], indent=1))
    return result


if __name__ == "__main__":
    main()
