"""``chorus bench answer``: the answer path without generation at 10k and 100k messages,
and a few end-to-end answers with the configured model.

The corpus is synthetic (one scope), with synthetic vectors and a handful of
Track 2 records per speaker, so the question analysis, both tracks, composition, the reranker and
the decline all run. The store is read by the analysis pass first (as the bot reads every message when
it arrives), so the reply reads stored entities and runs no NER, as in a live channel.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import shipped_models
from memory.query.answer import Answerer
from memory.records import NewRecord, Records
from memory.search import Searcher
from memory.store import Store

from . import synthetic
from .common import percentiles, save_by_size
from .search import fill_vectors, one_scope


def add_records(store: Store, records: Records, per_person: int = 5) -> int:
    sid = store.scopes()[0].id
    roster = store.roster(sid)
    n = 0
    with store.write() as conn:
        for p in roster:
            msgs = conn.execute("SELECT id, text, ts, session, turn FROM messages WHERE scope_id = ? AND author_id = ? "
                                "LIMIT ?", (sid, p.person_id, per_person)).fetchall()
            for mid, text, ts, session, turn in msgs:
                records.insert(conn, NewRecord(sid, "per_speaker_core", "fact", p.person_id, p.person_id,
                                               text[:200], ts, session, turn, 1.0, [mid], {"bench": True}),
                               run_id=None, model="bench", vector=None)
                n += 1
    return n


def main(args: argparse.Namespace, settings) -> int:
    from bot.app import load_embedder_from, load_llm_from

    embedder = load_embedder_from(settings)
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    questions = [q.replace("what did people say about", "what does everyone think about")
                 for q in synthetic.queries(int(args.queries))]
    report: dict = {"sizes": {}}
    llm = None
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
            store = Store(Path(tmp) / "a.db", embedder=None)
            store.ingest(one_scope(size), embed=False, batch_size=5000)
            store.close()
            store = Store(Path(tmp) / "a.db", embedder=embedder)
            fill_vectors(store, embedder.dim)
            records = Records(store)
            n_records = add_records(store, records)
            with tqdm(total=size, desc=f"analyse {size}", unit="msg", file=sys.stderr) as bar:
                AnalysisPass(store, records, *shipped_models()).run(batch_size=256, progress=bar.update)
            answerer = Answerer(store, Searcher(store), records, None,
                                max_new_tokens=settings.answer.max_new_tokens)
            # The baseline in the same run: the reply without the encoder (the reranker's order, feature decline).
            plain = Answerer(store, Searcher(store), records, None, encoder=None)
            sid = [store.scopes()[0].id]
            answerer.prepare(sid, questions[0])  # warm the vector mirror
            answerer.answer(sid, questions[0], policy="evidence")  # and load the encoder (not on a timed question)
            lat, tokens, replies, baseline = [], [], [], []
            for q in questions:
                t = time.perf_counter()
                _, prompt, _ = answerer.prepare(sid, q)
                lat.append(time.perf_counter() - t)
                tokens.append(len(prompt) / 4)  # estimate (4 characters a token); the model's own count is below
                t = time.perf_counter()
                answerer.answer(sid, q, policy="evidence")  # the default reply, end to end
                replies.append(time.perf_counter() - t)
                t = time.perf_counter()
                plain.answer(sid, q, policy="evidence")
                baseline.append(time.perf_counter() - t)
            row = {"records": n_records, "answer_path_without_generation": percentiles(lat),
                   "evidence_reply": percentiles(replies), "evidence_reply_without_encoder": percentiles(baseline),
                   "prompt_tokens_mean": round(sum(tokens) / len(tokens), 1)}
            if args.generate and size == sizes[0]:
                llm = llm or load_llm_from(settings)
                answerer.llm = llm
                answerer.answer(sid, questions[-1], policy="model")  # warm the model (not on a timed question)
                e2e, model_tokens = [], []
                # Questions whose reply is plain evidence: those are the ones the model may write a lead for.
                plain = [q for q in synthetic.queries(int(args.queries))
                         if not answerer.analyse(sid, q).wants_members] or questions
                for q in plain[: int(args.generate)]:
                    t = time.perf_counter()
                    ans = answerer.answer(sid, q, policy="model")
                    e2e.append(time.perf_counter() - t)
                    model_tokens.append(ans.prompt_tokens)
                    print(f"answered in {e2e[-1]:.1f} s ({ans.prompt_tokens} prompt tokens)", file=sys.stderr)
                row["end_to_end_with_model"] = percentiles(e2e)
                row["prompt_tokens_by_the_model_tokenizer_mean"] = round(sum(model_tokens) / len(model_tokens), 1)
            report["sizes"][str(size)] = row
            store.close()
    path = save_by_size(args.out, "answer", report,
                        ("messages in one scope", "evidence pack p50 / p95", "evidence-first reply p50 / p95",
                         "without the encoder p50 / p95", "prompt tokens (mean)", "model policy end to end p50 / p95"),
                        _table_cells)
    print(f"\nwritten to {path}")
    return 0


def _table_cells(row: dict) -> list[str]:
    """One size's cells after the size: the latencies and the prompt tokens."""
    e2e = row.get("end_to_end_with_model")
    a, r = row["answer_path_without_generation"], row["evidence_reply"]
    b = row.get("evidence_reply_without_encoder") or {"p50_ms": "-", "p95_ms": "-"}
    return [f"{a['p50_ms']} / {a['p95_ms']} ms", f"{r['p50_ms']} / {r['p95_ms']} ms",
            f"{b['p50_ms']} / {b['p95_ms']} ms", f"{row['prompt_tokens_mean']}",
            f"{e2e['p50_ms'] / 1000:.1f} / {e2e['p95_ms'] / 1000:.1f} s" if e2e else "-"]
