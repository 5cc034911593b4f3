"""``chorus eval KIND``: evaluation on real conversation data, one handler per kind.

The evaluators live in ``evaluation``; these read the arguments, load the models the
settings name, and write each report as JSON and Markdown (and a plot where there is one).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from evaluation.plots import write_report_plot
from memory.errors import ChorusError
from memory.store import Store

from .app import load_embedder_from, load_llm_from, persona_of, writer_config
from .config import Settings


def eval_retrieval(args: argparse.Namespace, settings: Settings) -> int:
    """Evidence recall@k of retrieval systems side by side (``--lodo``: tune constants leave-one-dataset-out)."""
    if args.lodo:
        from evaluation.lodo import run_lodo

        return run_lodo(args, lambda: load_embedder_from(settings))
    if not args.dataset:
        raise ChorusError("eval retrieval needs --dataset (or --lodo for all three)")
    from evaluation.report import write_json
    from evaluation.retrieval import FULL_SYSTEMS, TRACK1_SYSTEMS, evaluate_retrieval

    known = {**TRACK1_SYSTEMS, **FULL_SYSTEMS}
    wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise ChorusError(f"unknown systems {unknown}; choose from {', '.join(known)}")
    report = evaluate_retrieval(args.dataset, data=args.data, embedder=load_embedder_from(settings),
                                limit_conversations=args.limit, systems={s: known[s] for s in wanted},
                                store_dir=args.stores)
    md = report.to_markdown()
    out = Path(args.out)
    write_json(out / f"retrieval-{args.dataset}.json", report.to_json())
    (out / f"retrieval-{args.dataset}.md").write_text(md + "\n", "utf-8")
    print(md)
    print(f"\nwritten to {out}/retrieval-{args.dataset}.json and .md ({report.seconds:.0f} s)")
    print(write_report_plot("retrieval", out / f"retrieval-{args.dataset}.png", report.to_json()))
    return 0


def eval_writer(args: argparse.Namespace, settings: Settings) -> int:
    """Write real conversations end to end and measure the writer, or score a store against a reference."""
    from evaluation.writer import evaluate_writer
    from evaluation.writer_reference import score_stores, stores_in

    if args.store:
        if not args.reference or not Path(args.store).exists():
            raise ChorusError("--store needs an existing store (or folder of stores) and --reference")
        ref = score_stores(stores_in(args.store), args.reference, label=args.store)
        return _emit(args, f"writer-reference-{Path(args.store).stem}", ref.to_json(), ref.to_markdown())
    if not args.dataset:
        raise ChorusError("eval writer needs --dataset (or --store with --reference)")
    config = writer_config(settings)
    report = evaluate_writer(args.dataset, data=args.data, embedder=load_embedder_from(settings),
                             llm=load_llm_from(settings),
                             config=config, persona=persona_of(settings),
                             limit_conversations=args.limit, store_dir=args.stores, reference=args.reference)
    return _emit(args, f"writer-{args.dataset}", report.to_json(), report.to_markdown())


def train_acts(args: argparse.Namespace, settings: Settings) -> int:
    """Fit the act and link models on the labelled training chats and write their files (memory/analysis)."""
    from evaluation.acts_data import Inputs, load_chats
    from evaluation.acts_train import Options, fit, read, report_markdown, train

    chats = load_chats(args.data, Inputs(load_embedder_from(settings)))
    print(f"{len(chats)} chats, {sum(len(c.turns) for c in chats)} messages", flush=True)
    if args.no_validation:
        act_model, link_model = fit([read(c) for c in chats], Options())
        report = None
    else:
        act_model, link_model, report = train(chats, Options(), progress=lambda cid, f: print(
            f"held out {cid}: act precision {f['precision']}, recall {f['recall']}", flush=True))
    out = Path(args.models)
    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("acts-v2.json", act_model), ("links-v2.json", link_model)):
        model["trained_on"] = [c.id for c in chats]
        (out / name).write_text(json.dumps(model, separators=(",", ":")) + "\n", "utf-8")
        print(f"model written to {out / name}")
    return 0 if report is None else _emit(args, "acts", report, report_markdown(report))


def eval_acts(args: argparse.Namespace, settings: Settings) -> int:
    """Score the act and link models (and the old group-act classifier) on labelled chats."""
    from evaluation.acts_data import Inputs, load_chats
    from evaluation.acts_eval import analyse_old, evaluate, new_system, to_markdown
    from memory.analysis.acts import MODEL_PATH as ACTS_PATH
    from memory.analysis.acts import load_act_model
    from memory.analysis.links import MODEL_PATH as LINKS_PATH
    from memory.analysis.links import load_link_model

    if not Path(args.data).exists():
        raise ChorusError(f"{args.data} does not exist")
    chats = load_chats(args.data, Inputs(load_embedder_from(settings)))
    act_model, link_model = load_act_model(args.acts or ACTS_PATH), load_link_model(args.links or LINKS_PATH)
    systems = {f"{act_model.version} + {link_model.version}": new_system(act_model, link_model)}
    from memory.analysis.shipped import with_heads

    # the encoder's heads over these linear models, when the (shipped or named) encoder has them
    heads = with_heads(act_model, link_model, Path(args.encoder) if args.encoder else None)
    if heads is not None:
        systems[f"{heads[0].version} + {heads[1].version}"] = new_system(*heads)
    if not args.no_old:
        systems["old group-act classifier"] = analyse_old
    report = evaluate(chats, systems)
    name = "acts-" + "".join(ch if ch.isalnum() else "-" for ch in Path(args.data).stem)
    return _emit(args, name, report, to_markdown(report))


def eval_answer(args: argparse.Namespace, settings: Settings) -> int:
    """Replies as users read them, under each policy, against gold answers and evidence."""
    from evaluation.answer import POLICIES, evaluate_replies
    from memory.query.answer import PersonaVoice

    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ChorusError(f"unknown policy {unknown}: choose from {', '.join(POLICIES)}")
    p = settings.persona
    llm = load_llm_from(settings) if "model" in policies and args.model_questions > 0 else None
    decline = settings.answer.decline_below
    report = evaluate_replies(args.dataset, data=args.data, embedder=load_embedder_from(settings), llm=llm,
                              persona=PersonaVoice(p.name, p.description, p.voice, p.cares_about),
                              policies=policies, limit_conversations=args.limit, max_questions=args.questions,
                              model_questions=args.model_questions, store_dir=args.stores,
                              decline_below=None if decline == "trained" else float(decline),
                              models=Path(args.models) if args.models else None)
    name = f"answer-{args.dataset}" + (f"-{Path(args.data).stem}" if args.data else "")
    return _emit(args, name, report.to_json(), report.to_markdown(), plot="answer")


def train_reranker(args: argparse.Namespace, settings: Settings) -> int:
    """Fit the reply's reranker and decline leave-one-dataset-out; write the held-out and the shipped models."""
    from evaluation import rerank_train as rt
    from evaluation.rerank_data import collect

    own = Path(__file__).resolve().parent.parent / "tests" / "data" / "chats"
    if not own.exists():
        raise ChorusError(f"our own question set {own} is missing (it is part of the repository)")
    emb = load_embedder_from(settings)
    sets = [("socialmem", None, "socialmem"), ("friendsqa", None, "friendsqa"), ("socialmem", str(own), "own")]
    if not args.no_locomo:
        sets.append(("locomo", None, "locomo"))
    examples = {label: collect(ds, data, emb, limit=args.limit, cache_dir=args.out, label=label)
                for ds, data, label in sets}
    results = rt.lodo(examples)
    out = Path(args.out)
    for held in results:  # the held-out models, for `chorus eval answer --models out/train/lodo-DATASET`
        train = [e for ds in rt.LICENSED if ds != held and ds in examples for e in examples[ds]]
        booster, decline, threshold = rt.train_models(train)
        rt.write_models(booster, decline, threshold, out / f"lodo-{held}", trained_on=results[held]["trained_on"])
    shipped = [e for ds in rt.LICENSED for e in examples[ds]]
    booster, decline, threshold = rt.train_models(shipped)
    written = rt.write_models(booster, decline, threshold, Path(args.models) if args.models else rt.MODEL_DIR)
    md = ("### Reply reranker and decline, held out one dataset at a time\n\n" + rt.lodo_table(results)
          + f"\n\nShipped models (trained on {', '.join(rt.LICENSED)}; threshold {threshold:.4f}): "
          + ", ".join(str(p) for p in written) + "\n\nFeature importance (gain %): "
          + ", ".join(f"{n} {g}" for n, g in rt.importance(booster)[:15]) + "\n")
    args.out = str(out)
    return _emit(args, "train-reranker", {"lodo": results, "threshold": threshold,
                                          "importance": rt.importance(booster)}, md)


