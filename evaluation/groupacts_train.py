"""Train the group-act classifier (memory/groupacts.py) on SocialMemBench's reference writer.

Labels. The reference writer (SpeakerMem-R1's teacher) wrote abstractive ``group_interaction``
records with a source, per window. Each is aligned to the message of that source in that window
whose words it shares most (Eq. 13's similarity, the scorer's own measure); that message is a group
act, and so is any other message the scorer would pair with one of the network's reference GROUP
records (similarity >= 0.3); every other message is not. The act's kind is read from the teacher's
own wording of the record (it says "decided", "plans", "to book", "instead of", ...): weak labels,
learned from the message and its
context, never matched against messages at run time. The two networks whose reference memory is in
Polish and Italian cannot be aligned and are left out.

Validation is leave-networks-out: each network's figures come from a model fitted on the others, with
the regularisation and the threshold chosen inside that fit by leave-one-network-out over the others
(nested). The shipped model is then fitted on every network with the same choice procedure.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory.datasets import load_dataset
from memory.embeddings.base import Embedder
from memory.groupacts import CHEAP, EMBEDDER_FAMILY, KINDS, GroupActClassifier, cap_per_session, own_news, stated
from memory.models import StoredMessage

from .speaker_levenshtein import MemRecord, pair_similarity
from .writer_reference import (
    CONTENT_MATCH,
    SAME_LANGUAGE,
    content_pairs,
    load_reference,
    reference_files,
    same_language,
)

C_GRID = (0.03, 0.1, 1.0)  # for the act model's 15 features
KIND_C = 0.1  # the kind model reads the 384-dimension vector too
THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
PER_SESSION = (1, 2, 3, 100)  # acts per 10 messages of a session (100: no cap)

# The teacher's wording of a record says which act it is (weak labels; order matters: first match wins).
_KIND_WORDS = (
    ("change", re.compile(r"\b(instead|mov(?:e|es|ed|ing)|shift\w*|drop\w*|no longer|rather than|switch\w*"
                          r"|postpon\w*|reschedul\w*|chang\w*|stick with|revok\w*|cancel\w*)\b", re.I)),
    ("norm", re.compile(r"\b(rules?|norms?|expectations?|standard|always|never|tradition\w*|requires?|minimum"
                        r"|policy|from now on|every)\b", re.I)),
    ("task", re.compile(r"\b(?:[A-Z][a-z]+ (?:to|will) (?:book|draft|check|send|bring|handle|cook|organi[sz]e"
                        r"|pick|host|sort|represent|buy|make)|booked by|handling|drafting|brings|cooks)\b")),
    ("plan", re.compile(r"\b(plans?|planned|will|next|tentative\w*|to meet|going to|consider\w*|aims?)\b", re.I)),
)


def kind_of(content: str) -> str:
    """The act a reference record's wording names (decision unless it says otherwise)."""
    if re.search(r"\b(decid\w*|agree\w*|settled|confirmed|votes?)\b", content, re.I):
        for kind, pat in _KIND_WORDS[:2]:
            if pat.search(content):
                return kind
        return "decision"
    for kind, pat in _KIND_WORDS:
        if pat.search(content):
            return kind
    return "decision"


@dataclass
class Network:
    id: str
    messages: list[StoredMessage]
    labels: list[str]          # "none" or one of KINDS per message
    reference: list[MemRecord]  # the reference's group_interaction heads (for the scorer-level figure)


def stored(conv) -> list[StoredMessage]:
    """A dataset conversation as the rows the writer would read (ids in order, sessions from the file)."""
    return [StoredMessage(id=i + 1, scope_id=1, platform=m.platform, workspace=m.workspace, channel=m.channel,
                          thread="", msg_id=m.msg_id, author_id=m.author_id, author_name=m.author_name, text=m.text,
                          ts=m.ts, session=m.session_hint or 0, turn=i, reply_to=m.reply_to)
            for i, m in enumerate(conv.messages)]


def load_networks(data: str | Path, reference: str | Path) -> list[Network]:
    """Every network whose reference memory is in the chat's language, with one label per message."""
    refs = reference_files(reference)
    out = []
    for conv in load_dataset("socialmem", data):
        path = refs.get(conv.id)
        if path is None:
            continue
        ref = load_reference(path)
        if same_language(ref.records, [m.text for m in conv.messages]) < SAME_LANGUAGE:
            continue
        msgs = stored(conv)
        by_id = {m.msg_id: k for k, m in enumerate(msgs)}
        labels = ["none"] * len(msgs)
        raw = json.loads(Path(path).read_text("utf-8"))
        for t in raw.get("transitions") or []:
            window = [by_id[i] for i in t.get("msg_ids", []) if i in by_id]
            for a in t.get("actions") or []:
                if a.get("action") != "ADD" or a.get("layer") != "group_interaction":
                    continue
                cands = [k for k in window if msgs[k].author_name == a.get("source")] or window
                if not cands:
                    continue
                best = max(cands, key=lambda k: pair_similarity(msgs[k].text, a.get("content", "")))
                labels[best] = kind_of(a.get("content", ""))
        group = [r for r in ref.records if r.layer == "group_interaction"]
        for k, m in enumerate(msgs):
            # Another message whose words the scorer would pair with a reference GROUP record is an act too.
            if labels[k] == "none" and any(pair_similarity(m.text, r.content) >= CONTENT_MATCH for r in group):
                labels[k] = "decision"
        out.append(Network(conv.id, msgs, labels,
                           [r for r in ref.records if r.layer == "group_interaction"]))
    return out


