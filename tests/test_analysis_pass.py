"""The analysis pass and the group state it files: what is stored, chained, retracted and re-read.

The act and link labels come from a scripted model behind the analysis protocols (tests/_fakes.py), so
these tests are about what the pass does with labels; tests/test_acts.py is about the shipped models.
NER is the real spaCy pipeline.
"""
from __future__ import annotations

import pytest

from memory.analysis.runner import AnalysisPass
from memory.analysis.types import ACT_KINDS, Act
from memory.errors import AnalysisError
from memory.groupstate import GroupState
from memory.models import GROUP, Message, ScopeKey
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store
from tests._fakes import HashEmbedder, ScriptedActs

T0 = 1_750_000_000.0
KEY = ScopeKey("console", "w", "general")
ONE = (KEY.platform, KEY.workspace, KEY.channel)
CHAT = [
    ("jo", "raffle tonight at the hall, tickets are 2 quid"),
    ("sam", "i'll bring the float"),
    ("jo", "quiz night is on the 14th at 7"),
    ("ben", "lol"),
    ("jo", "quiz moved to the 21st, hall is double booked"),
    ("kim", "can we start at 8 instead? kids"),
    ("jo", "fine, 21st at 8 it is"),
    ("ana", "agree, 8 is better"),
]
SCRIPT = {
    "raffle tonight at the hall, tickets are 2 quid": ("plan", GROUP, None),
    "i'll bring the float": ("task", "sam", None),
    "quiz night is on the 14th at 7": ("plan", GROUP, None),
    "quiz moved to the 21st, hall is double booked": ("change", GROUP, ("changes", "quiz night is on the 14th at 7")),
    "can we start at 8 instead? kids": ("question", GROUP, None),
    "fine, 21st at 8 it is": ("change", GROUP, ("changes", "quiz moved to the 21st, hall is double booked")),
    "agree, 8 is better": ("chatter", None, ("confirms", "fine, 21st at 8 it is")),
}


def msgs(chat=CHAT, start=0):
    return [Message(*ONE, f"m{start + i}", who, who.capitalize(), text, T0 + (start + i) * 60)
            for i, (who, text) in enumerate(chat)]


@pytest.fixture
def world(tmp_path):
    store = Store(tmp_path / "a.db", embedder=HashEmbedder())
    records = Records(store)
    attach(store, records)
    model = ScriptedActs(SCRIPT)
    yield store, records, AnalysisPass(store, records, model, model), model
    store.close()


def test_every_message_is_analysed_once_with_its_entities_and_act(world):
    store, records, analysis, _ = world
    store.ingest(msgs())
    sid = store.scope_id(KEY)
    assert store.pending_analysis([sid]) == len(CHAT)
    assert analysis.run() == len(CHAT)
    assert store.pending_analysis() == 0 and analysis.run() == 0  # nothing is read twice
    by_text = {m.text: m.id for m in store.recent(sid, 50)}
    got = store.analyses(by_text.values())
    plan = got[by_text["quiz night is on the 14th at 7"]]
    assert plan.act.kind == "plan" and {e.label for e in plan.parsed.entities} & {"DATE", "TIME"}
    assert got[by_text["lol"]].act.kind == "chatter"
    change = got[by_text["quiz moved to the 21st, hall is double booked"]]
    assert change.link is not None and change.link.kind == "changes"
    assert change.link.target == by_text["quiz night is on the 14th at 7"]
    assert store.parsed([by_text["lol"]])[by_text["lol"]].entities == ()


def test_changes_chain_the_plan_and_the_head_is_what_holds_now(world):
    store, records, analysis, _ = world
    store.ingest(msgs())
    analysis.run()
    state = GroupState(records)
    sid = store.scope_id(KEY)
    heads = {h.content: h for h in state.heads([sid])}
    assert "quiz night is on the 14th at 7" not in heads
    assert "quiz moved to the 21st, hall is double booked" not in heads
    now = heads["fine, 21st at 8 it is"]
    chain = state.chain(now.id)
    assert [r.content for r in chain] == ["quiz night is on the 14th at 7",
                                          "quiz moved to the 21st, hall is double booked", "fine, 21st at 8 it is"]
    assert all(r.owner == GROUP and r.utype == "plan" for r in chain)
    # Agreeing to the head adds the agreement to its sources; no new node.
    agree = store.find(KEY, "m7")
    assert agree.id in chain[-1].sources and len(chain) == 3
    task = heads["i'll bring the float"]
    assert task.owner == "sam" and task.utype == "task" and task.source == "sam"
    assert "lol" not in heads and "can we start at 8 instead? kids" not in heads


