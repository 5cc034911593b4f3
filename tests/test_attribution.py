"""Attribution in the gate and the cue proposer, on the demo chat and small hostile windows (scripted model)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.analysis.runner import AnalysisPass
from memory.datasets import load_dataset
from memory.llm.fake import ScriptedLLM
from memory.records import GROUP, Records
from memory.records_sync import attach
from memory.writer.acts import GroupAct
from memory.writer.cues import Cue, People, changes, classify, speaks_for_group
from memory.writer.insights import Persona
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import KeywordActs, ScriptedActs
from tests.conftest import msg

DEMO = Path(__file__).resolve().parents[1] / "bot" / "demo" / "demo.jsonl"
PERSONA = Persona("Chorus", "the team's memory", "warm", "who does what and what the group decided")


def actions(*items: dict) -> str:
    return json.dumps({"actions": list(items)})


def demo_store(store):
    [conv] = load_dataset("jsonl", DEMO)
    store.ingest(conv.messages)
    return store


def writer(store, responses, *, persona=None, **cfg):
    records = Records(store)
    attach(store, records)
    return Writer(store, ScriptedLLM(responses), config=WriterConfig(**cfg), records=records, persona=persona,
                  clock=lambda: 2_000_000_000.0)


def heads_by_text(w, store):
    names = {p.person_id: p.display_name for p in store.roster(store.scopes()[0].id)}
    out = {}
    for r in w.records.heads([store.scopes()[0].id]):
        sources = w.records.get([r.id], with_sources=True)[0].sources
        assert len(sources) == 1 or r.layer == "persona_insight"   # an insight rests on every fact it cites
        for m in store.messages(sources):
            out.setdefault(m.text, []).append((r, names.get(r.owner, r.owner), m))
    return out


def rejections(store) -> list[dict]:
    with store.read() as conn:
        return [x for (rej,) in conn.execute("SELECT rejected FROM writer_runs") for x in json.loads(rej)]


# The filings the issue saw the landed writer commit on the demo chat (extractive: msg N + filing). The demo
# is three sessions (days apart), so three windows: messages 1-10, 11-12 and 13-14, numbered from 1 in each.
BAD_FIRST = actions(
    {"op": "ADD", "msg": 2, "owner": "GROUP", "layer": "group_interaction", "utype": "stance"})  # one vote
BAD_THIRD = actions(
    {"op": "ADD", "msg": 1, "owner": "Maya", "layer": "per_speaker_core", "utype": "fact"})   # Sam's words
BAD_SECOND = actions(
    {"op": "ADD", "msg": 1, "owner": "Maya", "layer": "per_speaker_core", "utype": "fact"},   # Priya's words
    {"op": "ADD", "msg": 1, "owner": "Leo", "layer": "per_speaker_core", "utype": "fact"})    # twice
BAD_THIRD_ABSTRACTIVE = actions(
    {"op": "ADD", "msg": 1, "owner": "Maya", "source": "Sam", "layer": "per_speaker_core", "utype": "fact",
     "content": "the club house is locked, Leo has the spare key now"})
BAD_SECOND_ABSTRACTIVE = actions(
    {"op": "ADD", "msg": 1, "owner": "Maya", "source": "Priya", "layer": "per_speaker_core", "utype": "fact",
     "content": "physio moved to Friday evening, might be an hour late"},
    {"op": "ADD", "msg": 1, "owner": "Leo", "source": "Priya", "layer": "per_speaker_core", "utype": "fact",
     "content": "physio moved to Friday evening"})
def bad_insights(prompt: str) -> str:
    """Insights citing the facts listed for the decision and Priya's vote (F numbers depend on what was accepted)."""
    f = next(line.split()[0] for line in prompt.splitlines() if "Decision: pizza" in line)
    g = next(line.split()[0] for line in prompt.splitlines() if "Pizza works for me" in line)
    return json.dumps({"insights": [
        {"content": "I think pizza by the river on Friday the 14th suits me", "cites": [f]},
        {"content": "Pizza by the river, Friday the 14th at 7pm", "cites": [f]},
        {"content": "Pizza by the river on Friday the 14th works, they do a great mushroom one", "cites": [f, g]}]})


NO_INSIGHTS = json.dumps({"insights": []})


# The demo chat's acts as the analysis pass reads them (scripted here: this test is about the writer's filing).
DEMO_ACTS = {
    "Decision: pizza by the river, Friday the 14th at 7pm. I'll book the big table.": ("decision", GROUP, None),
    "I can bring the trophies from the club house.": ("task", "sam", None),
    "Rule for the night: no talking about work, anyone who does buys a round.": ("rule", GROUP, None),
    "Yes I have the key, I'll pick up the trophies on Thursday.": (
        "change", "leo", ("changes", "I can bring the trophies from the club house.")),
}


