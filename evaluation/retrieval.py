"""Evidence recall@k of Track 1 retrieval on LoCoMo, SocialMemBench and FriendsQA.

Each conversation goes into a fresh store through the normal ingest path; every
question with gold evidence is searched by each system, and recall@k is the share
of its gold evidence messages among the first k retrieved. Systems run side by
side in one pass so they see identical data.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from memory.datasets import Conversation, load_dataset
from memory.embeddings.base import Embedder
from memory.search import Mode, Searcher
from memory.store import Store

from .report import markdown_table, mean
from .stores import conversation_stores

KS = (5, 10, 20)

@dataclass
class EvalContext:
    """What a system may use to answer one conversation's questions."""

    store: Store
    searcher: Searcher
    scope_ids: list[int]
    asked_at: float
    answerer: object | None = None


# A system maps (context, question text, k) to retrieved msg_ids, best first.
System = Callable[[EvalContext, str, int], list[str]]


def track1(mode: Mode) -> System:
    def run(ctx: EvalContext, question: str, k: int) -> list[str]:
        return [h.message.msg_id for h in ctx.searcher.search(ctx.scope_ids, question, k=k, mode=mode,
                                                              asked_at=ctx.asked_at)]
    return run


def full_system(**ablations: bool) -> System:
    """The whole query pipeline's evidence (Track 2 provenance + Track 1) under the same item budget."""
    flags = {"track1": True, "track2": True, "person_rows": True, "group_rows": True, **ablations}

    def run(ctx: EvalContext, question: str, k: int) -> list[str]:
        from memory.query.answer import Answerer

        answerer = ctx.answerer
        assert isinstance(answerer, Answerer)
        pack, _, _ = answerer.prepare(ctx.scope_ids, question, asked_at=ctx.asked_at,
                                      use_track1=flags["track1"], use_track2=flags["track2"],
                                      person_rows=flags["person_rows"], group_rows=flags["group_rows"])
        return pack.message_ids(k, **flags)
    return run


TRACK1_SYSTEMS: dict[str, System] = {"bm25": track1("bm25"), "dense": track1("dense"), "hybrid": track1("hybrid")}
FULL_SYSTEMS: dict[str, System] = {
    "full": full_system(), "no_track2": full_system(track2=False), "no_track1": full_system(track1=False),
    "no_group": full_system(group_rows=False), "no_person": full_system(person_rows=False)}


@dataclass
class RetrievalReport:
    dataset: str
    systems: list[str]
    ks: tuple[int, ...]
    questions: int = 0
    conversations: int = 0
    skipped_no_evidence: int = 0
    # scores[system][category][k] -> list of per-question recalls
    scores: dict[str, dict[str, dict[int, list[float]]]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, system: str, category: str, k: int, value: float) -> None:
        cats = self.scores.setdefault(system, {})
        for cat in (category, "overall"):
            cats.setdefault(cat, {}).setdefault(k, []).append(value)

    def recall(self, system: str, category: str, k: int) -> float:
        return 100.0 * mean(self.scores.get(system, {}).get(category, {}).get(k, []))

    def categories(self) -> list[str]:
        first = next(iter(self.scores.values()), {})
        return sorted((c for c in first if c != "overall"), key=_cat_key) + ["overall"]

    def count(self, category: str) -> int:
        first = next(iter(self.scores.values()), {})
        return len(first.get(category, {}).get(self.ks[0], []))

    def to_json(self) -> dict:
        return {
            "dataset": self.dataset, "conversations": self.conversations, "questions": self.questions,
            "skipped_no_evidence": self.skipped_no_evidence, "seconds": round(self.seconds, 1),
            "metric": "evidence recall@k (percent of gold evidence messages in the top k, mean over questions)",
            "results": {s: {c: {f"recall@{k}": round(self.recall(s, c, k), 2) for k in self.ks} | {"n": self.count(c)}
                            for c in self.categories()} for s in self.systems},
        }

    def to_markdown(self) -> str:
        headers = ["category", "n"] + [f"{s} @{k}" for k in self.ks for s in self.systems]
        rows = []
        for cat in self.categories():
            rows.append([cat, self.count(cat)] + [self.recall(s, cat, k) for k in self.ks for s in self.systems])
        title = (f"### Evidence recall@k on {self.dataset} ({self.conversations} conversations, "
                 f"{self.questions} questions)\n\n")
        return title + markdown_table(headers, rows)


def _answerer(store: Store, searcher: Searcher, k: int):
    from memory.query.answer import Answerer
    from memory.query.compose import Budgets
    from memory.records import Records

    return Answerer(store, searcher, Records(store), None, budgets=Budgets(top_k=k))


def _cat_key(cat: str) -> tuple:
    digits = "".join(ch for ch in cat if ch.isdigit())
    return (0, int(digits), cat) if digits else (1, 0, cat)


def recall_at(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float:
    wanted = set(gold)
    if not wanted:
        raise ValueError("recall is undefined without gold evidence")
    return len(wanted & set(retrieved[:k])) / len(wanted)


def evaluate_retrieval(dataset: str, *, data: str | Path | None = None, embedder: Embedder | None,
                       systems: dict[str, System] | None = None, ks: tuple[int, ...] = KS,
                       limit_conversations: int | None = None, progress: bool = True,
                       prepare: Callable[[Store, Conversation], object] | None = None,
                       store_dir: str | Path | None = None) -> RetrievalReport:
    """Score each system on every question with gold evidence, one store per conversation.

    ``store_dir`` reuses (or keeps) the per-conversation stores, e.g. ones the writer
    evaluation filled with Track 2 records; otherwise fresh temporary stores are used.
    """
    systems = systems or dict(TRACK1_SYSTEMS)
    if embedder is None:
        systems = {n: s for n, s in systems.items() if n == "bm25"}
    conversations = load_dataset(dataset, data)[:limit_conversations]
    report = RetrievalReport(dataset, list(systems), ks)
    started = time.perf_counter()
    total_q = sum(len(c.questions) for c in conversations)
    bar = tqdm(total=total_q, desc=f"eval retrieval {dataset}", unit="q", disable=not progress)
    for cs in conversation_stores(conversations, embedder, store_dir=store_dir):
        store, conv = cs.store, cs.conv
        if prepare is not None:
            prepare(store, conv)
        searcher = Searcher(store)
        ctx = EvalContext(store, searcher, cs.scope_ids, cs.asked_at,
                          _answerer(store, searcher, max(ks)) if any(n in FULL_SYSTEMS for n in systems) else None)
        report.conversations += 1
        for q in conv.questions:
            bar.update(1)
            if not q.evidence:
                report.skipped_no_evidence += 1
                continue
            report.questions += 1
            for name, system in systems.items():
                retrieved = system(ctx, q.question, max(ks))
                for k in ks:
                    report.add(name, q.category, k, recall_at(retrieved, q.evidence, k))
    bar.close()
    report.seconds = time.perf_counter() - started
    return report
