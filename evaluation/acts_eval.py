"""Score the analysis pass's act and link models on labelled chats (``chorus eval acts``).

Each chat is read as the bot reads it at ingest: one message at a time, through the public ActModel /
LinkModel protocols, with a History of the last ``RECENT`` analysed turns and the last ``ACTS`` state
acts (memory/analysis/features.py), and never a later message.

Figures, per chat and overall:
- act detection: a detected act is a message filed under a STATE_ACTS kind; gold is a message labelled
  with one. Precision and recall.
- kind accuracy: of the gold state acts detected, the share filed under their gold kind.
- "changes" link accuracy: of the gold changes (turns with a ``changes`` label) that were detected, the
  share whose predicted link is ``changes`` to the gold turn (also given over every gold change).
- beside them: questions, answers and confirms links, owners and topics.

The old group-act classifier (evaluation/baselines/groupacts_v1.py) is scored on the same chats for a
before/after table: its kinds map to ours (norm = rule), a change's target is the earlier act its own rule
(memory/writer/cues.changed_record) picks. It reads each chat whole (it was trained so, and some of its
features look at the turns after a message), which the new models never do.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memory.analysis.features import ACTS, RECENT
from memory.analysis.types import ACT_KINDS, STATE_ACTS, Act, ActModel, Analysis, History, Link, LinkModel, Turn
from memory.ftsquery import stem
from memory.models import GROUP

from .acts_data import Chat, Gold

OLD_KINDS = {"decision": "decision", "plan": "plan", "norm": "rule", "task": "task", "change": "change"}


@dataclass
class Prediction:
    """What a system said about each turn of one chat."""

    kinds: list[str]
    owners: list[str | None] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    links: list[tuple[str, int] | None] = field(default_factory=list)  # (kind, index of the earlier turn)
    state_probs: list[float] = field(default_factory=list)  # the summed probability of the STATE_ACTS kinds
    analyses: list[tuple[Act, Link | None]] = field(default_factory=list)  # the models' own outputs
    seconds: float = 0.0


def analyse(chat: Chat, act_model: ActModel, link_model: LinkModel, batch: int = 1) -> Prediction:
    """Stream ``chat`` through the models ``batch`` messages at a time, as ingest does."""
    done: list[Turn] = []
    acts_seen: list[Turn] = []
    index = {t.message.id: i for i, t in enumerate(chat.turns)}
    pred = Prediction([])
    start = time.perf_counter()
    for b in range(0, len(chat.turns), batch):
        new = chat.turns[b:b + batch]
        history = History(done[-RECENT:], acts_seen[-ACTS:])
        acts = act_model.acts(new, history, chat.people)
        links = link_model.links(new, acts, history)
        for t, a, link in zip(new, acts, links):
            analysed = Turn(t.message, t.vector, t.parsed, Analysis(t.message.id, t.parsed, a, link))
            done.append(analysed)
            if a.is_state:
                acts_seen.append(analysed)
            pred.kinds.append(a.kind)
            pred.owners.append(a.owner)
            pred.topics.append(a.topic)
            pred.state_probs.append(sum(p for k, p in zip(ACT_KINDS, a.probs) if k in STATE_ACTS))
            pred.links.append(None if link is None else (link.kind, index.get(link.target, -1)))
            pred.analyses.append((a, link))
    pred.seconds = time.perf_counter() - start
    return pred


def analyse_old(chat: Chat) -> Prediction:
    """The old group-act classifier's view of ``chat``: its acts, and each change's target by its rule."""
    from evaluation.baselines.groupacts_v1 import classify_group_acts
    from memory.records import Record
    from memory.writer.cues import changed_record

    msgs = [t.message for t in chat.turns]
    start = time.perf_counter()
    found = classify_group_acts(msgs)
    pred = Prediction([])
    heads: list[Record] = []
    for i, (m, g) in enumerate(zip(msgs, found)):
        kind = OLD_KINDS[g.kind] if g is not None else "chatter"
        link = None
        if kind == "change":
            target = changed_record(m, heads)
            link = ("changes", target.id) if target is not None else None
        pred.kinds.append(kind)
        pred.owners.append(GROUP if kind in STATE_ACTS else None)
        pred.topics.append("")
        pred.links.append(link)
        if kind in STATE_ACTS:
            heads.append(Record(i, 1, "group_interaction", "decision", GROUP, m.author_id, m.text, m.ts, m.session,
                                m.turn, 1.0, "active", None, None, i, "old", {}, m.ts))
    pred.seconds = time.perf_counter() - start
    return pred


def _topic_hit(predicted: str, gold: str) -> bool:
    want = {stem(w) for w in gold.replace("-", " ").replace("_", " ").casefold().split()}
    return bool(want & {stem(w) for w in predicted.casefold().split()})


def score(gold: Sequence[Gold], pred: Prediction) -> dict:
    """The counts behind every figure, for one chat (sum them to pool chats)."""
    c: Counter[str] = Counter()
    for i, g in enumerate(gold):
        p = pred.kinds[i]
        gs, ps = g.kind in STATE_ACTS, p in STATE_ACTS
        c["messages"] += 1
        c["gold_acts"] += gs
        c["detected"] += ps
        c["detected_right"] += gs and ps
        if gs and ps:
            c["kind_right"] += p == g.kind
            c["owner_right"] += p == g.kind and pred.owners[i] == g.owner
            c["topic_hits"] += bool(pred.topics) and _topic_hit(pred.topics[i], g.topic)
        c["gold_questions"] += g.kind == "question"
        c["questions"] += p == "question"
        if g.kind == "question" and p == "question":
            c["questions_right"] += 1
            c["question_owner_right"] += pred.owners[i] == g.owner
        link = pred.links[i] if pred.links else None
        for kind in ("changes", "answers", "confirms"):
            target = g.links.get(kind)
            c[f"{kind}_predicted"] += link is not None and link[0] == kind
            if link is not None and link[0] == kind and link[1] in g.links.values():
                c[f"{kind}_predicted_right"] += 1
            if target is None:
                continue
            right = link is not None and link[0] == kind and link[1] == target
            c[f"{kind}_gold"] += 1
            c[f"{kind}_right"] += right
            if kind == "changes" and ps:
                c["changes_detected"] += 1
                c["changes_detected_right"] += right
    return dict(c)


def _div(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def figures(c: dict) -> dict:
    """The rates of one chat's (or pooled) counts."""
    g = c.get
    return {"precision": _div(g("detected_right", 0), g("detected", 0)),
            "changes_precision": _div(g("changes_predicted_right", 0), g("changes_predicted", 0)),
            "recall": _div(g("detected_right", 0), g("gold_acts", 0)),
            "kind_accuracy": _div(g("kind_right", 0), g("detected_right", 0)),
            "changes_accuracy": _div(g("changes_detected_right", 0), g("changes_detected", 0)),
            "changes_accuracy_all": _div(g("changes_right", 0), g("changes_gold", 0)),
            "owner_accuracy": _div(g("owner_right", 0), g("kind_right", 0)),
            "topic_hit": _div(g("topic_hits", 0), g("detected_right", 0)),
            "question_precision": _div(g("questions_right", 0), g("questions", 0)),
            "question_recall": _div(g("questions_right", 0), g("gold_questions", 0)),
            "question_owner_accuracy": _div(g("question_owner_right", 0), g("questions_right", 0)),
            "answers_recall": _div(g("answers_right", 0), g("answers_gold", 0)),
            "answers_precision": _div(g("answers_predicted_right", 0), g("answers_predicted", 0)),
            "confirms_recall": _div(g("confirms_right", 0), g("confirms_gold", 0)),
            "confirms_precision": _div(g("confirms_predicted_right", 0), g("confirms_predicted", 0))}