def test_a_batch_reads_acts_filed_by_earlier_batches(world):
    store, records, analysis, _ = world
    store.ingest(msgs()[:3])
    analysis.run()
    store.ingest(msgs(CHAT[3:], start=3))
    analysis.run(batch_size=2)  # later messages come in batches of two
    heads = [h.content for h in GroupState(records).heads([store.scope_id(KEY)])]
    assert "fine, 21st at 8 it is" in heads and "quiz night is on the 14th at 7" not in heads


def test_an_edit_is_read_again_and_filed_anew(world):
    store, records, analysis, model = world
    store.ingest(msgs())
    analysis.run()
    model.script["fine, 22nd at 8 it is"] = ("change", GROUP, ("changes", "quiz moved to the 21st, hall is double "
                                                                          "booked"))
    assert store.edit(KEY, "m6", "fine, 22nd at 8 it is")
    sid = store.scope_id(KEY)
    assert store.pending_analysis([sid]) == 1
    heads = [h.content for h in GroupState(records).heads([sid])]
    assert "fine, 21st at 8 it is" not in heads  # its record went with the old text
    assert "quiz moved to the 21st, hall is double booked" in heads  # the chain is handed back
    analysis.run()
    heads = [h.content for h in GroupState(records).heads([sid])]
    assert "fine, 22nd at 8 it is" in heads and "quiz moved to the 21st, hall is double booked" not in heads


def test_a_deleted_message_takes_its_analysis_and_its_record(world):
    store, records, analysis, _ = world
    store.ingest(msgs())
    analysis.run()
    gone = store.find(KEY, "m1")
    store.delete(KEY, "m1")
    assert store.analyses([gone.id]) == {}
    heads = [h.content for h in GroupState(records).heads([store.scope_id(KEY)])]
    assert "i'll bring the float" not in heads


def test_bot_traffic_is_never_analysed(world):
    store, _, analysis, _ = world
    store.ingest([Message(*ONE, "q1", "jo", "Jo", "@chorus when is the quiz?", T0, to_bot=True)])
    assert store.pending_analysis() == 0 and analysis.run() == 0


def test_malformed_model_output_fails_that_message_alone_and_stores_nothing_half_way(world, caplog):
    store, records, _, model = world

    class Broken(ScriptedActs):
        def acts(self, turns, history, people):
            out = super().acts(turns, history, people)
            return [Act("gossip", 0.9, a.probs, a.owner, a.topic) if t.message.text == "lol" else a
                    for t, a in zip(turns, out)]

    broken = Broken(SCRIPT)
    store.ingest(msgs())
    AnalysisPass(store, records, broken, broken).run()
    lol = store.find(KEY, "m3")
    assert store.failed_analysis() == 1 and store.analyses([lol.id]) == {}
    assert "unknown act kind 'gossip'" in caplog.text
    assert len(store.analyses([m.id for m in store.recent(store.scope_id(KEY), 50)])) == len(CHAT) - 1
    assert store.retry_failed_analysis() == 1 and store.pending_analysis() == 1


def test_model_contract_is_checked(world):
    store, records, analysis, model = world
    store.ingest(msgs()[:2])
    batch = store.analysis_batch(10)

    class Stranger(ScriptedActs):
        def acts(self, turns, history, people):
            probs = tuple(1 / len(ACT_KINDS) for _ in ACT_KINDS)
            return [Act("task", 0.5, probs, "zelda", "x") for _ in turns]

    s = Stranger(SCRIPT)
    with pytest.raises(AnalysisError, match="no member"):
        AnalysisPass(store, records, s, s).analyse(batch)
    assert store.pending_analysis() == 2  # nothing stored
