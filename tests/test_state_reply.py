"""Replies that read the group's state: the end of an update chain the question asks for, and when not to.

Acts and links come from a scripted model behind the analysis protocols (tests/_fakes.py), so these tests
are about what the reply does with a chain; the embedder is the real MiniLM, as the reply's "is this message
about the question" reads it.
"""
from __future__ import annotations

import pytest

from memory.analysis.runner import AnalysisPass
from memory.models import GROUP, Message, ScopeKey
from memory.query.answer import Answerer
from memory.records import Records
from memory.records_sync import attach
from memory.search import Searcher
from memory.store import Store
from tests._fakes import ScriptedActs

T0 = 1_750_000_000.0
KEY = ScopeKey("console", "w", "general")
NOISE = [("ben", "anyone watching the match tonight?"), ("kim", "my cat knocked the plant over again"),
         ("lee", "new phone, who dis"), ("ana", "the bakery on the corner closed down"),
         ("ben", "lol"), ("kim", "traffic is awful on the bypass")]
CHAT = [
    ("jo", "raffle tonight at the hall, tickets are 2 quid"),
    *NOISE[:3],
    ("jo", "quiz night is on the 14th at 7"),
    *NOISE[3:],
    ("jo", "quiz moved to the 21st, hall is double booked"),
    ("kim", "can we start at 8 instead? kids"),
    ("jo", "fine, 21st at 8 it is"),
    *NOISE,
    ("sam", "bingo cards are in the cupboard by the stage"),
]


def world(tmp_path, embedder, script):
    store = Store(tmp_path / "s.db", embedder=embedder)
    records = Records(store)
    attach(store, records)
    store.ingest([Message(KEY.platform, KEY.workspace, KEY.channel, f"m{i}", who, who.capitalize(), text,
                          T0 + i * 60) for i, (who, text) in enumerate(CHAT)], embed=True)
    model = ScriptedActs(script)
    AnalysisPass(store, records, model, model).run()
    return store, Answerer(store, Searcher(store), records, None), [store.scope_id(KEY)]


QUIZ = {
    "raffle tonight at the hall, tickets are 2 quid": ("plan", GROUP, None),
    "quiz night is on the 14th at 7": ("plan", GROUP, None),
    "quiz moved to the 21st, hall is double booked": ("change", GROUP, ("changes", "quiz night is on the 14th at 7")),
    "fine, 21st at 8 it is": ("change", GROUP, ("changes", "quiz moved to the 21st, hall is double booked")),
}


def quoted(reply) -> list[str]:
    return [q.message.text for q in reply.draft.quoted]


def test_now_leads_with_the_head_and_shows_what_it_replaced(tmp_path, embedder):
    store, answerer, sids = world(tmp_path, embedder, QUIZ)
    reply = answerer.answer(sids, "when is the quiz?")
    assert reply.draft.kind == "state", reply.text
    assert quoted(reply)[:3] == ["fine, 21st at 8 it is", "quiz moved to the 21st, hall is double booked",
                                 "quiz night is on the 14th at 7"], reply.text  # each "before that" older
    store.close()


def test_earlier_leads_with_the_first_version(tmp_path, embedder):
    store, answerer, sids = world(tmp_path, embedder, QUIZ)
    reply = answerer.answer(sids, "what was the original date for the quiz?")
    assert quoted(reply)[0] == "quiz night is on the 14th at 7", reply.text
    store.close()


def test_a_wrong_link_never_puts_an_unrelated_message_on_top(tmp_path, embedder):
    """The link model chained the bingo cards, said later in another exchange, onto the quiz: the head is neither
    about the quiz nor said next to the node it changes, so the evidence reply stands and leads with the quiz."""
    wrong = {**QUIZ, "bingo cards are in the cupboard by the stage":
             ("change", GROUP, ("changes", "fine, 21st at 8 it is"))}
    store, answerer, sids = world(tmp_path, embedder, wrong)
    reply = answerer.answer(sids, "when is the quiz?")
    assert reply.draft.kind != "state", reply.text
    assert "bingo" not in quoted(reply)[0] and "quiz" in quoted(reply)[0]
    store.close()


def test_a_plan_that_never_changed_is_answered_from_the_evidence(tmp_path, embedder):
    store, answerer, sids = world(tmp_path, embedder, QUIZ)
    reply = answerer.answer(sids, "how much are the raffle tickets?")
    assert reply.draft.kind == "evidence", reply.text
    assert quoted(reply)[0].startswith("raffle tonight")
    store.close()


@pytest.mark.parametrize("question", ["what did we decide?", "what have we agreed?"])
def test_what_did_we_decide_lists_the_heads(tmp_path, embedder, question):
    store, answerer, sids = world(tmp_path, embedder, QUIZ)
    reply = answerer.answer(sids, question)
    got = quoted(reply)
    assert "fine, 21st at 8 it is" in got and "quiz night is on the 14th at 7" not in got, reply.text
    store.close()


def test_a_question_that_only_shares_a_word_with_a_plan_does_not_read_its_chain(tmp_path, embedder):
    """"The hall" is in the quiz's change, but parking is never discussed: no "where it stands now" reply."""
    store, answerer, sids = world(tmp_path, embedder, QUIZ)
    reply = answerer.answer(sids, "what is the parking situation at the hall?")
    assert reply.draft.kind != "state", reply.text
    store.close()