@pytest.mark.parametrize("extractive", [True, False])
def test_demo_chat_filed_right(store, extractive):
    demo_store(store)
    second, third = (BAD_SECOND, BAD_THIRD) if extractive else (BAD_SECOND_ABSTRACTIVE, BAD_THIRD_ABSTRACTIVE)
    w = writer(store, [BAD_FIRST, bad_insights, second, NO_INSIGHTS, third, NO_INSIGHTS], persona=PERSONA,
               extractive=extractive,
               window_messages=25, after_analysis=True)
    labels = ScriptedActs(DEMO_ACTS)
    AnalysisPass(store, w.records, labels, labels).run()  # the group state first, as the bot does
    results = w.run_pending(force=True)
    assert [r.status for r in results] == ["committed"] * 3
    by_text = heads_by_text(w, store)
    # 0 misattributed: every core record's owner wrote its message; every profile record's owner is named in it.
    for text, recs in by_text.items():
        for rec, owner_name, m in recs:
            if rec.layer == "per_speaker_core":
                assert rec.owner == m.author_id, (text, owner_name)
            elif rec.layer == "per_speaker_profile":
                assert rec.owner != m.author_id and owner_name.casefold() in m.text.casefold(), (text, owner_name)
    physio = next(t for t in by_text if "physio" in t)
    facts = [r for r, _, _ in by_text[physio] if r.layer != "persona_insight"]
    assert len(facts) == 1 and facts[0].owner == by_text[physio][0][2].author_id   # once, under its author
    decision = next(t for t in by_text if t.startswith("Decision: pizza"))
    rule = next(t for t in by_text if t.startswith("Rule for the night"))
    for text, utype in ((decision, "decision"), (rule, "norm")):
        recs = [(r, m) for r, _, m in by_text[text] if r.owner == GROUP and r.layer == "group_interaction"
                and r.utype == utype]
        assert recs, f"{text!r} not a GROUP {utype}"
        assert recs[0][1].text == text          # its message is the provenance
    key = next(t for t in by_text if "spare key" in t)
    filed = {(n, r.layer) for r, n, _ in by_text[key] if r.layer != "persona_insight"}
    # Extractive: the cue files "Leo has the spare key" as Leo's profile; abstractive: the model's record comes
    # first and its owner is corrected to Sam, who said it. Never Maya's.
    assert filed == ({("Leo", "per_speaker_profile")} if extractive else {("Sam", "per_speaker_core")})
    # A later confirmation of the booking does not overwrite the decision: the decision head is unchanged.
    with store.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM records WHERE superseded_by IS NOT NULL AND owner = 'GROUP'"
                            ).fetchone()[0] == 0
    # The self-talk insight is rejected with its reason, and so is a quote of one fact; the one kept says what
    # two facts say together, every word of it in them.
    insights = {r.id: r for recs in by_text.values() for r, _, _ in recs if r.layer == "persona_insight"}
    assert [r.content for r in insights.values()] == [
        "Pizza by the river on Friday the 14th works, they do a great mushroom one"]
    rej = rejections(store)
    by_content = {x["action"].get("content"): x["reason"] for x in rej if isinstance(x["action"], dict)}
    assert "talking about itself" in by_content["I think pizza by the river on Friday the 14th suits me"]
    assert "quotes one fact" in by_content["Pizza by the river, Friday the 14th at 7pm"]
    reasons = " | ".join(x["reason"] for x in rej)
    # Leo's vote proposed as a GROUP record (extractive); abstractively the same action lacks its content.
    assert ("speaks for the group" if extractive else "content is missing") in reasons


def test_core_owner_corrected_and_recorded(store):
    store.ingest([msg(1, "I started night shifts at the bakery", author="Alice"), msg(2, "wow", author="Bob")])
    w = writer(store, [actions({"op": "ADD", "msg": 1, "owner": "Bob", "source": "Alice", "layer": "per_speaker_core",
                                "utype": "fact", "content": "started night shifts at the bakery"})], cues=False)
    [res] = w.run_pending(force=True)
    [rec] = w.records.heads([store.scopes()[0].id])
    assert rec.owner == "alice" and rec.layer == "per_speaker_core"
    assert any("owner Bob -> Alice" in c for c in rec.verification["corrected"])


