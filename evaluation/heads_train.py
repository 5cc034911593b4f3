"""Train the encoder's analysis heads (act and link) on a branch over the reader's frozen first layers.

The reader (evaluation/encoder_train.py) is trained and frozen; its first layers are shared, and the
analysis heads get their own copies of its last `BRANCH` layers (memory/encoder/build.py), trained with
the act head (eight kinds, from the first token of "message [SEP] its context") and the link head (none /
changes / answers / confirms, from "message [SEP] an earlier message"). The reader's answers are untouched,
so its held-out figures stay valid, and one ONNX file serves the reply and the analysis pass.

Rows come from evaluation/heads_data.py. Batches alternate act rows and link rows; each loss is a
cross-entropy weighted by the inverse square root of its classes' frequency. Validation reads held-apart
chats every half epoch; the run keeps the best weights (act macro-F1 plus "changes" link accuracy) and stops
after `PATIENCE` validations without a gain. Checkpoints and resume as in encoder_train.
"""
from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from memory.analysis.encoded import HEAD_LINKS
from memory.analysis.types import ACT_KINDS, STATE_ACTS
from memory.encoder.build import BRANCH
from memory.encoder.inputs import Encoded, Tokens, batch, encode_two

from .encoder_train import checkpoint, load_weights, resume
from .heads_data import ActRow, LinkRow

PATIENCE = 2
CHECKPOINT_STEPS = 200


@dataclass
class HeadOptions:
    epochs: float = 4.0
    batch: int = 32
    lr: float = 5e-5
    head_lr: float = 1e-3
    seed: int = 17
    evals_per_epoch: int = 2


class Heads(nn.Module):
    """The frozen reader's first layers, the analysis branch's own last layers, and the two heads."""

    def __init__(self, reader_weights: Path) -> None:
        super().__init__()
        self.reader = load_weights(reader_weights)
        for p in self.reader.parameters():
            p.requires_grad_(False)
        layers = self.reader.bert.encoder.layer
        self.branch = nn.ModuleList(copy.deepcopy(layers[len(layers) - BRANCH:]))
        for p in self.branch.parameters():
            p.requires_grad_(True)
        hidden = self.reader.bert.config.hidden_size
        self.dropout = nn.Dropout(0.1)
        self.act = nn.Linear(hidden, len(ACT_KINDS))
        self.link = nn.Linear(hidden, len(HEAD_LINKS))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, head: str) -> torch.Tensor:
        bert = self.reader.bert
        ext = bert.get_extended_attention_mask(mask, ids.shape)
        with torch.no_grad():
            h = bert.embeddings(input_ids=ids, token_type_ids=types)
            for layer in bert.encoder.layer[: len(bert.encoder.layer) - BRANCH]:
                h = layer(h, attention_mask=ext)[0]
        for layer in self.branch:
            h = layer(h, attention_mask=ext)[0]
        return (self.act if head == "act" else self.link)(self.dropout(h[:, 0]))

    def branch_weights(self) -> dict[str, torch.Tensor]:
        """The branch and heads under the names memory/encoder/build.py reads."""
        first = len(self.reader.bert.encoder.layer) - BRANCH
        out = {}
        for k, v in self.branch.state_dict().items():
            i, rest = k.split(".", 1)
            out[f"ana.layer.{first + int(i)}.{rest}"] = v.detach().clone().contiguous()
        for head in ("act", "link"):
            out[f"{head}.weight"] = getattr(self, head).weight.detach().clone().contiguous()
            out[f"{head}.bias"] = getattr(self, head).bias.detach().clone().contiguous()
        return out


def encode(tokens: Tokens, acts: Sequence[ActRow], links: Sequence[LinkRow]
           ) -> tuple[list[Encoded], list[Encoded]]:
    a_pieces = tokens.pieces([t for r in acts for t in (r.message, r.context)]) if acts else []
    l_pieces = tokens.pieces([t for r in links for t in (r.message, r.earlier)]) if links else []
    a = [encode_two(tokens, r.message, r.context, pieces=(a_pieces[2 * i], a_pieces[2 * i + 1]), keep_end=True)
         for i, r in enumerate(acts)]
    b = [encode_two(tokens, r.message, r.earlier, pieces=(l_pieces[2 * i], l_pieces[2 * i + 1]))
         for i, r in enumerate(links)]
    return a, b


