"""Fine-tune the shipped MiniLM as Chorus's reader: does this message answer the question, and with which words.

Training only (torch and transformers, the ``train`` extra; the bot never imports this). All six layers
train; the word embeddings stay frozen, so the shipped file need not carry them (the runtime takes them
from the installed MiniLM package, memory/encoder/build.py). Two heads read the encoder:

- *answers*: a logit from the first token. It is trained per question: a softmax over the question's candidates
  (evaluation/reader_data.py: 1 answers, 0 does not; stale and supporting turns left out) and a learned score for
  "none of them", so that an answering candidate beats the rest and "none" beats every candidate of a question
  the chat does not answer. A pointwise loss was tried first: with one answer among a dozen candidates and the
  many positives of each-member questions, it scored every plain question's answer near 0.03 after an epoch
  (decline AUC 0.62 on validation). The shipped logit is a candidate's score minus "none"'s, so
  sigmoid(logit) reads as P(it answers rather than nothing does);
- *span*: start and end logits over the candidate's tokens, trained on the answering rows whose answer
  words are known.

A run lives in one folder: ``checkpoint.pt`` every `CHECKPOINT_STEPS` steps and at each validation (model,
optimiser, schedule, data order, step), ``log.jsonl`` (loss, validation figures), ``best.safetensors`` (the
weights at the best validation so far). Started again with the same folder, it resumes from the checkpoint.
Validation reads held-apart conversations ``evals_per_epoch`` times an epoch (once by default: a pass over
2,300 validation questions costs about ten minutes here); training stops when the validation objective
(the decline's AUC plus the pair AUC plus half the span F1) has not improved for `PATIENCE` validations.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from memory.embeddings.minilm import default_model_dir
from memory.encoder.inputs import Encoded, Tokens, batch, encode_pair, span_text, span_tokens
from memory.encoder.model import best_span
from memory.query.reading import READ

from .question_forms import form_weights
from .reader_data import QuestionRows, row_ages
from .reader_metrics import auc, exact, token_f1

CHECKPOINT_STEPS = 200
PATIENCE = 2
MAX_SPAN_TOKENS = 30


@dataclass
class Options:
    """What a run is; stored in its folder so a resumed run cannot change it."""

    epochs: float = 3.0
    batch: int = 2  # questions (about 26 rows)
    lr: float = 4e-5
    head_lr: float = 1e-3
    warmup: float = 0.06
    weight_decay: float = 0.01
    span_weight: float = 0.5
    max_tokens_per_batch: int = 3072
    seed: int = 13
    evals_per_epoch: int = 1
    init: str = ""  # weights (save_weights) to start from instead of the base MiniLM
    balance_forms: bool = False  # weigh down labelled unanswerables where they outnumber a question form's answerables
    age: bool = False  # each candidate read with its age beside the newest read candidate (inputs.age_tags)


@dataclass
class Item:
    """One encoded reader row with its targets."""

    enc: Encoded
    label: int
    start: int  # span start token (-1: no span target)
    end: int
    q: int  # index of its question
    weight: float = 1.0  # its question's weight in the loss


class Reader(nn.Module):
    """The MiniLM encoder with the answers head and the span head."""

    def __init__(self, model_dir: Path | None = None) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        directory = model_dir or default_model_dir()
        config = BertConfig.from_pretrained(str(directory))
        self.bert = BertModel.from_pretrained(str(directory), config=config, add_pooling_layer=False)
        self.bert.embeddings.word_embeddings.weight.requires_grad_(False)
        hidden = config.hidden_size
        self.dropout = nn.Dropout(0.1)
        self.answer = nn.Linear(hidden, 1)
        self.span = nn.Linear(hidden, 2)
        self.none = nn.Parameter(torch.zeros(()))  # the score of "none of them answers"
        nn.init.normal_(self.answer.weight, std=0.02)
        nn.init.zeros_(self.answer.bias)
        nn.init.normal_(self.span.weight, std=0.02)
        nn.init.zeros_(self.span.bias)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        logit = self.answer(self.dropout(h[:, 0])).squeeze(-1)
        se = self.span(h)
        return logit, se[..., 0], se[..., 1]


def encode_rows(tokens: Tokens, questions: Sequence[QuestionRows], *, train: bool, age: bool = False) -> list[Item]:
    """Encoded items for every labelled row (``train``: rows labelled -1 are left out; ``age``: each with its
    age tag, as the reply reads them)."""
    texts: list[str] = []
    where: list[tuple[int, int]] = []
    ages: dict[int, list[str]] = {}
    for qi, qr in enumerate(questions):
        if age:
            ages[qi] = row_ages(qr, READ)
        for ri, r in enumerate(qr.rows):
            if train and r.label < 0:
                continue
            texts += [qr.question, r.context, r.candidate]
            where.append((qi, ri))
    pieces = tokens.pieces(texts) if texts else []
    items = []
    for k, (qi, ri) in enumerate(where):
        qr, r = questions[qi], questions[qi].rows[ri]
        enc = encode_pair(tokens, qr.question, r.context, r.candidate, pieces=tuple(pieces[3 * k:3 * k + 3]),
                          age=ages[qi][ri] if age else "")
        start = end = -1
        if r.label == 1:
            for s in r.spans:
                at = _locate(r.candidate, s, qr.author_span)
                got = span_tokens(enc, *at) if at else None
                if got is not None and got[1] - got[0] < MAX_SPAN_TOKENS:
                    start, end = got
                    break
        items.append(Item(enc, r.label, start, end, qi))
    return items


def _locate(candidate: str, span: str, author_span: bool) -> tuple[int, int] | None:
    """Character offsets of ``span`` in "author: text" (the author's name for "who said it" answers)."""
    head = candidate.find(": ")
    if author_span and candidate.startswith(span):
        return 0, len(span)
    flat = " ".join(span.split())
    at = candidate.find(flat, head + 2 if head >= 0 else 0)
    if at < 0:
        at = candidate.casefold().find(flat.casefold(), head + 2 if head >= 0 else 0)
    if at < 0 and candidate.startswith(span):
        return 0, len(span)
    return (at, at + len(flat)) if at >= 0 else None


def batches(items: Sequence[Item], opts: Options, rng: random.Random) -> list[list[int]]:
    """Whole questions per batch (the loss compares a question's candidates with each other and with "none"),
    up to ``opts.batch`` questions and ``opts.max_tokens_per_batch`` padded tokens; questions of similar length
    batch together, batch order shuffled."""
    by_q: dict[int, list[int]] = {}
    for i, it in enumerate(items):
        by_q.setdefault(it.q, []).append(i)
    groups = sorted(by_q.values(), key=lambda g: (max(len(items[i].enc.ids) for i in g), rng.random()))
    out: list[list[int]] = []
    cur: list[int] = []
    n_q = 0
    for g in groups:
        longest = max(len(items[i].enc.ids) for i in (*cur, *g))
        if cur and (n_q >= opts.batch or (len(cur) + len(g)) * longest > opts.max_tokens_per_batch):
            out.append(cur)
            cur, n_q = [], 0
        cur += g
        n_q += 1
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def tensors(items: Sequence[Item], idx: Sequence[int], pad: int) -> dict[str, torch.Tensor]:
    rows = [items[i] for i in idx]
    ids, mask, types = (torch.from_numpy(x) for x in batch([r.enc for r in rows], pad))
    cand = torch.zeros(ids.shape, dtype=torch.bool)
    for k, r in enumerate(rows):
        cand[k, r.enc.cand_start:r.enc.cand_end] = True
    return {"ids": ids, "mask": mask, "types": types, "cand": cand,
            "label": torch.tensor([max(r.label, 0) for r in rows], dtype=torch.float32),
            "start": torch.tensor([r.start for r in rows]), "end": torch.tensor([r.end for r in rows]),
            "q": torch.tensor([r.q for r in rows]), "w": torch.tensor([r.weight for r in rows])}


def loss_of(model: Reader, t: dict[str, torch.Tensor], opts: Options) -> tuple[torch.Tensor, dict[str, float]]:
    """Per question, a softmax over "none of them" and its candidates: the answering candidates (any of them)
    should win, and "none" should win a question nothing answers. Every question weighs the same, however many
    candidates it has; the span loss reads the answering rows whose words are known."""
    logit, start, end = model(t["ids"], t["mask"], t["types"])
    qs = t["q"]
    losses, weights = [], []
    for q in torch.unique(qs):
        rows = (qs == q).nonzero(as_tuple=True)[0]
        scores = torch.cat([model.none.view(1), logit[rows]])
        logp = torch.log_softmax(scores, dim=0)
        pos = t["label"][rows] > 0
        losses.append(-torch.logsumexp(logp[1:][pos], 0) if bool(pos.any()) else -logp[0])
        weights.append(t["w"][rows[0]])
    w = torch.stack(weights)
    listwise = (torch.stack(losses) * w).sum() / w.sum()
    has = t["start"] >= 0
    span = torch.zeros(())
    if bool(has.any()):
        neg = torch.finfo(start.dtype).min / 2
        s = start[has].masked_fill(~t["cand"][has], neg)
        e = end[has].masked_fill(~t["cand"][has], neg)
        span = (nn.functional.cross_entropy(s, t["start"][has]) + nn.functional.cross_entropy(e, t["end"][has])) / 2
    total = listwise + opts.span_weight * span
    return total, {"listwise": listwise.item(), "span": span.item()}


@torch.no_grad()
def predict(model: Reader, items: Sequence[Item], pad: int, batch_tokens: int = 4096
            ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """P(answers) and the best span (token positions) of every item."""
    model.eval()
    probs = np.zeros(len(items), dtype=np.float32)
    spans: list[tuple[int, int]] = [(-1, -1)] * len(items)
    order = sorted(range(len(items)), key=lambda i: len(items[i].enc.ids))
    k = 0
    while k < len(order):
        n = len(items[order[min(len(order) - 1, k + 63)]].enc.ids)
        size = max(1, min(64, batch_tokens // max(1, n)))
        idx = order[k:k + size]
        t = tensors(items, idx, pad)
        logit, start, end = model(t["ids"], t["mask"], t["types"])
        p = torch.sigmoid(logit - model.none).numpy()  # the candidate against "none of them"
        for j, i in enumerate(idx):
            probs[i] = p[j]
            spans[i] = best_span(start[j].numpy(), end[j].numpy(), items[i].enc.cand_start, items[i].enc.cand_end)
        k += size
    model.train()
    return probs, spans


def evaluate(model: Reader, questions: Sequence[QuestionRows], items: Sequence[Item], pad: int) -> dict[str, float]:
    """Validation figures: pair AUC, the decline's AUC (best P per question), span F1 and exact match."""
    probs, spans = predict(model, items, pad)
    labelled = [(probs[i], it.label) for i, it in enumerate(items) if it.label >= 0]
    best: dict[int, float] = {}
    for i, it in enumerate(items):
        best[it.q] = max(best.get(it.q, 0.0), float(probs[i]))
    answerable = [best.get(qi, 0.0) for qi, q in enumerate(questions) if q.kind == "answerable" and q.gold_in_top]
    unanswerable = [best.get(qi, 0.0) for qi, q in enumerate(questions)
                    if q.kind in ("near_miss", "off_topic", "counterfactual")]
    f1s, ems = [], []
    for i, it in enumerate(items):
        qr = questions[it.q]
        row = next((r for r in qr.rows if r.candidate == it.enc.cand_text and r.label == 1 and r.spans), None)
        if row is None or spans[i][0] < 0:
            continue
        guess = span_text(it.enc, *spans[i])
        f1s.append(max(token_f1(guess, s) for s in row.spans))
        ems.append(max(exact(guess, s) for s in row.spans))
    out = {"pair_auc": auc([p for p, lab in labelled if lab == 1], [p for p, lab in labelled if lab == 0]),
           "decline_auc": auc(answerable, unanswerable),
           "span_f1": float(np.mean(f1s)) if f1s else 0.0, "span_em": float(np.mean(ems)) if ems else 0.0,
           "n_pairs": len(labelled), "n_questions": len(questions)}
    out["objective"] = out["decline_auc"] + out["pair_auc"] + 0.5 * out["span_f1"]
    return out


def train(run: Path, train_q: Sequence[QuestionRows], val_q: Sequence[QuestionRows], opts: Options,
          log=print) -> dict:
    """Train (or resume) the run in folder ``run``; returns the best validation figures."""
    run.mkdir(parents=True, exist_ok=True)
    saved = run / "options.json"
    if saved.exists():
        opts = Options(**json.loads(saved.read_text()))
    else:
        saved.write_text(json.dumps(opts.__dict__, indent=1))
    torch.manual_seed(opts.seed)
    tokens = Tokens()
    items = encode_rows(tokens, train_q, train=True, age=opts.age)
    if opts.balance_forms:
        by_q = form_weights(train_q)
        for it in items:
            it.weight = by_q[it.q]
        log(f"question forms balanced: {sum(w < 1 for w in by_q)} labelled unanswerables weighed down "
            f"(mean weight {np.mean([w for w in by_q if w < 1] or [1.0]):.2f})")
    val_items = encode_rows(tokens, val_q, train=False, age=opts.age)
    log(f"{len(items)} training rows ({sum(i.label == 1 for i in items)} positive, "
        f"{sum(i.start >= 0 for i in items)} with a span), {len(val_items)} validation rows")
    model = load_weights(Path(opts.init)).train() if opts.init else Reader()
    heads = [p for n, p in model.named_parameters() if not n.startswith("bert.") and p.requires_grad]
    body_decay = [p for n, p in model.named_parameters() if n.startswith("bert.") and p.requires_grad
                  and not any(k in n for k in ("bias", "LayerNorm"))]
    body_rest = [p for n, p in model.named_parameters() if n.startswith("bert.") and p.requires_grad
                 and any(k in n for k in ("bias", "LayerNorm"))]
    optim = torch.optim.AdamW([{"params": body_decay, "lr": opts.lr, "weight_decay": opts.weight_decay},
                               {"params": body_rest, "lr": opts.lr, "weight_decay": 0.0},
                               {"params": heads, "lr": opts.head_lr, "weight_decay": 0.0}])
    per_epoch = len(batches(items, opts, random.Random(0)))
    total = int(per_epoch * opts.epochs)
    warm = max(1, int(total * opts.warmup))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / max(1, total - warm)) if s >= warm
        else (s + 1) / warm)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "done_in_epoch": 0, "best": -1.0, "bad": 0, "history": []}
    ckpt = run / "checkpoint.pt"
    if (resumed := resume(ckpt, model, optim, sched)) is not None:
        state = resumed
        log(f"resumed at step {state['step']} (epoch {state['epoch']}, batch {state['done_in_epoch']})")
    every = max(1, per_epoch // opts.evals_per_epoch)
    model.train()
    t0, seen = time.time(), 0
    while state["step"] < total and state["bad"] < PATIENCE:
        order = batches(items, opts, random.Random(opts.seed * 1000 + state["epoch"]))
        for b in range(state["done_in_epoch"], len(order)):
            t = tensors(items, order[b], tokens.pad)
            loss, parts = loss_of(model, t, opts)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            state["step"] += 1
            state["done_in_epoch"] = b + 1
            seen += len(order[b])
            if state["step"] % 20 == 0:
                rate = seen / max(1e-9, time.time() - t0)
                _append(run / "log.jsonl", {"step": state["step"], "epoch": state["epoch"], "loss": loss.item(),
                                            **parts, "rows_per_s": round(rate, 1), "lr": sched.get_last_lr()[0]})
            validate = state["step"] % every == 0 or state["step"] >= total
            if validate:
                figures = evaluate(model, val_q, val_items, tokens.pad)
                figures.update(step=state["step"], epoch=state["epoch"] + (b + 1) / len(order))
                state["history"].append(figures)
                _append(run / "log.jsonl", {"validation": figures})
                log(f"step {state['step']}/{total}: {json.dumps({k: round(v, 4) for k, v in figures.items()})}")
                if figures["objective"] > state["best"] + 1e-4:
                    state["best"], state["bad"] = figures["objective"], 0
                    save_weights(model, run / "best.safetensors")
                else:
                    state["bad"] += 1
            if validate or state["step"] % CHECKPOINT_STEPS == 0:
                checkpoint(ckpt, model, optim, sched, state)
            if state["step"] >= total or state["bad"] >= PATIENCE:
                break
        else:
            state["epoch"] += 1
            state["done_in_epoch"] = 0
            checkpoint(ckpt, model, optim, sched, state)
    best = max(state["history"], key=lambda f: f["objective"]) if state["history"] else {}
    (run / "done.json").write_text(json.dumps({"best": best, "steps": state["step"]}, indent=1))
    return best


def resume(path: Path, model: nn.Module, optim, sched) -> dict | None:
    """Load a run's checkpoint into its model, optimiser and schedule; its loop state, or None without one."""
    if not path.exists():
        return None
    blob = torch.load(path, weights_only=False)
    model.load_state_dict(blob["model"])
    optim.load_state_dict(blob["optim"])
    sched.load_state_dict(blob["sched"])
    return blob["state"]


def checkpoint(path: Path, model: nn.Module, optim, sched, state: dict) -> None:
    """Write a run's model, optimiser, schedule and loop state atomically (what `resume` reads)."""
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "sched": sched.state_dict(),
                "state": state}, tmp)
    tmp.replace(path)


def _append(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def save_weights(model: Reader, path: Path) -> None:
    """The trained weights (fp32, word embeddings left out: they never changed)."""
    from safetensors.torch import save_file

    weights = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
               if k != "bert.embeddings.word_embeddings.weight" and "position_ids" not in k and k != "none"}
    weights["answer.bias"] -= model.none.detach()  # the shipped logit is the candidate's against "none"
    tmp = path.with_suffix(".tmp")
    save_file(weights, str(tmp))
    tmp.replace(path)


def load_weights(path: Path) -> Reader:
    from safetensors.torch import load_file

    model = Reader()
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    if unexpected or [k for k in missing if "word_embeddings" not in k and "position_ids" not in k and k != "none"]:
        raise ValueError(f"{path}: weights do not fit the reader (missing {missing}, unexpected {unexpected})")
    model.eval()
    return model


def steps_estimate(n_rows: int, opts: Options) -> int:
    return int(math.ceil(n_rows / opts.batch) * opts.epochs)
