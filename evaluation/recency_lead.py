"""Would a question about what holds now be better led by the newest of the messages the reader ranks nearly
equal? A measurement over a reader graph's readings, not a change to the reply.

    python -m evaluation.recency_lead [GRAPH] [--deltas 1 2 3] [--scope state] [--gap-hours 24] [--present]

The reader reads a question and one candidate with the turn before it; it never sees when a message was sent,
so two messages that state a plan's value, the first version and the change, read alike. The policy measured:
for a question not asking about the past (memory/question.py's "earlier" and "history" patterns), among the
read candidates whose reply score (the reader's logit plus the reranker's at the model's weight) is within
``delta`` of the best and whose P reaches the decline threshold, lead with the latest. Options narrow it:
``--scope state`` moves the lead only from a labelled state act (decision, plan, change, rule, task) to a later
one, by our chats' gold acts; ``--gap-hours`` only to a message at least that long after the one it replaces;
``--present`` only for questions without a past-tense auxiliary ("did", "was", "were", "had"). Scored on the
validation conversations (each source apart), on every labelling round's questions with a premise, on the
staged chats of ``evaluation/data/incoming`` and on LoCoMo's answerable questions, by cite-hit@1 and how
often a decoy leads.
"""
from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STATE_ACTS = {"decision", "plan", "change", "rule", "task"}
PAST = re.compile(r"\b(did|was|were|had)\b", re.I)


@dataclass
class Policy:
    delta: float | None = None         # None: the reply's own order
    states: set[str] | None = None     # move the lead only between these turns (gold state acts)
    gap_hours: float = 0.0             # only to a message at least this long after the one it replaces
    present: bool = False              # only for questions without a past-tense auxiliary


def gold_state_turns() -> set[str]:
    """The turn ids our labelled chats (training and staged) mark as state acts."""
    out: set[str] = set()
    for path in [*Path("evaluation/data/train").glob("*.json"), *Path("evaluation/data/incoming").glob("*.json")]:
        for session in json.loads(path.read_text("utf-8"))["sessions"]:
            out |= {t["turn"] for t in session["turns"] if (t.get("act") or {}).get("kind") in STATE_ACTS}
    return out


def lead(item: dict, weight: float, threshold: float, policy: Policy) -> int:
    """The index of the read candidate the reply would lead with under ``policy``."""
    from memory.question import _EARLIER, _HISTORY

    from .reader_eval import reply_scores

    logits = reply_scores(item["probs"], item["rerank"], weight)
    top = max(range(len(logits)), key=lambda i: (logits[i], -i))  # the first best, as the reply's order
    q = item["question"]
    if policy.delta is None or _EARLIER.search(q) or _HISTORY.search(q) or (policy.present and PAST.search(q)):
        return top
    if policy.states is not None and item["ids"][top] not in policy.states:
        return top
    ts = item["ts"]
    near = [i for i in range(len(logits)) if i == top or (
        logits[i] >= logits[top] - policy.delta and item["probs"][i] >= threshold
        and ts[i] - ts[top] >= policy.gap_hours * 3600
        and (policy.states is None or item["ids"][i] in policy.states))]
    return max(near, key=lambda i: (ts[i], i == top))


def readings(graph: Path) -> list[dict]:
    """The answerable questions of the validation conversations, the rounds, the staged chats and LoCoMo, read
    by ``graph``, each candidate with its message's time."""
    from memory.embeddings.minilm_onnx import OnnxMiniLMEmbedder
    from memory.encoder.model import Encoder, graph_meta

    from .reader_data import cached_rows
    from .reader_eval import score
    from .reader_labels import load, locomo
    from .reader_train import split
    from .round_check import marked

    main_dir, staged = Path("evaluation/data/questions"), Path("evaluation/data/incoming")
    kinds, decoys = marked(main_dir)
    new_kinds, new_decoys = marked(staged / "questions")
    embedder = OnnxMiniLMEmbedder()
    convs, new, held = load(), load(["chats"], chats_dir=staged, questions_dir=staged / "questions"), locomo()
    ts = {m.msg_id: m.ts for lc in [*convs, *new, *held] for m in lc.conv.messages}
    val = set(split(convs)[0])
    sets = [("validation", [q for q in cached_rows(convs, embedder) if q.conversation in val or kinds.get(q.qid)],
             kinds, decoys),
            ("staged", cached_rows(new, embedder), new_kinds, new_decoys),
            ("locomo", cached_rows(held, embedder), {}, {})]
    encoder = Encoder(graph, graph_meta(graph))
    out = []
    for name, rows, k, d in sets:
        for s in score(encoder, [q for q in rows if q.kind == "answerable"]):
            out.append({"set": name, "source": s.q.source, "val": s.q.conversation in val, "question": s.q.question,
                        "premise": k.get(s.q.qid), "decoys": sorted(d.get(s.q.qid, ())), "probs": list(s.probs),
                        "labels": [r.label for r in s.read], "ids": [r.msg_id for r in s.read],
                        "ts": [ts[r.msg_id] for r in s.read], "rerank": [r.rerank for r in s.read]})
    return out


def figures(items: Sequence[dict], weight: float, threshold: float, policy: Policy) -> dict[str, float]:
    found = [it for it in items if 1 in it["labels"]]
    first = [lead(it, weight, threshold, policy) for it in found]
    return {"n": len(found),
            "cite_hit1": sum(it["labels"][i] == 1 for it, i in zip(found, first)) / max(1, len(found)),
            "decoy_first": sum(it["ids"][i] in set(it["decoys"]) for it, i in zip(found, first)) / max(1, len(found))}


def groups(items: Sequence[dict]) -> dict[str, list[dict]]:
    out = {f"validation {src}": [i for i in items if i["val"] and i["source"] == src and not i["premise"]]
           for src in ("chats", "friendsqa", "socialmem")}
    for premise in ("now", "before", "asker"):
        out[f"round {premise}"] = [i for i in items if i["set"] == "validation" and i["premise"] == premise]
        out[f"staged {premise}"] = [i for i in items if i["set"] == "staged" and i["premise"] == premise]
    out["staged, no premise"] = [i for i in items if i["set"] == "staged" and not i["premise"]]
    out["locomo"] = [i for i in items if i["set"] == "locomo"]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from memory.encoder.model import MODELS, VERSION

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph", nargs="?", type=Path, default=MODELS / f"{VERSION}.onnx")
    p.add_argument("--deltas", nargs="+", type=float, default=[1.0, 2.0, 3.0])
    p.add_argument("--scope", choices=("all", "state"), default="all")
    p.add_argument("--gap-hours", type=float, default=0.0)
    p.add_argument("--present", action="store_true")
    args = p.parse_args(argv)
    meta = json.loads(args.graph.with_suffix(".json").read_text())
    weight, threshold = float(meta["rerank_weight"]), float(meta["threshold"])
    states = gold_state_turns() if args.scope == "state" else None
    policies = {"reply": Policy(), **{str(d): Policy(d, states, args.gap_hours, args.present) for d in args.deltas}}
    table = {name: {k: figures(g, weight, threshold, pol) for k, pol in policies.items()}
             for name, g in groups(readings(args.graph)).items()}
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
