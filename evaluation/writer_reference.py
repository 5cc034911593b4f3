"""Score a store's committed records against a reference writer's output.

The reference is SpeakerMem-R1's teacher trajectories for SocialMemBench (one
``*.actions.json`` per network, its ``final_state.heads`` being the memory the
teacher ended with). Reported per network and overall:

* SpeakerLevenshtein (evaluation/speaker_levenshtein.py, the paper's Eqs. 7, 13-16);
* owner accuracy: records are paired one-to-one on content alone (similarity
  >= ``CONTENT_MATCH``, Eq. 13's soft match); of those pairs, the share whose owner
  is the reference's owner; and of the reference records, the share whose owner
  holds a record with matching content ("owner coverage");
* why the owners of content-matched pairs disagree, by kind (``disagreement_kind``), so a change
  to the filing rules can be read against the kind of case it targets;
* per-layer precision and recall (one-to-one content pairs within a layer);
* records per speaker and the speakers left with none, on both sides.

Content scores skip a network whose reference memory is not written in the chat's
language (the teacher wrote two networks in Polish and Italian): detected by how
few of the reference's words occur anywhere in the chat. Counts use every network.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memory.db import select_into
from memory.store import Store

from .report import markdown_table
from .speaker_levenshtein import MemRecord, hungarian, norm_name, pair_similarity, speaker_levenshtein, tokens

CONTENT_MATCH = 0.3          # the matching threshold for "same content"
# Share of the reference's words found in the chat below which its memory is taken to be in another
# language. English reference memory reuses most chat words; a translated one keeps only names.
SAME_LANGUAGE = 0.4
LAYERS = ("per_speaker_core", "per_speaker_profile", "group_interaction", "group_insight")


@dataclass
class Reference:
    network: str
    records: list[MemRecord]


def load_reference(path: str | Path) -> Reference:
    """One reference file: its final heads (UPDATEs already applied by the teacher's state)."""
    data = json.loads(Path(path).read_text("utf-8"))
    network = str(data.get("network_id") or Path(path).name.split(".")[0])
    heads = (data.get("extra_top_level") or {}).get("final_state", {}).get("heads")
    if heads is None:
        heads = _replay(data.get("transitions") or [])
    recs = [MemRecord(str(h["owner"]), str(h["content"]), str(h.get("layer", "")), str(h.get("utype", "")),
                      str(h.get("source", ""))) for h in heads if not h.get("superseded_by")]
    return Reference(network.removeprefix("social_"), recs)


def _replay(transitions: list[dict]) -> list[dict]:
    """Heads from the actions when a file carries no final state (UPDATE inherits its entry's coordinates)."""
    heads: dict[str, dict] = {}
    n = 0
    for t in transitions:
        for a in t.get("actions") or []:
            if a.get("action") == "ADD":
                n += 1
                heads[f"a{n}"] = dict(a)
            elif a.get("action") == "UPDATE" and a.get("entry_id") in heads:
                heads[a["entry_id"]] = {**heads[a["entry_id"]], "content": a.get("content", "")}
    return list(heads.values())


def store_records(path: str | Path) -> tuple[list[MemRecord], list[str], list[str]]:
    """A store's active head records with display names, its speakers, and its message texts."""
    store = Store(path)
    try:
        with store.read() as conn:
            names = dict(conn.execute("SELECT person_id, display_name FROM people").fetchall())
            bots = {r[0] for r in conn.execute("SELECT person_id FROM people WHERE is_bot = 1")}
            recs = select_into(conn, MemRecord, "SELECT owner, content, layer, utype, source, session, ts AS time "
                               "FROM records WHERE status = 'active' AND superseded_by IS NULL "
                               "AND layer != 'persona_insight'",
                               convert={"owner": lambda p: names.get(p, p), "source": lambda p: names.get(p, p)})
            texts = [r[0] for r in conn.execute("SELECT text FROM messages WHERE deleted = 0")]
    finally:
        store.close()
    speakers = sorted({n for pid, n in names.items() if pid not in bots})
    return recs, speakers, texts


def same_language(ref: Sequence[MemRecord], chat_texts: Iterable[str]) -> float:
    """Share of the reference memory's word tokens that occur in the chat."""
    vocab = {t for text in chat_texts for t in tokens(text)}
    words = [t for r in ref for t in tokens(r.content) if not t.isdigit()]
    return sum(t in vocab for t in words) / len(words) if words else 1.0


def content_pairs(pred: Sequence[MemRecord], ref: Sequence[MemRecord],
                  threshold: float = CONTENT_MATCH) -> list[tuple[int, int, float]]:
    """One-to-one pairs (pred index, ref index, similarity) on content alone, best total first."""
    if not pred or not ref:
        return []
    k = np.array([[pair_similarity(p.content, r.content) for r in ref] for p in pred])
    k[k < threshold] = 0.0
    return [(i, j, float(k[i, j])) for i, j in hungarian(-k) if k[i, j] > 0]


DISAGREEMENTS = {
    "reference_group": "the reference files it under GROUP, we under a person",
    "ours_group": "we file it under GROUP, the reference under a person",
    "reference_named_person": "the reference files it under a person our record's message names (a profile)",
    "ours_named_person": "we file it under a person the message names (a profile), the reference under its author",
    "other_speaker": "the paired reference record rests on another speaker's words",
    "other": "other (same speaker, the reference owner not named)",
}


def disagreement_kind(pred: MemRecord, ref: MemRecord) -> str:
    """Why a content-matched pair's owners differ, as one of ``DISAGREEMENTS``' keys.

    Content-only pairing can join records of two different messages when their words overlap; those
    pairs ("other_speaker") say nothing about filing. The rest are filing choices the two writers made
    differently on the same words.
    """
    if norm_name(ref.owner) == "group":
        return "reference_group"
    if norm_name(pred.owner) == "group":
        return "ours_group"
    words = set(tokens(pred.content))
    owner = tokens(ref.owner)
    if owner and all(t in words for t in owner):
        return "reference_named_person"
    if norm_name(ref.source) != norm_name(pred.source):
        return "other_speaker"
    if norm_name(ref.owner) == norm_name(ref.source) and norm_name(pred.owner) != norm_name(pred.source):
        return "ours_named_person"
    return "other"


@dataclass
class NetworkScore:
    network: str
    content_scored: bool
    language_overlap: float
    n_pred: int
    n_ref: int
    speaker_levenshtein: float | None = None
    matched: int = 0
    owner_agree: int = 0
    ref_owner_covered: int = 0
    layer_tp: Counter = field(default_factory=Counter)
    pred_layers: Counter = field(default_factory=Counter)
    ref_layers: Counter = field(default_factory=Counter)
    pred_utypes: Counter = field(default_factory=Counter)
    ref_utypes: Counter = field(default_factory=Counter)
    per_speaker: dict[str, tuple[int, int]] = field(default_factory=dict)  # speaker -> (pred, ref)
    disagreements: Counter = field(default_factory=Counter)

    def to_json(self) -> dict:
        return {"network": self.network, "content_scored": self.content_scored,
                "language_overlap": round(self.language_overlap, 3), "records": self.n_pred,
                "reference_records": self.n_ref, "speaker_levenshtein": self.speaker_levenshtein,
                "content_pairs": self.matched, "owner_agree": self.owner_agree,
                "reference_owner_covered": self.ref_owner_covered, "layer_matches": dict(self.layer_tp),
                "layers": dict(self.pred_layers), "reference_layers": dict(self.ref_layers),
                "utypes": dict(self.pred_utypes), "reference_utypes": dict(self.ref_utypes),
                "per_speaker": {k: {"records": p, "reference": r} for k, (p, r) in self.per_speaker.items()},
                "owner_disagreements": dict(self.disagreements)}


def score_network(network: str, pred: list[MemRecord], ref: list[MemRecord], speakers: Sequence[str],
                  chat_texts: Sequence[str]) -> NetworkScore:
    overlap = same_language(ref, chat_texts)
    s = NetworkScore(network, overlap >= SAME_LANGUAGE, overlap, len(pred), len(ref))
    s.pred_layers, s.ref_layers = Counter(r.layer for r in pred), Counter(r.layer for r in ref)
    s.pred_utypes, s.ref_utypes = Counter(r.utype for r in pred), Counter(r.utype for r in ref)
    pc, rc = Counter(norm_name(r.owner) for r in pred), Counter(norm_name(r.owner) for r in ref)
    s.per_speaker = {sp: (pc.get(norm_name(sp), 0), rc.get(norm_name(sp), 0)) for sp in speakers}
    if not s.content_scored:
        return s
    s.speaker_levenshtein = round(speaker_levenshtein(pred, ref).score, 4)
    pairs = content_pairs(pred, ref)
    s.matched = len(pairs)
    for i, j, _ in pairs:
        if norm_name(pred[i].owner) == norm_name(ref[j].owner):
            s.owner_agree += 1
        else:
            s.disagreements[disagreement_kind(pred[i], ref[j])] += 1
    for r in ref:  # does the reference owner hold a record with this content?
        mine = [p for p in pred if norm_name(p.owner) == norm_name(r.owner)]
        s.ref_owner_covered += any(pair_similarity(p.content, r.content) >= CONTENT_MATCH for p in mine)
    for layer in LAYERS:
        lp = [p for p in pred if p.layer == layer]
        lr = [r for r in ref if r.layer == layer]
        s.layer_tp[layer] = len(content_pairs(lp, lr))
    return s


@dataclass
class ReferenceReport:
    label: str
    networks: list[NetworkScore] = field(default_factory=list)

    def _sum(self, scored_only: bool, fn) -> int:
        return sum(fn(n) for n in self.networks if n.content_scored or not scored_only)

    def to_json(self) -> dict:
        scored = [n for n in self.networks if n.content_scored]
        matched = sum(n.matched for n in scored)
        ref_n = sum(n.n_ref for n in scored)
        layers = {}
        for layer in LAYERS:
            tp = sum(n.layer_tp[layer] for n in scored)
            np_ = sum(n.pred_layers[layer] for n in scored)
            nr = sum(n.ref_layers[layer] for n in scored)
            layers[layer] = {"precision": round(tp / np_, 4) if np_ else None,
                             "recall": round(tp / nr, 4) if nr else None, "matches": tp,
                             "records": np_, "reference": nr}
        speakers = [(n.network, sp, p, r) for n in self.networks for sp, (p, r) in n.per_speaker.items()]
        return {
            "label": self.label, "networks_content_scored": len(scored), "networks_counted": len(self.networks),
            "speaker_levenshtein_mean": round(sum(n.speaker_levenshtein or 0 for n in scored) / len(scored), 4)
            if scored else None,
            "owner_accuracy_matched": round(sum(n.owner_agree for n in scored) / matched, 4) if matched else None,
            "reference_owner_coverage": round(sum(n.ref_owner_covered for n in scored) / ref_n, 4) if ref_n else None,
            "content_pairs": matched, "records_scored": sum(n.n_pred for n in scored), "reference_scored": ref_n,
            "layers": layers,
            "records_all": sum(n.n_pred for n in self.networks), "reference_all": sum(n.n_ref for n in self.networks),
            "layer_counts_all": dict(sum((n.pred_layers for n in self.networks), Counter())),
            "reference_layer_counts_all": dict(sum((n.ref_layers for n in self.networks), Counter())),
            "utype_counts_all": dict(sum((n.pred_utypes for n in self.networks), Counter())),
            "reference_utype_counts_all": dict(sum((n.ref_utypes for n in self.networks), Counter())),
            "owner_disagreements": dict(sum((n.disagreements for n in scored), Counter())),
            "speakers": len(speakers), "speakers_with_no_record": sum(p == 0 for *_, p, _r in speakers),
            "speakers_with_no_reference_record": sum(r == 0 for *_, r in speakers),
            "networks": [n.to_json() for n in self.networks]}

    def to_markdown(self) -> str:
        j = self.to_json()
        pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        summary = markdown_table(["measure", "value"], [
            ["networks (content scored / counted)", f"{j['networks_content_scored']} / {j['networks_counted']}"],
            ["SpeakerLevenshtein (mean over networks)", _f4(j["speaker_levenshtein_mean"])],
            ["owner accuracy of content-matched pairs", f"{pct(j['owner_accuracy_matched'])} "
                                                        f"({j['content_pairs']} pairs)"],
            ["reference records whose owner has a matching record", pct(j["reference_owner_coverage"])],
            ["records / reference records (scored networks)", f"{j['records_scored']} / {j['reference_scored']}"],
            ["records / reference records (all networks)", f"{j['records_all']} / {j['reference_all']}"],
            ["speakers with no record (reference: none)", f"{j['speakers_with_no_record']} of {j['speakers']} "
                                                          f"({j['speakers_with_no_reference_record']})"]])
        layers = markdown_table(["layer", "precision", "recall", "records", "reference", "records (all 10)",
                                 "reference (all 10)"],
                                [[k, pct(v["precision"]), pct(v["recall"]), v["records"], v["reference"],
                                  j["layer_counts_all"].get(k, 0), j["reference_layer_counts_all"].get(k, 0)]
                                 for k, v in j["layers"].items()])
        kinds = j["owner_disagreements"]
        why = markdown_table(["owners differ because", "pairs"],
                             [[DISAGREEMENTS[k], kinds.get(k, 0)] for k in DISAGREEMENTS]) if j["content_pairs"] else ""
        per = markdown_table(["network", "content scored", "SL", "pairs", "owner agree", "owner covered",
                              "records", "reference"],
                             [[n.network, "yes" if n.content_scored else f"no ({n.language_overlap:.2f})",
                               _f4(n.speaker_levenshtein), n.matched,
                               n.owner_agree, n.ref_owner_covered, n.n_pred, n.n_ref] for n in self.networks])
        return f"### Writer vs reference: {self.label}\n\n{summary}\n\n{why}\n\n{layers}\n\n{per}"


def _f4(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def reference_files(path: str | Path) -> dict[str, Path]:
    """Network id -> reference file, for a folder of ``*.actions.json`` or one file."""
    p = Path(path)
    files = sorted(p.glob("*.actions.json")) if p.is_dir() else [p]
    return {load_reference(f).network: f for f in files}


def score_stores(stores: dict[str, Path], reference: str | Path, label: str) -> ReferenceReport:
    """Score each store (network id -> store file) against the reference file of that network."""
    refs = reference_files(reference)
    report = ReferenceReport(label)
    for network, store_path in sorted(stores.items()):
        ref_path = refs.get(network) or (next(iter(refs.values())) if len(refs) == 1 else None)
        if ref_path is None:
            continue
        pred, speakers, texts = store_records(store_path)
        ref = load_reference(ref_path)
        report.networks.append(score_network(network, pred, ref.records, speakers, texts))
    return report


def stores_in(path: str | Path) -> dict[str, Path]:
    """Network id -> store, for a folder of ``<network>.db`` files or a single store file."""
    p = Path(path)
    if p.is_dir():
        return {f.stem: f for f in sorted(p.glob("*.db"))}
    return {p.stem: p}


__all__ = ["CONTENT_MATCH", "DISAGREEMENTS", "disagreement_kind", "ReferenceReport", "load_reference",
           "score_network", "score_stores", "stores_in", "content_pairs"]