def train_answer(args: argparse.Namespace, settings: Settings) -> int:
    """Fine-tune the reader (the encoder's answers and span heads): the leave-one-dataset-out runs, the shipped
    run, their held-out reports, and the shipped int8 graph with its metadata (memory/models/encoder-v2.*)."""
    try:
        import torch  # noqa: F401  (the train extra)
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ChorusError(f"training needs the `train` extra ({exc}); install it with pip install -e '.[train]'") \
            from None
    from evaluation.reader_train import RUNS, SHIPPED, evaluate_run, recipe, run, ship

    out = Path(args.out)
    emb = load_embedder_from(settings)
    names = list(RUNS) if not args.run else [args.run]  # in order: a run comes after the one it starts from
    for name in names:
        if not args.evaluate_only:
            run(name, out, emb, recipe(name, out, args.epochs), log=lambda m: print(m, flush=True))
        evaluate_run(name, out, emb, log=lambda m: print(m, flush=True))
    if SHIPPED in names:
        for path in ship(out, Path(args.models)):
            print(f"written {path}")
        from evaluation.about_choice import main as choose_about

        chosen = choose_about(["--models", str(args.models), "--write"])
        print(f"about_p {chosen['about_p']} (each member / who hasn't, {chosen['questions']} held-apart questions)")
    return 0


