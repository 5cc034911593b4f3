"""``chorus eval answer``: answer quality without a judge, plus an optional judge model.

Token-F1 two ways: the set-based definition of SpeakerMem-R1 (App. C: lowercase,
strip, drop trailing periods, whitespace tokens as sets) and LoCoMo's official F1
(normalised, Porter-stemmed tokens, multiset overlap; multi-hop answers split on
commas). Abstention accuracy on LoCoMo category 5, answer latency and prompt tokens
per question, all per category.
"""
from __future__ import annotations

import re
import string
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..datasets import load_dataset
from ..embeddings.base import Embedder
from ..llm.base import LLM
from ..query.answer import ABSTAIN, Answerer, PersonaVoice
from ..records import Records
from ..search import Searcher
from ..store import Store
from .report import markdown_table, mean
from .retrieval import _cat_key, safe_name

_ABSTAINED = re.compile(r"no information|not mentioned|don'?t (know|have)|do not know|cannot (tell|answer)|"
                        r"not (in|answer)|unknown|nothing in this channel", re.I)
SPEAKERMEM_QA_TOKENS = 3300  # SpeakerMem-R1 App. D Table 9: ~3.3k QA input tokens per question


def set_token_f1(prediction: str, gold: str) -> float:
    """SpeakerMem-R1 App. C: token sets after light normalisation."""
    def toks(s: str) -> set[str]:
        s = " ".join(s.lower().strip().split()).rstrip(".")
        return set(s.split())
    a, g = toks(prediction), toks(gold)
    inter = len(a & g)
    if not a or not g or not inter:
        return 0.0
    p, r = inter / len(a), inter / len(g)
    return 2 * p * r / (p + r)


def _normalize(s: str) -> str:
    s = s.replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the|and)\b", " ", s)
    return " ".join(s.split())


def _stem_tokens(s: str) -> list[str]:
    from nltk.stem import PorterStemmer

    stemmer = PorterStemmer()
    return [stemmer.stem(w) for w in _normalize(s).split()]


def locomo_f1_single(prediction: str, gold: str) -> float:
    p, g = _stem_tokens(prediction), _stem_tokens(gold)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: str, gold: str, category: str) -> float:
    """LoCoMo's scoring: multi-hop (category 1) golds are comma lists scored part by part."""
    if category == "1":
        golds = [g.strip() for g in gold.split(",") if g.strip()]
        preds = [p.strip() for p in prediction.split(",") if p.strip()] or [prediction]
        return mean([max(locomo_f1_single(p, g) for p in preds) for g in golds]) if golds else 0.0
    return locomo_f1_single(prediction, gold)


def abstained(text: str) -> bool:
    return text.strip() == ABSTAIN or bool(_ABSTAINED.search(text))


@dataclass
class AnswerReport:
    dataset: str
    rows: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    questions: int = 0
    seconds: float = 0.0
    judge: bool = False

    def add(self, category: str, metric: str, value: float) -> None:
        for cat in (category, "overall"):
            self.rows.setdefault(cat, {}).setdefault(metric, []).append(value)

    def metric(self, cat: str, name: str) -> float | None:
        vals = self.rows.get(cat, {}).get(name)
        return mean(vals) if vals else None

    def to_json(self) -> dict:
        cats = sorted((c for c in self.rows if c != "overall"), key=_cat_key) + ["overall"]
        return {"dataset": self.dataset, "questions": self.questions, "seconds": round(self.seconds, 1),
                "reference_qa_tokens_per_question_speakermem": SPEAKERMEM_QA_TOKENS,
                "results": {c: {k: round(mean(v), 4) for k, v in self.rows[c].items()} | {
                    "n": len(self.rows[c].get("latency_ms", []))} for c in cats},
                "samples": self.samples[:50]}

    def to_markdown(self) -> str:
        cats = sorted((c for c in self.rows if c != "overall"), key=_cat_key) + ["overall"]
        headers = ["category", "n", "token-F1 (set)", "LoCoMo F1", "abstention acc.", "p95 latency ms",
                   "prompt tokens"] + (["judge acc."] if self.judge else [])
        out = []
        for c in cats:
            r = self.rows[c]
            lat = sorted(r.get("latency_ms", [0]))
            p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
            abst = self.metric(c, "abstain_correct")
            row = [c, len(r.get("latency_ms", [])), 100 * (self.metric(c, "set_f1") or 0),
                   100 * (self.metric(c, "locomo_f1") or 0), "-" if abst is None else f"{100 * abst:.1f}",
                   f"{p95:.0f}", f"{self.metric(c, 'prompt_tokens') or 0:.0f}"]
            if self.judge:
                j = self.metric(c, "judge")
                row.append("-" if j is None else f"{100 * j:.1f}")
            out.append(row)
        return (f"### Answers on {self.dataset} ({self.questions} questions; SpeakerMem-R1 reports about "
                f"{SPEAKERMEM_QA_TOKENS} QA input tokens per question)\n\n" + markdown_table(headers, out))


