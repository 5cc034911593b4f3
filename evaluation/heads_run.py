"""`chorus train heads` (the act and link heads on the reader's encoder): rows, split, training, report.

Validation is leave-chats-out: the chats evaluation/reader_train.is_validation holds apart (one in ten by
name, the same rule the reader uses) are read for early stopping and the blend weight and thresholds of
memory/analysis/encoded.py; the long blind set is never read here (`chorus eval acts` scores it).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from memory.encoder.model import VERSION

from .heads_data import ActRow, LinkRow, build, smb_chats
from .heads_train import HeadOptions, sample_links, train
from .reader_train import is_validation

RECALL_FLOOR = 0.75  # the state-act recall the act constants must keep (issue 33's target); precision above it
FLOORS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3)  # the link cascade's read floors tried (memory/analysis/encoded.py)
CHANGE_POOLS = (3, 5, 10)  # how many earlier state acts a change's link may read (encoded.py's change_pool)
CHANGE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the head's share of a change target's score
FLOOR_LOSS = 0.01  # the most a read floor may cost answers / confirms F1 or "changes" right on validation
KEEP_OTHER = 0.15  # share of messages without a gold link whose rows are kept (about 30,000 rows in all)


def rows(embedder, cache: Path) -> dict[str, tuple[list[ActRow], list[LinkRow]]]:
    """Every labelled chat's act and link rows (cached: reading 19,000 messages through the models takes minutes)."""
    if cache.exists():
        with cache.open("rb") as fh:
            return pickle.load(fh)
    from memory.analysis.acts import load_act_model
    from memory.analysis.links import load_link_model

    from .acts_data import Inputs, load_chats

    inputs = Inputs(embedder)
    chats = load_chats("evaluation/data/train", inputs) + smb_chats(inputs)
    acts, links = load_act_model(), load_link_model()
    out = {c.id: build([c], acts, links) for c in chats}
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("wb") as fh:
        pickle.dump(out, fh)
    return out


def run(out: Path, reader: Path, embedder, opts: HeadOptions | None = None, log=print) -> dict:
    by_chat = rows(embedder, out / "rows.pkl")
    val = sorted(c for c in by_chat if is_validation(c))
    tr_a = [r for c, (a, _) in by_chat.items() if c not in val for r in a]
    tr_l = sample_links([r for c, (_, b) in by_chat.items() if c not in val for r in b], KEEP_OTHER)
    va_a = [r for c in val for r in by_chat[c][0]]
    va_l = [r for c in val for r in by_chat[c][1]]
    (out / "split.json").write_text(json.dumps({"validation": val, "act_rows": len(tr_a), "link_rows": len(tr_l)}))
    log(f"heads: {len(by_chat)} chats, validation {', '.join(val)}")
    return train(out, reader, tr_a, tr_l, va_a, va_l, opts, log=log)


def choose(out: Path, graph: Path, embedder, log=print) -> dict:
    """The constants of memory/analysis/encoded.py, chosen on the held-apart chats read as ingest reads them:
    the encoder's share of the averaged act P and the state threshold (best precision plus "changes" right
    among those keeping `RECALL_FLOOR` recall),
    then the answers/confirms thresholds (best F1 of each link kind)."""
    from memory.analysis.acts import load_act_model
    from memory.analysis.encoded import EncoderActModel, EncoderLinkModel
    from memory.analysis.links import load_link_model
    from memory.encoder.model import Encoder

    from .acts_data import Inputs, load_chat
    from .acts_eval import analyse, figures, pool, score

    enc = Encoder(graph, {"version": "heads"})
    _memo(enc)
    val = json.loads((out / "split.json").read_text())["validation"]
    inputs = Inputs(embedder)
    chats = [load_chat(Path("evaluation/data/train") / f"{c}.json", inputs) for c in val
             if (Path("evaluation/data/train") / f"{c}.json").exists()]
    acts, links = load_act_model(), load_link_model()
    loose = {"answers": 0.5, "confirms": 0.5}
    grid: list[dict[str, Any]] = []
    for w in (0.1, 0.25, 0.5, 0.75, 1.0):
        for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            am, lm = EncoderActModel(acts, enc, weight=w, threshold=t), EncoderLinkModel(links, enc, thresholds=loose)
            f = figures(pool([score(c.gold, analyse(c, am, lm)) for c in chats]))
            log(f"act weight {w}, threshold {t}: precision {f['precision']}, recall {f['recall']}, "
                f"changes right {f['changes_accuracy_all']}")
            grid.append({"act_weight": w, "act_threshold": t, "figures": f})
    chosen = max(grid, key=_act_value)
    thresholds = {}
    for kind in ("answers", "confirms"):
        scores = []
        for th in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
            am = EncoderActModel(acts, enc, weight=chosen["act_weight"], threshold=chosen["act_threshold"])
            lm = EncoderLinkModel(links, enc, thresholds={**loose, kind: th})
            f = figures(pool([score(c.gold, analyse(c, am, lm)) for c in chats]))
            p, r = f.get(f"{kind}_precision") or 0.0, f.get(f"{kind}_recall") or 0.0
            scores.append((2 * p * r / (p + r) if p + r else 0.0, th))
        thresholds[kind] = max(scores)[1]
    chosen["link_thresholds"] = thresholds
    chosen["read_floor"], chosen["floors"] = choose_floor(chats, enc, acts, links, chosen, log)
    chosen["change_pool"], chosen["change_weight"], chosen["change_grid"] = choose_change(chats, enc, acts, links,
                                                                                       chosen, log)
    chosen["validation_chats"] = val
    return chosen


