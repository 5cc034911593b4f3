"""The reader model in the reply: it puts the answering message first, states its words, and names what the
chat doesn't say. The real shipped encoder and the README's demo chat (these are the model's own tests)."""
from __future__ import annotations

import io

import pytest

from adapters.console import ConsoleChat
from bot.app import Bot
from bot.config import Settings
from memory.encoder.inputs import candidate_text
from memory.encoder.model import MODELS, VERSION, shipped_encoder
from memory.models import ScopeKey

KEY = ScopeKey("console", "local", "general")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, request):
    from memory.embeddings.minilm import MiniLMEmbedder

    path = tmp_path_factory.mktemp("demo") / "c.db"
    bot = Bot(Settings.model_validate({"store": {"path": str(path)}, "writer": {"enabled": False}}),
              embedder=MiniLMEmbedder(), load_models=False)
    ConsoleChat(bot, io.StringIO(), io.StringIO()).load_demo()
    yield bot
    bot.close()


def test_the_decision_reads_above_the_message_that_asked_for_one():
    enc = shipped_encoder()
    q = "where are we having dinner?"
    decided, asked = enc.read(q, [
        (candidate_text("Priya", "Pizza works for me, they do a great mushroom one."),
         candidate_text("Maya", "Decision: pizza by the river, Friday the 14th at 7pm. I'll book the big table.")),
        ("", candidate_text("Maya", "Okay team, we need to pick a place for the end-of-season dinner."))])
    assert decided.p > asked.p
    # The span's edges are loose (held-out exact match is under half); its words come from the decision.
    assert "river" in decided.span and decided.span in "Decision: pizza by the river, Friday the 14th at 7pm."


def test_a_model_trained_with_ages_is_read_with_them_and_one_without_ignores_them():
    from memory.encoder.model import Encoder

    plain = shipped_encoder()
    pairs = [("", candidate_text("Leo", "I'll bring the trophies on Saturday."))]
    assert plain.read("who brings the trophies?", pairs, ["weeks earlier"])[0].p == pytest.approx(
        plain.read("who brings the trophies?", pairs)[0].p)
    options = {**plain.meta.get("options", {}), "age": True}
    aged = Encoder(MODELS / f"{VERSION}.onnx", {**plain.meta, "options": options})
    assert aged.reads_age and not plain.reads_age
    with pytest.raises(ValueError, match="ages"):
        aged.read("who brings the trophies?", pairs)
    newest, older = (aged.read("who brings the trophies?", pairs, [tag])[0].p for tag in ("newest", "weeks earlier"))
    assert newest != older  # the tag is in what it reads


def test_the_reply_leads_with_the_answer_in_the_message_s_own_words(demo):
    reply = demo.ask(KEY, "where are we having dinner?")
    lead = reply.text.split("\n")[0]
    first = demo.store.messages([reply.citations[0].message_id])[0].text
    assert first.startswith("Decision: pizza by the river"), reply.text
    assert "pizza by the river" in lead.casefold() and "[1]" in lead and not reply.data["abstained"]


def test_a_question_the_chat_does_not_answer_names_what_is_missing(demo):
    reply = demo.ask(KEY, "how much did dinner cost?")
    assert reply.data["abstained"], reply.text
    assert reply.text.startswith("The chat doesn't say how much dinner cost."), reply.text
    assert "closest" in reply.text  # the nearest messages follow, labelled as such


def test_each_member_reads_the_model_s_verdict_per_message(demo):
    reply = demo.ask(KEY, "who hasn't said anything about the trophies?")
    lead = reply.text.split("\n")[0]
    assert "Maya" in lead and "Priya" in lead and "Sam" not in lead and "Leo" not in lead, reply.text
