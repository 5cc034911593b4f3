"""``chorus eval answer --lodo``: choose the reply constants leave-one-dataset-out.

One pass per dataset composes each question's evidence once and builds the reply under
every ordering variant with declines switched off, keeping per question the cite hits,
the answer recall and the evidence strength. The constants are then chosen offline:
the ordering (promotion margin, and the relevance above which a reply shows only on-topic
messages) by mean cite-hit@1 + cite-hit@3 over the tuning datasets, and the decline threshold
as the strictest one that keeps false declines at or under ``FD_CAP`` on every tuning dataset
(most declines on unanswerable questions first, where the tuning data has any). Each of LoCoMo,
SocialMemBench and FriendsQA is held out in turn; the row "all three" is what the shipped defaults use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..datasets import load_dataset
from ..embeddings.base import Embedder
from ..query.answer import Answerer
from ..query.reply import ReplyBuilder
from ..records import Records
from ..search import Searcher
from .answer import answer_recall
from .report import markdown_table
from .stores import conversation_stores

DEV = ("locomo", "socialmem", "friendsqa")
MARGINS = (0.3, 0.15, 0.1, 0.05)
CONFIDENTS = (0.0, 0.3, 0.5, 0.7)  # 0.0: never show a hit that shares nothing with the question
VARIANTS = tuple((m, c) for m in MARGINS for c in CONFIDENTS)
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.34, 0.4, 0.5)
FD_CAP = 0.10


@dataclass
class QuestionFeatures:
    dataset: str
    unanswerable: bool
    has_evidence: bool
    by_margin: dict[tuple, dict] = field(default_factory=dict)  # (margin, confident) -> h1, h3, recall, ...


def collect(dataset: str, data: str | Path | None, embedder: Embedder, *, label: str | None = None,
            limit: int | None = None) -> list[QuestionFeatures]:
    """Per-question features of one dataset under every ordering variant (declines off)."""
    out: list[QuestionFeatures] = []
    conversations = load_dataset(dataset, data)[:limit]
    bar = tqdm(total=sum(len(c.questions) for c in conversations), desc=f"lodo {label or dataset}", unit="q")
    for cs in conversation_stores(conversations, embedder, prefix="chorus-lodo-"):
        answerer = Answerer(cs.store, Searcher(cs.store), Records(cs.store), None)
        for q in cs.conv.questions:
            bar.update(1)
            pack, _, _ = answerer.prepare(cs.scope_ids, q.question, asked_at=cs.asked_at)
            feats = QuestionFeatures(label or dataset, q.adversarial, bool(q.evidence))
            gold = set(q.evidence)
            for margin, confident in VARIANTS:
                answerer.builder = ReplyBuilder(decline_below=-1.0, promote_margin=margin, confident=confident)
                draft = answerer.draft(cs.scope_ids, q.question, pack)
                cited = [x.message.msg_id for x in draft.quoted]
                feats.by_margin[(margin, confident)] = {
                    "h1": bool(gold & set(cited[:1])), "h3": bool(gold & set(cited[:3])),
                    "recall": None if q.adversarial else answer_recall(draft.text(), q.answer or ""),
                    "strength": draft.strength, "kind": draft.kind}
            out.append(feats)
    bar.close()
    return out


def _declines(f: dict, threshold: float) -> bool:
    if f["kind"] in ("no-topic", "unknown-person", "missing"):  # declines no threshold decides
        return True
    return f["kind"] not in ("each", "absent") and f["strength"] < threshold


def _order_score(rows: list[QuestionFeatures], margin: tuple) -> float:
    with_ev = [r for r in rows if r.has_evidence and not r.unanswerable]
    return sum(r.by_margin[margin]["h1"] + r.by_margin[margin]["h3"] for r in with_ev) / max(1, len(with_ev))


def choose(tuning: dict[str, list[QuestionFeatures]]) -> tuple[tuple, float]:
    """((margin, confident), decline threshold) chosen on the tuning datasets."""
    margin = max(VARIANTS, key=lambda m: sum(_order_score(rows, m) for rows in tuning.values()) / len(tuning))
    best: tuple | None = None
    for t in THRESHOLDS:
        fds = [false_decline_rate(rows, margin, t) for rows in tuning.values()]
        if max(fds) > FD_CAP:
            continue
        negatives = [r for rows in tuning.values() for r in rows if r.unanswerable]
        ud = sum(_declines(r.by_margin[margin], t) for r in negatives) / len(negatives) if negatives else 0.0
        key = (round(ud, 3), t)
        if best is None or key > best[0]:
            best = (key, t)
    return margin, (best[1] if best else min(THRESHOLDS))


def false_decline_rate(rows: list[QuestionFeatures], margin: tuple, t: float) -> float:
    answerable = [r for r in rows if not r.unanswerable]
    return sum(_declines(r.by_margin[margin], t) for r in answerable) / max(1, len(answerable))


def scores(rows: list[QuestionFeatures], margin: tuple, t: float) -> dict[str, float | None]:
    """Held-out figures of the chosen constants on one dataset."""
    answerable = [r for r in rows if not r.unanswerable]
    negatives = [r for r in rows if r.unanswerable]
    with_ev = [r for r in answerable if r.has_evidence]
    recalls = [r.by_margin[margin]["recall"] for r in answerable if r.by_margin[margin]["recall"] is not None]
    return {"false_decline": false_decline_rate(rows, margin, t),
            "declined_unanswerable": (sum(_declines(r.by_margin[margin], t) for r in negatives) / len(negatives)
                                      if negatives else None),
            "cite_hit@1": sum(r.by_margin[margin]["h1"] for r in with_ev) / max(1, len(with_ev)),
            "cite_hit@3": sum(r.by_margin[margin]["h3"] for r in with_ev) / max(1, len(with_ev)),
            "answer_recall": sum(recalls) / max(1, len(recalls))}


def lodo_table(features: dict[str, list[QuestionFeatures]], extra: dict[str, list[QuestionFeatures]]
               ) -> tuple[dict, str]:
    """Hold out each dev dataset in turn, then tune on all three and report every set (``extra`` too)."""
    rows, data = [], {}
    folds = [(held, {d: features[d] for d in DEV if d != held}, [held]) for held in DEV]
    folds.append(("all three", {d: features[d] for d in DEV}, [*DEV, *extra]))
    everything = {**features, **extra}
    for held, tuning, targets in folds:
        margin, t = choose(tuning)
        for target in targets:
            s = scores(everything[target], margin, t)
            data[f"{held}->{target}"] = {"margin": margin[0], "confident": margin[1], "decline_below": t, **s}
            rows.append([held, target, f"{margin[0]:g}", f"{margin[1]:g}", f"{t:g}",
                         *(("-" if v is None else f"{100 * v:.1f}") for v in s.values())])
    headers = ["held out", "scored on", "promote margin", "confident at", "decline below", "false declines",
               "declined (unanswerable)", "cite-hit@1", "cite-hit@3", "answer recall"]
    return data, "### Reply constants, leave-one-dataset-out\n\n" + markdown_table(headers, rows)


def run_reply_lodo(embedder: Embedder, *, own: str | Path | None = None) -> tuple[dict, str]:
    features = {d: collect(d, None, embedder) for d in DEV}
    extra = {"own questions": collect("socialmem", own, embedder, label="own questions")} if own else {}
    return lodo_table(features, extra)