def train_heads(args: argparse.Namespace, settings: Settings) -> int:
    """Train the encoder's act and link heads on the reader's frozen first layers, choose their constants on
    held-apart chats, and rebuild the shipped encoder with them (after `chorus train answer`)."""
    try:
        import torch  # noqa: F401  (the train extra)
    except ImportError as exc:
        raise ChorusError(f"training needs the `train` extra ({exc}); install it with pip install -e '.[train]'") \
            from None
    from evaluation import heads_run
    from evaluation.heads_train import HeadOptions
    from memory.encoder.build import export

    reader = Path(args.reader)
    if not (reader / "best.safetensors").exists():
        raise ChorusError(f"{reader} holds no trained reader; run `chorus train answer` first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    emb = load_embedder_from(settings)
    if not args.evaluate_only:
        heads_run.run(out, reader / "best.safetensors", emb, HeadOptions(epochs=args.epochs),
                      log=lambda m: print(m, flush=True))
    graph = export(reader / "best.safetensors", out / "encoder.onnx", heads=out / "heads.safetensors")
    chosen = heads_run.choose(out, graph, emb, log=lambda m: print(m, flush=True))
    (out / "chosen.json").write_text(json.dumps(chosen, indent=1))
    for path in heads_run.ship(reader, out, Path(args.models), chosen):
        print(f"written {path}")
    return 0


def eval_catchup(args: argparse.Namespace, settings: Settings) -> int:
    """Catch-up digests on our blind set and SocialMemBench, with both baselines (``--lodo``: choose constants)."""
    from evaluation.catchup import evaluate_catchup, to_markdown
    from memory.catchup.digest import CatchupConfig
    from memory.datasets.base import default_path

    own = args.own if args.own and Path(args.own).exists() else None
    smb = args.data or str(default_path("socialmem"))
    if not Path(smb).exists():
        smb = None
    if own is None and smb is None:
        raise ChorusError("eval catchup found neither --own nor --data (SocialMemBench); pass one")
    models = None
    if args.encoder:
        from memory.analysis.shipped import linear_models, with_heads

        models = with_heads(*linear_models(), Path(args.encoder))
        if models is None:
            raise ChorusError(f"{args.encoder} holds no encoder with analysis heads")
    report = evaluate_catchup(own, smb, embedder=load_embedder_from(settings),
                              config=CatchupConfig(max_lines=settings.catchup.max_lines), lodo=args.lodo,
                              models=models)
    return _emit(args, "catchup", report, to_markdown(report))


def eval_speaker_levenshtein(args: argparse.Namespace, settings: Settings) -> int:
    """Compare the records of two stores (writer A vs B) by SpeakerLevenshtein."""
    from evaluation.speaker_levenshtein import MemRecord, speaker_levenshtein

    def load(path: str) -> list[MemRecord]:
        store = Store(path)
        try:
            with store.read() as conn:
                rows = conn.execute("SELECT r.owner, r.content, r.layer, r.utype, r.source, r.session, r.ts "
                                    "FROM records r WHERE r.status = 'active' AND r.superseded_by IS NULL "
                                    "AND r.layer != 'persona_insight'").fetchall()
                names = dict(conn.execute("SELECT person_id, display_name FROM people").fetchall())
        finally:
            store.close()
        return [MemRecord(names.get(r[0], r[0]), r[1], r[2], r[3], names.get(r[4], r[4]), r[5], r[6])
                for r in rows]

    for path in (args.pred, args.ref):
        if not Path(path).exists():
            raise ChorusError(f"store {path} does not exist")
    res = speaker_levenshtein(load(args.pred), load(args.ref))
    print(f"SpeakerLevenshtein = {res.score:.4f} (pred {res.n_pred} records, ref {res.n_ref}, "
          f"matched {res.n_matched}; worst owner: {res.worst_owner})")
    for owner, score in sorted(res.per_owner.items(), key=lambda kv: kv[1]):
        print(f"  {owner}: {score:.4f}")
    return 0


def _emit(args: argparse.Namespace, name: str, data: dict, md: str, plot: str | None = None) -> int:
    from evaluation.report import write_json

    out = Path(args.out)
    write_json(out / f"{name}.json", data)
    (out / f"{name}.md").write_text(md + "\n", "utf-8")
    print(md)
    print(f"\nwritten to {out}/{name}.json and .md")
    if plot:
        print(write_report_plot(plot, out / f"{name}.png", data))
    return 0