def judge_answer(judge: LLM, question: str, gold: str, answer: str) -> bool:
    prompt = ("Decide whether the answer given to a question about a conversation means the same as the "
              "reference answer. Paraphrases count as correct.\n"
              f"Question: {question}\nReference answer: {gold}\nGiven answer: {answer}\n"
              "Reply with one word, Correct or Incorrect.\nVerdict:")
    out = judge.complete(prompt, max_tokens=4, temperature=0.0, stop=["\n"], priority="background")
    return out.text.strip().lower().startswith("correct")


def evaluate_answers(dataset: str, *, data: str | Path | None, embedder: Embedder, llm: LLM | None,
                     persona: PersonaVoice | None = None, limit_conversations: int | None = None,
                     max_questions: int | None = None, store_dir: str | Path | None = None,
                     judge: LLM | None = None, progress: bool = True) -> AnswerReport:
    conversations = load_dataset(dataset, data)[:limit_conversations]
    report = AnswerReport(dataset, judge=judge is not None)
    started = time.perf_counter()
    todo = sum(min(len(c.questions), max_questions or 10**9) for c in conversations)
    bar = tqdm(total=todo, desc=f"eval answer {dataset}", unit="q", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="chorus-eval-") as tmp:
        folder = Path(store_dir) if store_dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for conv in conversations:
            store = Store(folder / f"{safe_name(conv.id)}.db", embedder=embedder, idle_gap_s=3600)
            try:
                store.ingest(conv.messages)
                searcher = Searcher(store)
                answerer = Answerer(store, searcher, Records(store), llm, persona=persona)
                scope_ids = [s.id for s in store.scopes()]
                asked_at = max(m.ts for m in conv.messages) + 3600
                for q in conv.questions[: max_questions or None]:
                    bar.update(1)
                    t = time.perf_counter()
                    ans = answerer.answer(scope_ids, q.question, asked_at=asked_at)
                    latency = (time.perf_counter() - t) * 1000
                    gold = q.answer or ""
                    report.questions += 1
                    if q.adversarial:
                        report.add(q.category, "abstain_correct", float(ans.abstained or abstained(ans.text)))
                    else:
                        report.add(q.category, "set_f1", set_token_f1(ans.text, gold))
                        report.add(q.category, "locomo_f1", locomo_f1(ans.text, gold, q.category))
                        report.add(q.category, "false_abstain", float(ans.abstained))
                    report.add(q.category, "latency_ms", latency)
                    report.add(q.category, "prepare_ms", ans.timings_ms.get("prepare_total", 0.0))
                    report.add(q.category, "prompt_tokens", float(ans.prompt_tokens or len(ans.prompt) / 4))
                    if judge is not None and gold:
                        report.add(q.category, "judge", float(judge_answer(judge, q.question, gold, ans.text)))
                    if len(report.samples) < 50:
                        report.samples.append({"q": q.question, "gold": gold, "answer": ans.text,
                                               "category": q.category, "abstained": ans.abstained})
            finally:
                store.close()
    bar.close()
    report.seconds = time.perf_counter() - started
    return report