def test_profile_must_refer_to_its_owner(store):
    store.ingest([msg(1, "Carol finally got her pilot licence", author="Alice"), msg(2, "nice one", author="Bob"),
                  msg(3, "thanks!", author="Carol")])
    w = writer(store, [actions(
        {"op": "ADD", "msg": 1, "owner": "Bob", "source": "Alice", "layer": "per_speaker_profile", "utype": "fact",
         "content": "got a pilot licence"},      # Bob is not who the message is about: corrected to Carol
        {"op": "ADD", "msg": 1, "owner": "Carol", "source": "Alice", "layer": "per_speaker_core", "utype": "fact",
         "content": "got her pilot licence"})], cues=False)   # about Carol, by Alice: a repeat now
    [res] = w.run_pending(force=True)
    [rec] = w.records.heads([store.scopes()[0].id])
    assert (rec.owner, rec.layer, rec.source) == ("carol", "per_speaker_profile", "alice")
    assert res.rejected == 1 and "repeats an earlier action" in rejections(store)[0]["reason"]


def moving_to_leeds(store, owner: str, layer: str):
    """Alice says Dave and Erin are moving; the model files it under ``owner`` in ``layer``. The window's result."""
    store.ingest([msg(1, "Dave and Erin are moving to Leeds", author="Alice"), msg(2, "ok", author="Dave"),
                  msg(3, "ok", author="Erin"), msg(4, "hm", author="Bob")])
    w = writer(store, [actions({"op": "ADD", "msg": 1, "owner": owner, "source": "Alice", "layer": layer,
                                "utype": "fact", "content": "moving to Leeds"})], cues=False)
    [res] = w.run_pending(force=True)
    return w, res


def test_core_for_someone_named_is_refiled_under_the_author(store):
    w, _ = moving_to_leeds(store, "Dave", "per_speaker_core")
    [rec] = w.records.heads([store.scopes()[0].id])
    assert (rec.owner, rec.layer) == ("alice", "per_speaker_core")   # what Alice said; never Dave's self-report
    assert rec.verification["corrected"] == ["owner Dave -> Alice: a core record is a self-report of the "
                                             "message's author"]


def test_profile_naming_several_people_but_not_the_owner_is_rejected(store):
    _, res = moving_to_leeds(store, "Bob", "per_speaker_profile")
    assert res.accepted == 0 and "does not refer to Bob" in rejections(store)[0]["reason"]


def test_bot_directed_message_is_never_a_record(store):
    store.ingest([msg(1, "@chorus what did we decide about the trip?", author="Alice", to_bot=True),
                  msg(2, "We decided: the trip is on Saturday at 9am", author="Bob"),
                  msg(3, "I remember my notes: the trip was agreed for Saturday at 9am", author="Chorus",
                      is_bot=True)])
    w = writer(store, [actions({"op": "ADD", "msg": 1, "owner": "Alice", "source": "Alice",
                                "layer": "per_speaker_core", "utype": "fact", "content": "what did we decide"})])
    labels = KeywordActs()  # "We decided ..." is a decision; the question to the bot is never analysed
    AnalysisPass(store, w.records, labels, labels).run()
    [res] = w.run_pending(force=True)
    assert res.status == "committed" and w.watermark(store.scopes()[0].id)[0] == 3
    prompt = w.llm.calls[0].prompt.split("Now the real chat")[1]
    assert "what did we decide about the trip" not in prompt and "I remember my notes" not in prompt
    recs = w.records.heads([store.scopes()[0].id])
    assert [r.owner for r in recs] == [GROUP]  # Bob's decision (the group state); nothing from the question
    assert all("what did we decide" not in r.content for r in recs)


def test_owner_outside_roster_rejected_window_advances(store):
    store.ingest([msg(1, "I'll bring the tent on Friday", author="Alice"), msg(2, "great", author="Bob")])
    w = writer(store, [actions({"op": "ADD", "msg": 1, "owner": "Mallory", "layer": "per_speaker_core",
                                "utype": "fact"})], extractive=True)
    [res] = w.run_pending(force=True)
    assert res.status == "committed" and w.watermark(store.scopes()[0].id)[0] == 2
    assert any("not in this channel's roster" in r["reason"] for r in rejections(store))
    # The cue proposer still files Alice's message, sourced to Alice: her own task, or the group's when the
    # classifier reads it as a task she took on for the group.
    [rec] = w.records.heads([store.scopes()[0].id])
    assert rec.source == "alice" and (rec.owner, rec.layer) in {("alice", "per_speaker_core"),
                                                                ("GROUP", "group_interaction")}


