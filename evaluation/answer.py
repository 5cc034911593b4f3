"""``chorus eval answer``: the reply as a user reads it, scored against gold answers and evidence.

Policies run side by side on the same stores: ``evidence`` (the default reply: quoted
messages and a template lead), ``model`` (the model may write a checked lead sentence;
slow, so limited by ``model_questions``) and ``baseline`` (the single top BM25 message).
Per question: answer recall (the share of the gold answer's content words found in the
reply text), cite-hit@1/@3 (a gold evidence message among the first 1 / 3 citations),
whether a generated sentence was shown and passed its check, unchecked citations (a
citation marker not backed by a quoted message of the scope: must be 0), declines, and
latency. LoCoMo category 5 (adversarial) is the unanswerable set; so are questions of
our own sets marked unanswerable.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memory.datasets import load_dataset
from memory.embeddings.base import Embedder
from memory.llm.base import LLM
from memory.query.answer import Answer, Answerer, PersonaVoice
from memory.query.support import content_stems
from memory.records import Records
from memory.search import Searcher
from memory.store import Store
from memory.timefmt import stamp

from .report import markdown_table, mean
from .retrieval import _cat_key
from .stores import conversation_stores

POLICIES = ("evidence", "features", "model", "baseline")  # features: the reply without the encoder (before)
_CITE_LINE = re.compile(r"^\[(\d{1,3})\] (?:[a-z]+(?: [a-z]+)?: )?(.+?) \((\d{4}-\d\d-\d\d \d\d:\d\d)\): “(.*)”$")
_MARK = re.compile(r"\[(\d{1,3})\]")


def answer_recall(reply: str, gold: str) -> float | None:
    """Share of the gold answer's content words (stemmed) that the reply contains; None if it has none."""
    want = content_stems(gold)
    if not want:
        return None
    have = set(content_stems(reply))
    return sum(1 for w in want if w in have) / len(want)


_NOTHING_FROM = re.compile(r"^Nothing from (.+) on this\.$", re.M)


def false_nothing_from(text: str, per_member: dict[str, list[str]] | None, ids_by_name: dict[str, str]) -> int:
    """How many members a reply says nothing came from ("Nothing from X and Y on this.") although the gold
    lists a message of theirs on it (our long sets' ``per_member``)."""
    if not per_member:
        return 0
    bad = 0
    for m in _NOTHING_FROM.finditer(text):
        for name in re.split(r", | and ", m.group(1)):
            pid = ids_by_name.get(name.strip().casefold())
            bad += bool(pid is not None and per_member.get(pid))
    return bad


def unchecked_citations(ans: Answer, store: Store, scope_ids: list[int]) -> int:
    """Citation markers in the reply text not backed by a quoted line of a real message of these scopes.

    Re-derived from the text the user reads, independently of how the reply was built: each quoted
    line must name a stored message of the scopes by author and time and quote its words; each
    ``[n]`` anywhere else must point at such a line.
    """
    bad = 0
    lines = ans.text.splitlines()
    backed: set[int] = set()
    by_n = {q.n: q.message for q in (ans.draft.quoted if ans.draft else [])}
    for line in lines:
        m = _CITE_LINE.match(line.strip())
        if not m:
            continue
        n, author, when, quote = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        msg = by_n.get(n)
        stored = store.messages([msg.id]) if msg else []
        ok = bool(stored) and stored[0].scope_id in scope_ids and stored[0].author_name == author \
            and stamp(stored[0].ts) == when and all(part.strip() in " ".join(stored[0].text.split())
                                                     for part in quote.split("…") if part.strip())
        if ok:
            backed.add(n)
        else:
            bad += 1
    for line in lines:
        if _CITE_LINE.match(line.strip()):
            continue
        bad += sum(1 for n in _MARK.findall(line) if int(n) not in backed)
    return bad