def _blank(dim: int) -> dict:
    n = dim + len(CHEAP)
    return {"kinds": list(KINDS), "act_weights": [0.0] * n, "act_bias": 0.0, "kind_weights": [[0.0] * n] * len(KINDS),
            "kind_bias": [0.0] * len(KINDS), "mean": [0.0] * n, "scale": [1.0] * n, "threshold": 1.0,
            "max_per_session": 1}


def featurize(networks: Sequence[Network], embedder: Embedder) -> dict[str, np.ndarray]:
    builder = GroupActClassifier(_blank(int(embedder.dim)), embedder)
    return {n.id: builder.features(n.messages) for n in networks}


@dataclass
class Fitted:
    act: object
    kind: object | None
    mean: np.ndarray
    scale: np.ndarray
    kind_classes: list[str]


def fit(nets: Sequence[Network], feats: dict[str, np.ndarray], c: float) -> Fitted:
    from sklearn.linear_model import LogisticRegression  # the `eval` extra only

    x = np.vstack([feats[n.id] for n in nets])
    labels = [lbl for n in nets for lbl in n.labels]
    mean, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-3)
    z = (x - mean) / scale
    act = LogisticRegression(C=c, max_iter=3000, class_weight="balanced").fit(
        z[:, -len(CHEAP):], [lbl != "none" for lbl in labels])  # the act model reads CHEAP only (groupacts.py)
    pos = [i for i, lbl in enumerate(labels) if lbl != "none"]
    kinds = sorted({labels[i] for i in pos})
    kind = LogisticRegression(C=KIND_C, max_iter=3000, class_weight="balanced").fit(
        z[pos], [labels[i] for i in pos]) if len(kinds) > 1 else None
    return Fitted(act, kind, mean, scale, kinds)


def act_scores(f: Fitted, x: np.ndarray) -> np.ndarray:
    return f.act.predict_proba(((x - f.mean) / f.scale)[:, -len(CHEAP):])[:, 1]  # type: ignore[attr-defined]


def pick(net: Network, scores: np.ndarray, threshold: float, per_session: int) -> list[int]:
    """The messages the classifier files (memory/groupacts.py's own rule: the capped scores less the author's
    own news, plus stated rules and decisions)."""
    capped = set(cap_per_session([m.session for m in net.messages], scores, threshold, per_session))
    return [i for i, m in enumerate(net.messages)
            if (i in capped and not own_news(m.text)) or stated(m.text)]


def matched(net: Network, picked: Sequence[int]) -> int:
    """Reference GROUP records the picked messages pair with, one to one, as the scorer pairs them."""
    pred = [MemRecord("GROUP", net.messages[k].text, "group_interaction") for k in picked]
    return len(content_pairs(pred, net.reference))


def _f1(tp: int, n_pred: int, n_ref: int) -> float:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_ref if n_ref else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def choose(nets: Sequence[Network], feats: dict[str, np.ndarray]) -> tuple[float, float, int]:
    """(C, threshold, acts per session) with the best F1 against the reference GROUP records, each network
    scored by a model fitted on the others (leave one network out within ``nets``)."""
    best = (-1.0, C_GRID[0], THRESHOLDS[0], PER_SESSION[0])
    for c in C_GRID:
        held_scores = {h.id: act_scores(fit([n for n in nets if n.id != h.id], feats, c), feats[h.id]) for h in nets}
        for t in THRESHOLDS:
            for k in PER_SESSION:
                picks = {h.id: pick(h, held_scores[h.id], t, k) for h in nets}
                f = _f1(sum(matched(h, picks[h.id]) for h in nets), sum(len(p) for p in picks.values()),
                        sum(len(h.reference) for h in nets))
                if f > best[0]:
                    best = (f, c, t, k)
    return best[1], best[2], best[3]