def pool(counts: Sequence[dict]) -> dict:
    out: Counter[str] = Counter()
    for c in counts:
        out.update(c)
    return dict(out)


def confusion(golds: Sequence[Sequence[Gold]], preds: Sequence[Prediction]) -> dict[str, dict[str, int]]:
    """gold kind -> predicted kind -> messages."""
    out = {k: dict.fromkeys(ACT_KINDS, 0) for k in ACT_KINDS}
    for gold, pred in zip(golds, preds):
        for g, p in zip(gold, pred.kinds):
            out[g.kind][p] += 1
    return out


def evaluate(chats: Sequence[Chat], systems: dict[str, Callable[[Chat], Prediction]]) -> dict:
    """Every system on every chat: per-chat counts and figures, pooled figures, confusion, speed."""
    report: dict = {"chats": [c.id for c in chats], "messages": sum(len(c.turns) for c in chats), "systems": {}}
    for name, run in systems.items():
        preds = [run(c) for c in chats]
        per = {c.id: {**score(c.gold, p), **figures(score(c.gold, p))} for c, p in zip(chats, preds)}
        total = pool([score(c.gold, p) for c, p in zip(chats, preds)])
        seconds = sum(p.seconds for p in preds)
        report["systems"][name] = {"overall": {**total, **figures(total)}, "per_chat": per,
                                   "confusion": confusion([c.gold for c in chats], preds),
                                   "messages_per_second": round(report["messages"] / seconds, 1) if seconds else None}
    return report


def new_system(act_model: ActModel, link_model: LinkModel, batch: int = 1) -> Callable[[Chat], Prediction]:
    return lambda chat: analyse(chat, act_model, link_model, batch)


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def to_markdown(report: dict) -> str:
    from .report import markdown_table

    cols = ("precision", "recall", "kind_accuracy", "changes_accuracy")
    heads = ["act precision", "act recall", "kind right", "changes right"]
    out = [f"{len(report['chats'])} chats, {report['messages']} messages\n"]
    rows = [[name, *[pct(s["overall"][k]) for k in cols], pct(s["overall"]["changes_accuracy_all"]),
             pct(s["overall"]["owner_accuracy"]), pct(s["overall"]["question_precision"]),
             pct(s["overall"]["question_recall"]), pct(s["overall"]["answers_recall"]),
             pct(s["overall"]["confirms_recall"]), s["messages_per_second"]]
            for name, s in report["systems"].items()]
    out.append(markdown_table(["system", *heads, "changes right (all gold)", "owner right", "question P",
                               "question R", "answers R", "confirms R", "msg/s"], rows))
    for name, s in report["systems"].items():
        out.append(f"\n### {name}: per chat\n")
        rows = [[cid, f["gold_acts"] if "gold_acts" in f else 0, f.get("detected", 0),
                 *[pct(f[k]) for k in cols], f.get("changes_detected", 0)]
                for cid, f in s["per_chat"].items()]
        out.append(markdown_table(["chat", "gold acts", "detected", *heads, "gold changes detected"], rows))
        out.append("\nconfusion (rows gold, columns predicted): " + "; ".join(
            f"{g}: " + ", ".join(f"{p} {n}" for p, n in row.items() if n) for g, row in s["confusion"].items()))
    return "\n".join(out)


__all__ = ["Prediction", "analyse", "analyse_old", "evaluate", "figures", "new_system", "pool", "score",
           "to_markdown"]