def choose_floor(chats, enc, acts, links, chosen: dict, log=print) -> tuple[float, list[dict]]:
    """The link cascade's read floor: the highest of `FLOORS` that costs answers F1, confirms F1 and "changes"
    right at most `FLOOR_LOSS` each against reading every shortlisted pair, with the pairs read per message."""
    rows: list[dict] = []
    for floor in FLOORS:
        f, pairs = _measure(chats, enc, acts, links, chosen, read_floor=floor)
        row = {"floor": floor, "changes": f["changes_accuracy_all"] or 0.0}
        for kind in ("answers", "confirms"):
            p, r = f.get(f"{kind}_precision") or 0.0, f.get(f"{kind}_recall") or 0.0
            row[kind] = 2 * p * r / (p + r) if p + r else 0.0
        rows.append({**row, "pairs_per_message": pairs})
        log(f"read floor {floor}: {rows[-1]}")
    base = rows[0]
    ok = [r for r in rows if all(r[k] >= base[k] - FLOOR_LOSS for k in ("changes", "answers", "confirms"))]
    return max(r["floor"] for r in ok), rows


def choose_change(chats, enc, acts, links, chosen: dict, log=print) -> tuple[int, float, list[dict]]:
    """How a change's target is picked: how many earlier state acts its link reads (`CHANGE_POOLS`) and the
    head's share of a target's score beside the linear model's P (`CHANGE_WEIGHTS`), the pair with the most
    "changes" right on validation (ties: the fewest read, then the larger share). The linear model's best three
    hold the gold target for about four changes in five (docs/analysis.md)."""
    rows: list[dict] = []
    for size in CHANGE_POOLS:
        for w in CHANGE_WEIGHTS:
            f, pairs = _measure(chats, enc, acts, links, chosen, read_floor=chosen.get("read_floor", 0.0),
                                change_pool=size, change_weight=w)
            rows.append({"change_pool": size, "change_weight": w, "changes": f["changes_accuracy_all"] or 0.0,
                         "changes_detected": f["changes_accuracy"] or 0.0, "pairs_per_message": pairs})
            log(f"change pool {size}, head share {w}: {rows[-1]}")
    best = max(rows, key=lambda r: (round(r["changes"], 4), -r["change_pool"], r["change_weight"]))
    return best["change_pool"], best["change_weight"], rows


def _measure(chats, enc, acts, links, chosen: dict, **link_options) -> tuple[dict, float]:
    """The validation chats read with the chosen act constants and a link model built with ``link_options``:
    the pooled figures, and the pairs the link head read per message (the cascade's cost)."""
    from memory.analysis.encoded import EncoderActModel, EncoderLinkModel

    from .acts_eval import analyse, figures, pool, score

    am = EncoderActModel(acts, enc, weight=chosen["act_weight"], threshold=chosen["act_threshold"])
    lm = EncoderLinkModel(links, enc, thresholds=chosen["link_thresholds"], **link_options)
    pairs = [0]
    read = lm.read

    def counted(turn, candidates, ctx):
        pairs[0] += len(candidates)
        return read(turn, candidates, ctx)

    lm.read = counted  # type: ignore[method-assign]
    f = figures(pool([score(c.gold, analyse(c, am, lm)) for c in chats]))
    return f, round(pairs[0] / max(sum(len(c.gold) for c in chats), 1), 3)


def _act_value(point: dict) -> tuple[int, float]:
    """A grid point's worth: reaching `RECALL_FLOOR` of the state acts first, then precision plus "changes"
    right (a wrong entry under Decisions costs a reader more than a missing one, once most are there)."""
    f = point["figures"]
    p, r, changes = f["precision"] or 0.0, f["recall"] or 0.0, f["changes_accuracy_all"] or 0.0
    return (1, p + changes) if r >= RECALL_FLOOR else (0, r)


def _memo(enc) -> None:
    """Remember the encoder's outputs by input (the grid reads the same messages many times)."""
    seen: dict = {}
    classify = enc.classify

    def cached(output, rows):
        keys = [(output, tuple(r.ids), tuple(r.types)) for r in rows]
        todo = [r for r, k in zip(rows, keys) if k not in seen]
        if todo:
            for k, p in zip([kk for kk in keys if kk not in seen], classify(output, todo)):
                seen[k] = p
        return np.stack([seen[k] for k in keys]) if keys else classify(output, rows)

    enc.classify = cached


def ship(reader_run: Path, out: Path, models: Path, chosen: dict, version: str = VERSION) -> list[Path]:
    """The shipped encoder rebuilt with the analysis heads, and its metadata's ``analysis`` section."""
    from memory.encoder.build import export

    graph = export(reader_run / "best.safetensors", models / f"{version}.onnx", heads=out / "heads.safetensors")
    meta_path = models / f"{version}.json"
    meta = json.loads(meta_path.read_text())
    meta["heads"] = ["answer", "span", "act", "link"]
    meta["analysis"] = {**chosen, "trained": json.loads((out / "done.json").read_text()),
                        "rebuild": "chorus train heads (after chorus train answer)"}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return [graph, meta_path]
