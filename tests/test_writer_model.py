"""The writer with the real shipped model: outputs parse, every committed record re-verifies,
and chat that tries to steer the writer never grounds a committed record."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.writer import reverify_store
from memory.datasets import load_dataset
from memory.datasets.jsonl import read_jsonl
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store
from memory.writer.grounding import steering_reason
from memory.writer.writer import Writer, WriterConfig
from tests._shared import real_dataset

pytestmark = pytest.mark.model
CORPUS = Path(__file__).with_name("data") / "writer_injection_chat.jsonl"


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by scripts/setup.sh")
    from memory.llm.factory import load_llm

    model = load_llm("llama", None, n_ctx=4096)
    yield model
    model.close()


def run_writer(store: Store, llm, windows: int) -> list:
    records = Records(store)
    attach(store, records)
    writer = Writer(store, llm, config=WriterConfig(extractive=True, max_new_tokens=700), records=records,
                    clock=lambda: 2_000_000_000.0)
    return writer.run_pending(force=True, max_windows=windows)


def test_real_model_windows_parse_and_records_reverify(tmp_path, llm, embedder):
    conv = real_dataset("socialmem")[0]
    store = Store(tmp_path / "w.db", embedder=embedder)
    store.ingest(conv.messages)
    results = run_writer(store, llm, 2)
    assert len(results) == 2 and all(r.status == "committed" for r in results)
    assert sum(r.parsed for r in results) >= 1
    checked, failing = reverify_store(store, 0.5)
    assert failing == []
    with store.read() as conn:
        runs = conn.execute("SELECT raw_output, accepted, rejected FROM writer_runs").fetchall()
    for raw, _accepted, rej in runs:
        assert raw.startswith('{"actions"')
        for r in json.loads(rej):
            assert r["reason"]  # every rejection says why
    store.close()


def test_real_model_cannot_be_steered_by_chat(tmp_path, llm):
    store = Store(tmp_path / "inj.db")
    store.ingest(read_jsonl(CORPUS))
    run_writer(store, llm, 2)
    with store.read() as conn:
        rows = conn.execute("SELECT r.content, m.text FROM records r JOIN record_sources rs ON rs.record_id = r.id "
                            "JOIN messages m ON m.id = rs.message_id WHERE r.status = 'active'").fetchall()
    for content, source_text in rows:
        assert steering_reason(source_text) is None, (content, source_text)
        assert "stole" not in content.lower() and "thief" not in content.lower()
    checked, failing = reverify_store(store, 0.5)
    assert failing == []
    store.close()


def test_real_model_files_the_demo_chat_right(tmp_path, llm, embedder):
    """The demo chat through the shipped analysis models and writer model (extractive, as configured for it)
    and the cue proposer, in the bot's order: the analysis pass files the group's state first."""
    from memory.analysis.runner import AnalysisPass
    from memory.analysis.shipped import shipped_models
    from memory.records import GROUP
    from memory.writer.insights import Persona

    [conv] = load_dataset("jsonl", Path(__file__).resolve().parents[1] / "bot" / "demo" / "demo.jsonl")
    store = Store(tmp_path / "demo.db", embedder=embedder)
    store.ingest(conv.messages, embed=True)
    records = Records(store)
    attach(store, records)
    AnalysisPass(store, records, *shipped_models()).run()
    writer = Writer(store, llm, config=WriterConfig(extractive=True, max_new_tokens=700), records=records,
                    persona=Persona("Chorus", "the team's memory", "warm", "plans and who does what"),
                    clock=lambda: 2_000_000_000.0)
    results = writer.run_pending(force=True)
    assert results and all(r.status == "committed" for r in results)
    sid = store.scopes()[0].id
    heads = records.heads([sid])
    by_id = {m.id: m for m in store.messages(list({i for r in heads
                                                    for i in records.get([r.id], with_sources=True)[0].sources}))}
    names = {p.person_id: p.display_name for p in store.roster(sid)}
    facts = [r for r in heads if r.layer != "persona_insight"]
    for r in facts:                                   # 0 misattributed records
        [src] = records.get([r.id], with_sources=True)[0].sources
        m = by_id[src]
        if r.layer == "per_speaker_core":
            assert r.owner == m.author_id, (r.content, names.get(r.owner))
        elif r.layer == "per_speaker_profile":
            assert r.owner != m.author_id and names[r.owner].casefold() in m.text.casefold()
    sources = {r.id: by_id[records.get([r.id], with_sources=True)[0].sources[0]].text for r in facts}
    group = {sources[r.id][:18] for r in facts if r.owner == GROUP}
    assert {"Decision: pizza by", "Rule for the night"} <= group
    texts = [sources[r.id] for r in facts]
    assert len(texts) == len(set(texts))              # no message filed twice
    for r in heads:
        if r.layer == "persona_insight":              # every insight rests on a committed fact
            cited = records.get([r.id], with_sources=True)[0]
            assert cited.sources and set(cited.sources) <= {i for f in facts
                                                            for i in records.get([f.id], with_sources=True)[0].sources}