@dataclass
class ReplyReport:
    dataset: str
    policies: list[str]
    rows: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)  # policy -> cat -> metric
    items: list[dict] = field(default_factory=list)
    questions: int = 0
    seconds: float = 0.0

    def add(self, policy: str, category: str, metric: str, value: float | None) -> None:
        if value is None:
            return
        for cat in (category, "overall"):
            self.rows.setdefault(policy, {}).setdefault(cat, {}).setdefault(metric, []).append(float(value))

    def summary(self, policy: str, cat: str = "overall") -> dict[str, float]:
        r = self.rows.get(policy, {}).get(cat, {})
        out = {k: round(mean(v), 4) for k, v in r.items() if k != "latency_ms"}
        lat = sorted(r.get("latency_ms", []))
        if lat:
            out["p95_latency_ms"] = round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1)
            out["n"] = len(lat)
        return out

    def to_json(self) -> dict:
        cats = sorted({c for p in self.rows.values() for c in p if c != "overall"}, key=_cat_key) + ["overall"]
        return {"dataset": self.dataset, "questions": self.questions, "seconds": round(self.seconds, 1),
                "policies": self.policies,
                "results": {p: {c: self.summary(p, c) for c in cats if c in self.rows.get(p, {})}
                            for p in self.policies},
                "items": self.items}

    def to_markdown(self) -> str:
        headers = ["policy", "n", "right", "answer recall", "cite-hit@1", "cite-hit@3", "search recall@3",
                   "declined (unanswerable)",
                   "false declines", "model sentence shown", "unchecked citations", "false 'Nothing from'", "p95 ms"]
        rows = []
        for p in self.policies:
            s = self.summary(p)
            if not s:
                continue
            rows.append([p, s.get("n", 0), _pct(s.get("right")), _pct(s.get("answer_recall")),
                         _pct(s.get("cite_hit@1")), _pct(s.get("cite_hit@3")), _pct(s.get("search_recall@3")),
                         _pct(s.get("declined_unanswerable")),
                         _pct(s.get("false_decline")), _pct(s.get("generated_shown")),
                         f"{sum(self.rows[p]['overall'].get('unchecked', [])):.0f}",
                         f"{sum(self.rows[p]['overall'].get('false_nothing', [])):.0f}", s.get("p95_latency_ms", "-")])
        per_cat = []
        cats = sorted({c for p in self.rows.values() for c in p if c != "overall"}, key=_cat_key)
        for c in cats:
            s = self.summary("evidence", c)
            if s:
                per_cat.append([c, s.get("n", 0), _pct(s.get("right")), _pct(s.get("answer_recall")),
                                _pct(s.get("cite_hit@1")),
                                _pct(s.get("cite_hit@3")), _pct(s.get("declined_unanswerable")),
                                _pct(s.get("false_decline"))])
        return (f"### Replies on {self.dataset} ({self.questions} questions)\n\n" + markdown_table(headers, rows)
                + "\n\nDefault (evidence) reply by category:\n\n"
                + markdown_table(["category", "n", "right", "answer recall", "cite-hit@1", "cite-hit@3",
                                  "declined (unanswerable)", "false declines"], per_cat))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _baseline(searcher: Searcher, scope_ids: list[int], question: str) -> tuple[str, list]:
    hits = searcher.search(scope_ids, question, k=1, mode="bm25")
    if not hits:
        return "", []
    m = hits[0].message
    return f"[1] {m.author_name} ({stamp(m.ts)}): “{' '.join(m.text.split())}”", [m]


