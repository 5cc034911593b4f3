"""Would a question about what holds now be better led by the newest of the messages the reader ranks nearly
equal? A measurement over a reader graph's readings, not a change to the reply.

    python -m evaluation.recency_lead [GRAPH] [--deltas 0.5 1 2 3]

The reader reads a question and one candidate with the turn before it; it never sees when a message was sent,
so two messages that state a plan's value, the first version and the change, read alike. The policy measured:
for a question not asking about the past (memory/question.py's "earlier" and "history" patterns), among the
read candidates whose reply score (the reader's logit plus the reranker's at the model's weight) is within
``delta`` of the best and whose P reaches the decline threshold, lead with the latest in the conversation.
Scored on the validation conversations (each source apart), on every labelling round's questions with a
premise, and on the staged chats of ``evaluation/data/incoming``, by cite-hit@1 and how often a decoy leads.
With ``--scope state`` the policy moves the lead only from a labelled state act (decision, plan, change, rule,
task) to a later one, by the chats' gold acts: what it would do if it trusted the analysis pass's acts fully.
"""
from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# where a turn sits: _s<session>_t<turn> on our chats and SocialMemBench, _c<scene>_u<utterance> on FriendsQA
ORDER = re.compile(r"_[sc](\d+)_[tu](\d+)$")
STATE_ACTS = {"decision", "plan", "change", "rule", "task"}


def position(msg_id: str) -> tuple[int, int] | None:
    m = ORDER.search(msg_id)
    return (int(m.group(1)), int(m.group(2))) if m else None


def gold_state_turns() -> set[str]:
    """The turn ids our labelled chats (training and staged) mark as state acts."""
    out: set[str] = set()
    for path in [*Path("evaluation/data/train").glob("*.json"), *Path("evaluation/data/incoming").glob("*.json")]:
        for session in json.loads(path.read_text("utf-8"))["sessions"]:
            out |= {t["turn"] for t in session["turns"] if (t.get("act") or {}).get("kind") in STATE_ACTS}
    return out


def lead(item: dict, weight: float, threshold: float, delta: float | None, states: set[str] | None = None) -> int:
    """The index of the read candidate the reply would lead with under the policy (``delta`` None: the reply's
    order; ``states``: move only from a state act to a later state act)."""
    from memory.question import _EARLIER, _HISTORY

    logits = [float(np.log(min(max(p, 1e-6), 1 - 1e-6) / (1 - min(max(p, 1e-6), 1 - 1e-6)))) + weight * r
              for p, r in zip(item["probs"], item["rerank"])]
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    if delta is None or _EARLIER.search(item["question"]) or _HISTORY.search(item["question"]):
        return order[0]
    places = [position(m) for m in item["ids"]]
    near = [i for i in order if logits[i] >= logits[order[0]] - delta and item["probs"][i] >= threshold]
    if states is not None:
        if item["ids"][order[0]] not in states:
            return order[0]
        near = [i for i in near if item["ids"][i] in states]
    if not near or any(places[i] is None for i in near):
        return order[0]
    return max(near, key=lambda i: places[i])  # type: ignore[arg-type, return-value]


def readings(graph: Path) -> list[dict]:
    """Every question of the validation conversations, the rounds and the staged chats, read by ``graph``."""
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import Encoder

    from .reader_data import cached_rows
    from .reader_eval import score
    from .reader_labels import load
    from .reader_train import split
    from .round_check import marked

    main_dir, staged = Path("evaluation/data/questions"), Path("evaluation/data/incoming")
    kinds, decoys = marked(main_dir)
    new_kinds, new_decoys = marked(staged / "questions")
    convs = load()
    val = set(split(convs)[0])
    sets = [("validation", [q for q in cached_rows(convs, OnnxMiniLMEmbedder()) if q.conversation in val
                            or kinds.get(q.qid)], kinds, decoys),
            ("staged", cached_rows(load(["chats"], chats_dir=staged, questions_dir=staged / "questions"),
                                   OnnxMiniLMEmbedder()), new_kinds, new_decoys)]
    encoder = Encoder(graph, {"version": graph.stem})
    out = []
    for name, rows, k, d in sets:
        rows = [q for q in rows if q.kind == "answerable"]
        for s in score(encoder, rows):
            out.append({"set": name, "source": s.q.source, "val": s.q.conversation in val, "question": s.q.question,
                        "premise": k.get(s.q.qid), "decoys": sorted(d.get(s.q.qid, ())), "probs": list(s.probs),
                        "labels": [r.label for r in s.read], "ids": [r.msg_id for r in s.read],
                        "rerank": [r.rerank for r in s.read]})
    return out


def figures(items: Sequence[dict], weight: float, threshold: float, delta: float | None,
            states: set[str] | None = None) -> dict[str, float]:
    found = [it for it in items if 1 in it["labels"]]
    first = [lead(it, weight, threshold, delta, states) for it in found]
    return {"n": len(found),
            "cite_hit1": sum(it["labels"][i] == 1 for it, i in zip(found, first)) / max(1, len(found)),
            "decoy_first": sum(it["ids"][i] in set(it["decoys"]) for it, i in zip(found, first)) / max(1, len(found))}


def main(argv: Sequence[str] | None = None) -> None:
    from memory.encoder.model import MODELS, VERSION

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph", nargs="?", type=Path, default=MODELS / f"{VERSION}.onnx")
    p.add_argument("--deltas", nargs="+", type=float, default=[0.5, 1.0, 2.0, 3.0])
    p.add_argument("--scope", choices=("all", "state"), default="all")
    args = p.parse_args(argv)
    states = gold_state_turns() if args.scope == "state" else None
    meta = json.loads(args.graph.with_suffix(".json").read_text())
    weight, threshold = float(meta["rerank_weight"]), float(meta["threshold"])
    items = readings(args.graph)
    groups = {f"validation {src}": [i for i in items if i["val"] and i["source"] == src and not i["premise"]]
              for src in ("chats", "friendsqa", "socialmem")}
    for premise in ("now", "before", "asker"):
        groups[f"round {premise}"] = [i for i in items if i["set"] == "validation" and i["premise"] == premise]
        groups[f"staged {premise}"] = [i for i in items if i["set"] == "staged" and i["premise"] == premise]
    groups["staged, no premise"] = [i for i in items if i["set"] == "staged" and not i["premise"]]
    table = {name: {str(d): figures(g, weight, threshold, d, states) for d in [None, *args.deltas]}
             for name, g in groups.items()}
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
