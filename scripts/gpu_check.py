"""Writer + answer speed of one llama.cpp build, for scripts/gpu_check.sh (run once per build).

Writes the demo conversation's writer windows and a few answers with the given
``n_gpu_layers`` and prints one JSON line: generation tokens/s of the writer, of
the answers, and of raw llama.cpp on the writer's first prompt (same run). Which
llama-cpp-python build it uses is whatever ``import llama_cpp`` finds: the shell
script puts the CUDA build first on PYTHONPATH for the GPU run.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTIONS = ["Where is the end-of-season dinner?", "Who can't eat spicy food?", "What did the team decide?",
             "Who voted for the Thai place?", "When is the dinner?"]


def measure(model_path: str | None, n_gpu_layers: int, windows: int) -> dict:
    import llama_cpp

    from memory.datasets.jsonl import read_jsonl
    from memory.llm.factory import load_llm
    from memory.query.answer import Answerer
    from memory.records import Records
    from memory.records_sync import attach
    from memory.search import Searcher
    from memory.store import Store
    from memory.writer.prompt import build_prompt
    from memory.writer.writer import Writer, WriterConfig

    llm = load_llm("llama", model_path, n_ctx=4096, n_gpu_layers=n_gpu_layers)
    t = time.perf_counter()
    llm.load()
    load_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory(prefix="chorus-gpu-") as tmp:
        store = Store(Path(tmp) / "g.db")
        store.ingest(read_jsonl(ROOT / "bot" / "demo" / "demo.jsonl"))
        records = Records(store)
        attach(store, records)
        writer = Writer(store, llm, config=WriterConfig(window_messages=5, extractive=model_path is None),
                        records=records)
        first = writer.pending(force=True)[0]
        prompt = build_prompt([p.display_name for p in store.roster(first.scope_id)], [], {}, first.messages)
        llm.complete("warm up", max_tokens=4)
        results = writer.run_pending(force=True, max_windows=windows)
        sid = store.scopes()[0].id
        answerer = Answerer(store, Searcher(store), records, llm, policy="model")
        answers = [answerer.answer([sid], q) for q in QUESTIONS]
        store.close()
    raw = llm.raw_generate_speed(prompt, 128)
    w_tok = sum(r.completion.completion_tokens for r in results if r.completion)
    w_gen = sum(r.completion.gen_seconds for r in results if r.completion)
    a_ms = [a.timings_ms.get("generate", 0.0) for a in answers]
    return {"llama_cpp": llama_cpp.__version__, "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
            "n_gpu_layers": n_gpu_layers, "model": llm.name, "load_s": round(load_s, 2),
            "writer_windows": len(results), "writer_tokens": w_tok,
            "writer_tokens_per_s": round(w_tok / w_gen, 1) if w_gen else 0.0,
            "answer_generate_ms_mean": round(sum(a_ms) / len(a_ms), 1) if a_ms else 0.0,
            "raw_tokens_per_s": round(raw.tokens_per_second, 1),
            "raw_prompt_tokens_per_s": round(raw.prompt_tokens / raw.prompt_seconds, 1) if raw.prompt_seconds else 0.0}


def table(rows: list[dict]) -> str:
    head = ("| build | n_gpu_layers | writer tok/s | raw llama.cpp tok/s | prompt tok/s | answer generate (mean) "
            "| load |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        build = "CUDA" if r["gpu_offload"] else "CPU"
        lines.append(f"| {build} | {r['n_gpu_layers']} | {r['writer_tokens_per_s']} | {r['raw_tokens_per_s']} | "
                     f"{r['raw_prompt_tokens_per_s']} | {r['answer_generate_ms_mean']} ms | {r['load_s']} s |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=None, help="GGUF file (default: the shipped Gemma 3 270M)")
    p.add_argument("--n-gpu-layers", type=int, default=0)
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--table", nargs="*", help="print the table for these JSON result files instead of measuring")
    args = p.parse_args()
    if args.table is not None:
        print(table([json.loads(Path(f).read_text()) for f in args.table]))
        return 0
    print(json.dumps(measure(args.model, args.n_gpu_layers, args.windows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