def _tensors(rows: Sequence[Encoded], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, mask, types = (torch.from_numpy(x) for x in batch(rows, pad))
    return ids, mask, types


def _batches(rows: Sequence[Encoded], size: int, rng: random.Random) -> list[list[int]]:
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i].ids), rng.random()))
    out = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(out)
    return out


def _weights(labels: Sequence[int], n: int) -> torch.Tensor:
    counts = np.bincount(np.asarray(labels), minlength=n).astype(np.float64) + 1.0
    w = 1.0 / np.sqrt(counts)
    return torch.tensor(w / w.mean(), dtype=torch.float32)


@torch.no_grad()
def predict(model: Heads, rows: Sequence[Encoded], head: str, pad: int) -> np.ndarray:
    model.eval()
    out = np.zeros((len(rows), len(ACT_KINDS) if head == "act" else len(HEAD_LINKS)), dtype=np.float32)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
    for k in range(0, len(order), 64):
        idx = order[k:k + 64]
        logits = model(*_tensors([rows[i] for i in idx], pad), head)
        out[idx] = torch.softmax(logits, dim=1).numpy()
    model.train()
    return out


def evaluate(model: Heads, act_rows: Sequence[ActRow], act_enc: Sequence[Encoded], link_rows: Sequence[LinkRow],
             link_enc: Sequence[Encoded], pad: int) -> dict[str, float]:
    """Act macro-F1 and state-act precision/recall (head alone, argmax), and link accuracy: of the messages
    with a gold link of a kind among the rows read, the share whose best row for that kind is the gold one."""
    p = predict(model, act_enc, "act", pad)
    gold = np.asarray([r.kind for r in act_rows])
    guess = p.argmax(axis=1)
    f1s = []
    for k in range(len(ACT_KINDS)):
        tp = float(((guess == k) & (gold == k)).sum())
        prec = tp / max(1.0, float((guess == k).sum()))
        rec = tp / max(1.0, float((gold == k).sum()))
        f1s.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
    state = np.asarray([ACT_KINDS.index(k) for k in STATE_ACTS])
    gs, ps = np.isin(gold, state), np.isin(guess, state)
    out = {"act_macro_f1": float(np.mean(f1s)), "state_precision": float((gs & ps).sum() / max(1, ps.sum())),
           "state_recall": float((gs & ps).sum() / max(1, gs.sum()))}
    q = predict(model, link_enc, "link", pad)
    groups: dict[tuple[str, int], list[int]] = {}
    for i, r in enumerate(link_rows):
        groups.setdefault((r.chat, r.turn), []).append(i)
    for kind in ("changes", "answers", "confirms"):
        col = HEAD_LINKS.index(kind)
        right = total = 0
        for idx in groups.values():
            if any(link_rows[i].label == col for i in idx):
                total += 1
                best = max(idx, key=lambda i: q[i, col])
                right += link_rows[best].label == col
        out[f"{kind}_right"] = right / total if total else 0.0
    out["objective"] = out["act_macro_f1"] + out["changes_right"]
    return out


