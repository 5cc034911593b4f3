"""Scoring a store's records against a reference writer's output (the SocialMemBench teacher trajectories)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evaluation.speaker_levenshtein import MemRecord
from evaluation.writer_reference import content_pairs, load_reference, reference_files, score_stores
from memory.llm.fake import ScriptedLLM
from memory.records import Records
from memory.records_sync import attach
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import store_acts
from tests.conftest import msg

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "socialmembench-reference" / "trajectories"


def write_reference(path: Path, network: str, heads: list[dict]) -> Path:
    path.write_text(json.dumps({"network_id": network, "transitions": [],
                                "extra_top_level": {"final_state": {"heads": heads}}}), "utf-8")
    return path


def head(owner, source, layer, content, utype="fact"):
    return {"owner": owner, "source": source, "layer": layer, "utype": utype, "content": content, "superseded_by": ""}


@pytest.fixture
def written(tmp_path):
    from memory.store import Store

    store = Store(tmp_path / "net1.db")
    store.ingest([msg(1, "I adopted a grey cat called Pixel last week", author="Alice"),
                  msg(2, "Alice's cat Pixel already rules the flat", author="Bob"),
                  msg(3, "Decision: we meet at the lake on Sunday at 10", author="Alice")])
    records = Records(store)
    attach(store, records)
    store_acts(store, {"3": "decision"})  # the analysis pass read message 3 as a decision: GROUP may rest on it
    out = json.dumps({"actions": [
        {"op": "ADD", "msg": 1, "owner": "Alice", "layer": "per_speaker_core", "utype": "fact"},
        {"op": "ADD", "msg": 2, "owner": "Bob", "layer": "per_speaker_profile", "utype": "fact"},
        {"op": "ADD", "msg": 3, "owner": "GROUP", "layer": "group_interaction", "utype": "decision"}]})
    # Cues off: these tests are about the scorer, so the filings are the scripted model's, through the gate.
    Writer(store, ScriptedLLM([out]), config=WriterConfig(extractive=True, cues=False),
           records=records).run_pending(force=True)
    store.close()
    return tmp_path / "net1.db"


def test_scores_owner_accuracy_coverage_layers(tmp_path, written):
    ref = write_reference(tmp_path / "net1.actions.json", "net1", [
        head("Alice", "Alice", "per_speaker_core", "adopted a grey cat called Pixel last week"),
        head("Alice", "Bob", "per_speaker_profile", "Alice's cat Pixel rules the flat"),
        head("GROUP", "Alice", "group_interaction", "meet at the lake on Sunday at 10", "decision"),
        head("Bob", "Bob", "per_speaker_core", "works night shifts at the port")])
    report = score_stores({"net1": written}, ref, "test")
    j = report.to_json()
    [net] = j["networks"]
    assert net["content_scored"] and net["records"] == 3 and net["reference_records"] == 4
    # Bob's message about Alice's cat is filed by the gate as Alice's profile (proposed as a profile record
    # under Bob himself, so the owner was corrected to the one person it names); the decision is a stated one.
    assert j["content_pairs"] == 3 and j["owner_accuracy_matched"] == 1.0
    assert j["reference_owner_coverage"] == 0.75        # Bob's night shifts were never said
    assert j["layers"]["group_interaction"] == {"precision": 1.0, "recall": 1.0, "matches": 1, "records": 1,
                                                "reference": 1}
    assert j["layers"]["per_speaker_core"]["recall"] == 0.5
    assert net["per_speaker"]["Bob"] == {"records": 0, "reference": 1}
    assert j["speakers_with_no_record"] == 1 and 0 < j["speaker_levenshtein_mean"] < 1


def test_reference_in_another_language_is_not_content_scored(tmp_path, written):
    ref = write_reference(tmp_path / "net1.actions.json", "net1", [
        head("Alice", "Alice", "per_speaker_core", "adoptowała szarego kota o imieniu Pixel w zeszłym tygodniu"),
        head("GROUP", "Alice", "group_interaction", "spotkanie nad jeziorem w niedzielę o dziesiątej", "decision")])
    j = score_stores({"net1": written}, ref, "test").to_json()
    assert j["networks_content_scored"] == 0 and j["networks"][0]["content_scored"] is False
    assert j["reference_all"] == 2 and j["records_all"] == 3            # counts still kept


def test_content_pairs_are_one_to_one_above_threshold():
    pred = [MemRecord("a", "bought a red bike"), MemRecord("b", "bought a red bike yesterday"),
            MemRecord("c", "totally unrelated words here")]
    ref = [MemRecord("a", "bought a red bike yesterday")]
    pairs = content_pairs(pred, ref)
    assert len(pairs) == 1 and pairs[0][0] == 1   # the closer one wins; the rest stay unmatched


@pytest.mark.skipif(not REFERENCE.exists(), reason="shared reference data not present")
def test_loads_the_published_reference():
    files = reference_files(REFERENCE)
    assert len(files) == 10
    layers = Counter(r.layer for f in files.values() for r in load_reference(f).records)
    # The README's totals: 420 ADDs (3 UPDATEs revise three of them in place).
    assert sum(layers.values()) == 420
    assert layers == {"per_speaker_core": 292, "per_speaker_profile": 67, "group_interaction": 57,
                      "group_insight": 4}


def test_owner_disagreements_are_sorted_by_kind(tmp_path, written):
    # Each reference record pairs with one of ours on content but under another owner, for a different reason.
    ref = write_reference(tmp_path / "net1.actions.json", "net1", [
        head("GROUP", "Alice", "group_interaction", "adopted a grey cat called Pixel last week"),  # GROUP
        head("Carol", "Carol", "per_speaker_core", "Alice's cat Pixel already rules the flat"),   # other speaker
        head("Bob", "Alice", "per_speaker_core", "we meet at the lake on Sunday at ten")])       # ours GROUP
    j = score_stores({"net1": written}, ref, "test").to_json()
    assert j["content_pairs"] == 3 and j["owner_accuracy_matched"] == 0.0
    assert j["owner_disagreements"] == {"reference_group": 1, "other_speaker": 1, "ours_group": 1}
    md = score_stores({"net1": written}, ref, "test").to_markdown()
    assert "| the reference files it under GROUP, we under a person | 1 |" in md


def test_disagreement_kind_names_a_profile_choice():
    from evaluation.writer_reference import disagreement_kind

    ours = MemRecord("Bev", "Marcus I saw you limping at the end", "per_speaker_core", "fact", "Bev")
    theirs = MemRecord("Marcus", "Marcus limped at the end of the hike", "per_speaker_profile", "fact", "Bev")
    assert disagreement_kind(ours, theirs) == "reference_named_person"
    assert disagreement_kind(theirs, MemRecord("GROUP", "x", source="Bev")) == "reference_group"
    assert disagreement_kind(MemRecord("GROUP", "x", source="Bev"), ours) == "ours_group"
    assert disagreement_kind(ours, MemRecord("Dani", "saw someone limping", source="Bev")) == "other"
    assert disagreement_kind(theirs, MemRecord("Bev", "saw Marcus limping", source="Bev")) == "ours_named_person"