def test_cue_classes(store):
    store.ingest([msg(i, t, author=a) for i, (a, t) in enumerate([
        ("Maya", "Decision: pizza by the river, Friday the 14th at 7pm."),
        ("Leo", "Rule for the night: no talking about work."),
        ("Sam", "Leo has the spare key now."),
        ("Leo", "I'll pick up the trophies on Thursday."),
        ("Priya", "My physio moved to Friday evening."),
        ("Priya", "I prefer the mushroom pizza."),
        ("Sam", "The weather is grey today."),
        ("Sam", "i finally finished painting the spare bedroom walls in dark green"),
        ("Sam", "did i leave my blue umbrella somewhere near the club house door?"),
        ("Maya", "Sam, your umbrella is hanging by the club house door"),
        ("Priya", "Leo was brilliant at the quiz last week"),
        ("Maya", "Sam and Leo were brilliant at the quiz"),
        ("Maya", "Leo, I think the quiz went well for us"),
        ("Priya", "Maya I saw you limping at the end, the knee has been bothering you for a while"),
        ("Sam", "Dr Okafor says the knee needs rest for six weeks, no running at all"),
        ("Leo", "Dr Okafor says Sam's knee needs rest for six weeks"),
    ], 1)])
    window = _all(store)
    people = People(store.roster(store.scopes()[0].id))
    # Without a group act, what a message says of a person: GROUP filings come only from the classifier.
    got = [(c.kind, c.owner, c.layer) if (c := classify(m, window, people)) else None for m in window]
    assert got == [None, None,
                   ("responsibility", "leo", "per_speaker_profile"), ("responsibility", "leo", "per_speaker_core"),
                   ("change", "priya", "per_speaker_core"), ("stance", "priya", "per_speaker_core"), None,
                   ("self", "sam", "per_speaker_core"), None,
                   # What one member says to or about one other: that member's profile, also when the author
                   # says "I" while speaking to them; two members named, or the author mostly speaking of
                   # themself, is not that clear case.
                   ("about", "sam", "per_speaker_profile"), ("about", "leo", "per_speaker_profile"), None,
                   None, ("about", "maya", "per_speaker_profile"),
                   # News from someone outside the roster (NER PERSON) is its author's core record; with a
                   # member named too, it is not the clear case of either.
                   ("self", "sam", "per_speaker_core"), None]
    # A group act makes the message a GROUP record of the act's kind; a change with nothing to change is
    # filed as its best other kind.
    assert classify(window[1], window, people, GroupAct("norm", 0.9, "norm")) == Cue(
        "norm", GROUP, "group_interaction", "norm")
    assert classify(window[0], window, people, GroupAct("change", 0.9, "decision")).utype == "decision"
    acts = {window[0].id: GroupAct("decision", 0.9)}
    assert speaks_for_group(window[0], window, acts) and not speaks_for_group(window[6], window, acts)


def test_confirmation_is_not_a_change():
    """A change must share the topic and change it: a day, hour or place replaced, or said in words."""
    old = "Decision: pizza by the river, Friday the 14th at 7pm."
    assert not changes("No problem, we'll save you a seat. Booking is confirmed for 7pm.", old)
    assert changes("Booking moved to 8pm.", old) and changes("It's at 9pm now, the kitchen is slow", old)
    assert changes("Scratch that, pizza is off", old)


def _all(store):
    from memory.store import select_messages

    with store.read() as conn:
        return select_messages(conn, "ORDER BY m.id")


def test_later_word_on_the_same_thing_is_a_chain(store):
    """A change in a later session UPDATEs the record it changes (the chain keeps both); a confirmation or a
    remark on another topic does not."""
    day = 86400
    store.ingest([
        msg(1, "I bought four records at the fair today, all original pressings", author="Rae"),
        msg(2, "nice haul", author="Gil"),
        msg(3, "My budget held this time, I got two records at the fair, both original pressings", author="Rae",
            ts=1_700_000_000 + 7 * day),
        msg(4, "I finally fixed the bike chain myself this weekend, took three hours", author="Rae",
            ts=1_700_000_000 + 7 * day + 60)])
    w = writer(store, [actions({"op": "NOOP"})] * 2, extractive=True, window_messages=25)
    assert [r.status for r in w.run_pending(force=True)] == ["committed", "committed"]
    with store.read() as conn:
        rows = conn.execute("SELECT id, content, chain_id, superseded_by FROM records WHERE owner = 'rae' "
                            "ORDER BY id").fetchall()
    by_text = {c[:20]: (rid, chain, sup) for rid, c, chain, sup in rows}
    first, later = by_text["I bought four record"], by_text["My budget held this "]
    bike = by_text["I finally fixed the "]
    assert first[2] == later[0] and first[1] == later[1]      # one chain: four records, then two
    assert bike[1] != first[1] and bike[2] is None