def train(run: Path, reader: Path, acts: Sequence[ActRow], links: Sequence[LinkRow], val_acts: Sequence[ActRow],
          val_links: Sequence[LinkRow], opts: HeadOptions | None = None, log=print) -> dict:
    """Train (or resume) the analysis branch in ``run``; returns the best validation figures."""
    run.mkdir(parents=True, exist_ok=True)
    opts = opts or HeadOptions()
    torch.manual_seed(opts.seed)
    tokens = Tokens()
    a_enc, l_enc = encode(tokens, acts, links)
    va_enc, vl_enc = encode(tokens, val_acts, val_links)
    log(f"{len(acts)} act rows, {len(links)} link rows; validation {len(val_acts)} / {len(val_links)}")
    model = Heads(reader)
    aw, lw = _weights([r.kind for r in acts], len(ACT_KINDS)), _weights([r.label for r in links], len(HEAD_LINKS))
    optim = torch.optim.AdamW([{"params": model.branch.parameters(), "lr": opts.lr, "weight_decay": 0.01},
                               {"params": [*model.act.parameters(), *model.link.parameters()], "lr": opts.head_lr}])
    per_epoch = max(len(a_enc), len(l_enc)) // opts.batch + 1
    total = int(per_epoch * opts.epochs)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: max(0.0, 1.0 - s / max(1, total)))
    state: dict[str, Any] = {"step": 0, "epoch": 0, "best": -1.0, "bad": 0, "history": []}
    ckpt = run / "checkpoint.pt"
    if (resumed := resume(ckpt, model, optim, sched)) is not None:
        state = resumed
        log(f"resumed at step {state['step']}")
    every = max(1, per_epoch // opts.evals_per_epoch)
    t0 = time.time()
    while state["step"] < total and state["bad"] < PATIENCE:
        rng = random.Random(opts.seed * 1000 + state["epoch"])
        ab, lb = _batches(a_enc, opts.batch, rng), _batches(l_enc, opts.batch, rng)
        start = state["step"] - state["epoch"] * per_epoch
        for b in range(start, per_epoch):
            loss = nn.functional.cross_entropy(model(*_tensors([a_enc[i] for i in ab[b % len(ab)]], tokens.pad),
                                                     "act"),
                                               torch.tensor([acts[i].kind for i in ab[b % len(ab)]]), weight=aw)
            lbatch = lb[b % len(lb)]
            loss = loss + nn.functional.cross_entropy(model(*_tensors([l_enc[i] for i in lbatch], tokens.pad),
                                                            "link"),
                                                      torch.tensor([links[i].label for i in lbatch]), weight=lw)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            state["step"] += 1
            if state["step"] % 20 == 0:
                _append(run / "log.jsonl", {"step": state["step"], "loss": loss.item(),
                                            "s_per_step": round((time.time() - t0) / max(1, state["step"]), 3)})
            validate = state["step"] % every == 0 or state["step"] >= total
            if validate:
                figures = evaluate(model, val_acts, va_enc, val_links, vl_enc, tokens.pad)
                figures["step"] = state["step"]
                state["history"].append(figures)
                _append(run / "log.jsonl", {"validation": figures})
                log(f"step {state['step']}/{total}: {json.dumps({k: round(v, 4) for k, v in figures.items()})}")
                if figures["objective"] > state["best"] + 1e-4:
                    state["best"], state["bad"] = figures["objective"], 0
                    _save(model, run / "heads.safetensors")
                else:
                    state["bad"] += 1
            if validate or state["step"] % CHECKPOINT_STEPS == 0:
                checkpoint(ckpt, model, optim, sched, state)
            if state["step"] >= total or state["bad"] >= PATIENCE:
                break
        else:
            state["epoch"] += 1
    best = max(state["history"], key=lambda f: f["objective"]) if state["history"] else {}
    (run / "done.json").write_text(json.dumps({"best": best, "steps": state["step"]}, indent=1))
    return best


def _save(model: Heads, path: Path) -> None:
    from safetensors.torch import save_file

    tmp = path.with_suffix(".tmp")
    save_file(model.branch_weights(), str(tmp))
    tmp.replace(path)


def _append(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def sample_links(rows: Sequence[LinkRow], keep_other: float, seed: int = 5) -> list[LinkRow]:
    """Every candidate row of the messages that have a gold link among their rows (the choice between the
    right earlier message and the likely wrong ones is what the head must learn), and ``keep_other`` of the
    messages without one (their rows teach "none")."""
    groups: dict[tuple[str, int], list[LinkRow]] = {}
    for r in rows:
        groups.setdefault((r.chat, r.turn), []).append(r)
    rng = random.Random(seed)
    out: list[LinkRow] = []
    for key in sorted(groups):
        g = groups[key]
        if any(r.label > 0 for r in g) or rng.random() < keep_other:
            out += g
    return out
