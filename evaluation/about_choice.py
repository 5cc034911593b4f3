"""Choose an encoder's `about_p`: the P at which a discussion message counts as speaking to the question.

Each-member and who-hasn't replies say "Nothing from X" for a member none of whose read messages reaches
`about_p`. The decline threshold cannot serve: it asks whether the best of ten candidates answers, and each
trained model spreads its probabilities differently (encoder-v1's decline threshold is 0.003, encoder-v2's
0.025). So the value is chosen per model, on labelled chats it never trained on.

`python -m evaluation.about_choice [--models DIR] [CHAT ...]` asks every answerable "each" and "absent"
question of those chats (by default the shipped run's validation chats) through the evidence reply, records
every read message's P, and counts at each candidate value the members it would wrongly call silent (a
labelled on-topic turn of theirs exists) and wrongly count as speaking (none exists). The value with the
fewest of both is chosen; docs/reader.md has the figures. Members added by a stored answers/confirms link are
not modelled (they only ever remove a "Nothing from").
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
from memory.encoder.model import MODELS, VERSION, Encoder
from memory.query import answer as answer_module
from memory.query.answer import Answerer
from memory.records import Records
from memory.search import Searcher

from .reader_labels import load
from .stores import conversation_stores

GRID = (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9)


def gather(encoder: Encoder, chats: Sequence[str]) -> list[tuple[set[str], set[str], dict[str, float]]]:
    """Per question: (members, members with a labelled on-topic turn, each member's best read P)."""
    convs = [lc for lc in load(["chats"]) if lc.conv.id in chats]
    by_id = {lc.conv.id: lc for lc in convs}
    seen: list[dict[int, float]] = []
    original = answer_module.about

    def recording(enc, q, msgs, weights, sims, floor=None):
        everything = original(enc, q, msgs, weights, sims, floor=0.0)
        seen.append(everything)
        return {i: p for i, p in everything.items() if p >= enc.about_p}

    rows = []
    answer_module.about = recording
    try:
        for cs in conversation_stores([lc.conv for lc in convs], OnnxMiniLMEmbedder()):
            author = {m.msg_id: m.author_name.casefold() for m in cs.conv.messages}
            members = set(author.values())
            answerer = Answerer(cs.store, Searcher(cs.store), Records(cs.store), None, encoder=encoder)
            for q in by_id[cs.conv.id].questions:
                if q.category not in ("each", "absent") or not q.answerable:
                    continue
                seen.clear()
                answerer.answer(cs.scope_ids, q.question, asked_at=cs.asked_at, policy="evidence")
                read = {k: v for d in seen for k, v in d.items()}
                best: dict[str, float] = {}
                for m in cs.store.messages(sorted(read)):
                    name = m.author_name.casefold()
                    best[name] = max(best.get(name, 0.0), read[m.id])
                rows.append((members, {author[t] for t in q.gold if t in author}, best))
            print(cs.conv.id, len(rows), file=sys.stderr, flush=True)
    finally:
        answer_module.about = original
    return rows


def errors(rows: Sequence[tuple[set[str], set[str], dict[str, float]]], p: float) -> dict[str, int]:
    """Members wrongly called silent and wrongly counted as speaking, were `about_p` ``p``."""
    false_silent = false_spoke = 0
    for members, spoke, best in rows:
        said = {m for m in members if best.get(m, 0.0) >= p}
        false_silent += len(spoke - said)
        false_spoke += len(said - spoke)
    return {"false_silent": false_silent, "false_spoke": false_spoke}


def choose(rows: Sequence[tuple[set[str], set[str], dict[str, float]]]) -> tuple[float, dict[str, dict[str, int]]]:
    table = {str(p): errors(rows, p) for p in GRID}
    chosen = min(GRID, key=lambda p: (sum(table[str(p)].values()), -p))
    return chosen, table


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=str(MODELS))
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("--write", action="store_true", help="store the chosen value in the model's metadata")
    ap.add_argument("chats", nargs="*")
    args = ap.parse_args(argv)
    folder = Path(args.models)
    meta_path = folder / f"{args.version}.json"
    meta = json.loads(meta_path.read_text())
    chats = args.chats or list(meta["trained_on"]["validation"])
    rows = gather(Encoder(folder / f"{args.version}.onnx", meta), chats)
    chosen, table = choose(rows)
    result = {"about_p": chosen, "questions": len(rows), "chats": chats, "errors": table}
    if args.write:
        meta["about_p"] = chosen
        meta["about_choice"] = result
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