def evaluate_replies(dataset: str, *, data: str | Path | None, embedder: Embedder, llm: LLM | None,
                     persona: PersonaVoice | None = None, policies: tuple[str, ...] = ("evidence", "baseline"),
                     limit_conversations: int | None = None, max_questions: int | None = None,
                     model_questions: int = 30, store_dir: str | Path | None = None,
                     decline_below: float | None = None, models: Path | None = None,
                     progress: bool = True) -> ReplyReport:
    """Score every question's reply under each policy (the model one on the first ``model_questions``)."""
    conversations = load_dataset(dataset, data)[:limit_conversations]
    report = ReplyReport(dataset, list(policies))
    started = time.perf_counter()
    todo = sum(min(len(c.questions), max_questions or 10**9) for c in conversations)
    bar = tqdm(total=todo, desc=f"eval answer {dataset}", unit="q", disable=not progress)
    model_left = model_questions
    for cs in conversation_stores(conversations, embedder, store_dir=store_dir):
        store, conv, scope_ids = cs.store, cs.conv, cs.scope_ids
        searcher = Searcher(store)
        answerer = Answerer(store, searcher, Records(store), llm, persona=persona,
                            decline_below=decline_below, models=models)
        # "features": the reply before the encoder judged it (the reranker's order and the feature decline)
        plain = Answerer(store, searcher, Records(store), None, decline_below=decline_below, models=models,
                         encoder=None) if "features" in policies else None
        names = {m.author_name.casefold(): m.author_id for m in conv.messages}
        for q in conv.questions[: max_questions or None]:
            bar.update(1)
            report.questions += 1
            item: dict[str, Any] = {"id": q.id, "conversation": conv.id, "category": q.category, "question": q.question,
                                    "gold": q.answer, "gold_evidence": q.evidence, "unanswerable": q.adversarial}
            search_r3 = None  # hybrid search's recall@3 for this question, the reference for cite-hit@3
            if q.evidence:
                top3 = {h.message.msg_id for h in searcher.search(scope_ids, q.question, k=3)}
                search_r3 = len(top3 & set(q.evidence)) / len(set(q.evidence))
            for policy in policies:
                if policy == "model" and (llm is None or model_left <= 0):
                    continue
                t = time.perf_counter()
                if policy == "baseline":
                    text, cited = _baseline(searcher, scope_ids, q.question)
                    declined, extra = not cited, {}
                else:
                    # policy: a str the caller checked against POLICIES, so one of Answerer's policies here
                    who = plain if policy == "features" and plain is not None else answerer
                    ans = who.answer(scope_ids, q.question, asked_at=cs.asked_at,
                                     policy="evidence" if policy == "features" else policy)  # type: ignore[arg-type]
                    text, cited, declined = ans.text, ans.cited_messages, ans.abstained
                    extra = {"kind": ans.draft.kind if ans.draft else "", "strength":
                             round(ans.draft.strength, 4) if ans.draft else 0.0,
                             "generated": ans.generated, "unchecked": unchecked_citations(ans, store, scope_ids),
                             "false_nothing": false_nothing_from(text, q.extra.get("per_member"), names)}
                    if policy == "model":
                        extra["model_used"] = ans.model_used
                latency = (time.perf_counter() - t) * 1000
                if policy == "model":
                    model_left -= 1
                _score(report, policy, q, text, [m.msg_id for m in cited], declined, latency,
                       {**extra, "search_recall@3": None if policy == "baseline" else search_r3})
                item[policy] = {"reply": text, "cited": [m.msg_id for m in cited], "declined": declined,
                                "latency_ms": round(latency, 1), **extra}
            report.items.append(item)
    bar.close()
    report.seconds = time.perf_counter() - started
    return report


def _score(report: ReplyReport, policy: str, q, text: str, cited: list[str], declined: bool, latency: float,
           extra: dict) -> None:
    cat = q.category
    report.add(policy, cat, "latency_ms", latency)
    report.add(policy, cat, "unchecked", float(extra.get("unchecked", 0)))
    if "false_nothing" in extra:
        report.add(policy, cat, "false_nothing", float(extra["false_nothing"]))
    if q.adversarial:
        report.add(policy, cat, "declined_unanswerable", float(declined))
        report.add(policy, cat, "right", float(declined))
        return
    report.add(policy, cat, "false_decline", float(declined))
    recall = answer_recall(text, q.answer or "")
    report.add(policy, cat, "answer_recall", recall)
    hit3 = True
    if q.evidence:
        gold = set(q.evidence)
        hit3 = bool(gold & set(cited[:3]))
        report.add(policy, cat, "cite_hit@1", float(bool(gold & set(cited[:1]))))
        report.add(policy, cat, "cite_hit@3", float(hit3))
        report.add(policy, cat, "search_recall@3", extra.get("search_recall@3"))
    # Right, as a user would judge it: every gold answer word in the reply, a gold message among
    # the first three shown, and no decline.
    report.add(policy, cat, "right", float(not declined and (recall is None or recall >= 0.999) and hit3))
    if policy == "model" and extra.get("model_used"):
        report.add(policy, cat, "generated_shown", float(bool(extra.get("generated"))))