def export(f: Fitted, threshold: float, per_session: int, c: float, embedder: Embedder,
           trained_on: Sequence[str], validation: dict) -> dict:
    r = lambda v: [round(float(a), 5) for a in v]  # noqa: E731
    n = f.mean.shape[0]
    kind_w, kind_b = [[0.0] * n for _ in KINDS], [-30.0] * len(KINDS)
    if f.kind is not None:
        km: Any = f.kind
        for j, cls in enumerate(km.classes_):
            # Two classes: sklearn keeps one row (the second class's); the first is its negation.
            sign = 1.0 if len(km.classes_) > 2 or j else -1.0
            row = km.coef_[j] if len(km.classes_) > 2 else sign * km.coef_[0]
            b = km.intercept_[j] if len(km.classes_) > 2 else sign * km.intercept_[0]
            kind_w[KINDS.index(cls)], kind_b[KINDS.index(cls)] = r(row), float(b)
    else:
        kind_b[KINDS.index(f.kind_classes[0] if f.kind_classes else "decision")] = 0.0
    return {"version": 1, "kinds": list(KINDS), "features": f"{EMBEDDER_FAMILY} message vector ({embedder.dim}) + "
            f"{', '.join(CHEAP)}", "embedder": embedder.name, "threshold": threshold,
            "max_per_session": per_session, "C": c, "trained_on": list(trained_on), "validation": validation,
            "mean": r(f.mean), "scale": r(f.scale),
            "act_weights": [0.0] * (n - len(CHEAP)) + r(f.act.coef_[0]),  # type: ignore[attr-defined]
            "act_bias": round(float(f.act.intercept_[0]), 5), "kind_weights": kind_w,  # type: ignore[attr-defined]
            "kind_bias": r(kind_b)}


def train(data: str | Path, reference: str | Path, embedder: Embedder, *, holdout: Sequence[str] = (),
          progress=None) -> tuple[dict, dict]:
    """Fit on every labelled network not in ``holdout``; return (model, leave-networks-out report)."""
    nets = load_networks(data, reference)
    feats = featurize(nets, embedder)
    pool = [n for n in nets if n.id not in set(holdout)]
    per: list[dict] = []
    kinds_right = kinds_total = 0
    for held in pool:  # each network scored by a model that never saw it, its choices made without it too
        rest = [n for n in pool if n.id != held.id]
        c, t, k = choose(rest, feats)
        f = fit(rest, feats, c)
        s = act_scores(f, feats[held.id])
        picked = pick(held, s, t, k)
        gold = {i for i, lbl in enumerate(held.labels) if lbl != "none"}
        if f.kind is not None:
            for i in set(picked) & gold:
                kinds_total += 1
                kinds_right += f.kind.predict(((feats[held.id][i] - f.mean) / f.scale)[None])[0] == held.labels[i]  # type: ignore[attr-defined]
        per.append({"network": held.id, "C": c, "threshold": t, "per_session": k, "messages": len(s),
                    "gold": len(gold), "picked": len(picked), "picked_gold": len(set(picked) & gold),
                    "reference_records": len(held.reference), "reference_matched": matched(held, picked)})
        if progress:
            progress(per[-1])
    tot = {key: sum(p[key] for p in per) for key in ("messages", "gold", "picked", "picked_gold",
                                                     "reference_records", "reference_matched")}
    div = lambda a, b: round(a / b, 4) if b else None  # noqa: E731
    report = {"networks": per, **tot, "message_precision": div(tot["picked_gold"], tot["picked"]),
              "message_recall": div(tot["picked_gold"], tot["gold"]),
              "reference_precision": div(tot["reference_matched"], tot["picked"]),
              "reference_recall": div(tot["reference_matched"], tot["reference_records"]),
              "kind_accuracy_on_true_positives": div(kinds_right, kinds_total),
              "label_counts": {c: sum(lbl == c for n in pool for lbl in n.labels) for c in ("none", *KINDS)}}
    c, t, k = choose(pool, feats)
    model = export(fit(pool, feats, c), t, k, c, embedder, [n.id for n in pool],
                   {key: v for key, v in report.items() if key != "networks"})
    return model, report


def report_markdown(report: dict) -> str:
    from .report import markdown_table

    rows = [[n["network"], n["messages"], n["gold"], n["picked"], n["picked_gold"], n["reference_records"],
             n["reference_matched"], n["C"], n["threshold"], n["per_session"]] for n in report["networks"]]
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    return (markdown_table(["held-out network", "messages", "labelled acts", "picked", "picked right",
                            "reference GROUP records", "matched (>= 0.3)", "C", "threshold", "per session"], rows)
            + f"\n\nmessage level: precision {pct(report['message_precision'])}, recall "
              f"{pct(report['message_recall'])}; against the reference records (extractive quotes, the scorer's "
              f"content match): precision {pct(report['reference_precision'])}, recall "
              f"{pct(report['reference_recall'])}; kind right on true positives "
              f"{pct(report['kind_accuracy_on_true_positives'])}; labels {report['label_counts']}")
