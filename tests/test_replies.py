"""Replies a user can trust: evidence first, plain declines, rows per member, bot traffic never evidence."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from adapters.console import ConsoleChat
from bot.app import Bot
from bot.config import Settings
from evaluation.answer import unchecked_citations
from memory.models import ScopeKey
from memory.query.answer import Answerer
from memory.query.reply import DECLINE, quote_of
from memory.query.support import check_sentence, numbers
from memory.records import Records
from memory.search import Searcher
from tests.conftest import msg

CHATS = Path(__file__).parent / "data" / "chats"
# The README's suggested questions over the console demo, with the message that answers each and the
# words a reply must show.
DEMO = [
    ("where are we having dinner?", "Decision: pizza by the river", ["pizza", "river"]),
    ("who has the key to the club house?", "Leo has the spare key", ["Leo", "key"]),
    ("what did Priya say about spicy food?", "too spicy after my surgery", ["spicy", "surgery"]),
    ("what is the rule for the night?", "Rule for the night", ["work", "round"]),
    ("when is Priya's physio?", "physio moved to Friday evening", ["Friday", "evening"]),
]


@pytest.fixture
def demo_bot(tmp_path, embedder):
    settings = Settings.model_validate({"store": {"path": str(tmp_path / "c.db")}, "writer": {"enabled": False}})
    bot = Bot(settings, embedder=embedder, load_models=False)
    out = io.StringIO()
    chat = ConsoleChat(bot, io.StringIO(), out)
    chat.load_demo()
    yield bot, chat, out
    bot.close()


def ask(chat: ConsoleChat, out: io.StringIO, line: str) -> str:
    out.truncate(0)
    out.seek(0)
    chat.handle(line)
    return out.getvalue()


@pytest.mark.parametrize("question, first, words", DEMO)
def test_demo_questions_lead_with_the_right_message(demo_bot, question, first, words):
    bot, _, _ = demo_bot
    reply = bot.ask(ScopeKey("console", "local", "general"), question)
    assert reply.citations, reply.text
    # The answering message leads, or follows the message that raised the question (which is on topic too).
    shown = [bot.store.messages([c.message_id])[0].text for c in reply.citations[:2]]
    assert any(first in t for t in shown), reply.text
    for w in words:
        assert w.casefold() in reply.text.casefold(), reply.text
    assert not reply.data["abstained"]


def test_quotes_beside_an_answer_are_marked_as_related_not_as_its_source(demo_bot):
    """The lead states one message's words and cites it; the reader cannot tell whether the other quotes restate
    it or only talk around it, so they are shown as related, never unmarked beside the answer."""
    bot, _, _ = demo_bot
    reply = bot.ask(ScopeKey("console", "local", "general"), "where are we having dinner?")
    lines = reply.text.splitlines()
    assert lines[0].startswith("Decision: pizza by the river") and "[1]" in lines[0], reply.text
    quotes = [ln.strip() for ln in lines[1:] if ln.strip().startswith("[")]
    assert quotes[0].startswith("[1] Maya"), reply.text
    assert len(quotes) > 1 and all(q.startswith(f"[{i}] related: ") for i, q in enumerate(quotes[1:], 2)), reply.text


def test_questions_to_the_bot_are_never_evidence(demo_bot):
    bot, chat, out = demo_bot
    first = ask(chat, out, "alice: @chorus where are we having dinner?")
    second = ask(chat, out, "bob: @chorus where are we having dinner?")
    assert "@chorus" not in first and "@chorus" not in second
    sid = bot.store.scope_id(chat.key)
    with bot.store.read() as conn:
        stored = conn.execute("SELECT count(*), min(embedded) FROM messages WHERE bot_traffic = 1 AND scope_id = ?",
                              (sid,)).fetchone()
        fts = conn.execute(f"SELECT count(*) FROM messages_fts_s{sid} WHERE messages_fts_s{sid} MATCH 'chorus'"
                           ).fetchone()[0]
    assert stored == (2, 2) and fts == 0  # kept for the record, indexed nowhere
    hits = bot.searcher.search([sid], "where are we having dinner", k=20)
    assert all(not h.message.to_bot for h in hits)
    assert "alice" not in [p.person_id for p in bot.store.roster(sid)]  # asking does not make a member


def test_a_mention_is_not_counted_as_the_chat_using_its_words(demo_bot):
    """"late" occurs in one chat message; the @mention that asks holds it too but is never indexed, so taking
    the mention out of the counts must not leave the chat without the word (an off-topic decline)."""
    bot, chat, out = demo_bot
    text = ask(chat, out, "@chorus did anyone say they'd be late?")
    assert "an hour late" in text.split("[1]")[0] and "doesn't say" not in text, text


def test_a_member_called_by_a_nick_stem_is_read_as_that_author(demo_bot):
    """The reader reads "Tess_R: ..." as a candidate; asked about "Tess", it reads the question as the chat names
    her, so her own message leads rather than a better-read message of someone else."""
    bot, chat, out = demo_bot
    ask(chat, out, "Tess_R: is the parking at the club house free on match days?")
    text = ask(chat, out, "@chorus what did Tess ask?")
    first = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("[1]"))
    assert first.startswith("[1] Tess_R"), text


def test_bot_traffic_is_not_writer_input(demo_bot):
    from memory.llm.fake import ScriptedLLM
    from memory.writer.writer import Writer

    bot, chat, out = demo_bot
    ask(chat, out, "alice: @chorus who has the key?")
    writer = Writer(bot.store, ScriptedLLM(['{"actions": []}'] * 5), records=bot.records)
    windows = writer.pending(force=True)
    assert windows and all(not m.to_bot for w in windows for m in w.messages)


def test_unanswerable_questions_decline_without_inventing(demo_bot):
    bot, _, _ = demo_bot
    key = ScopeKey("console", "local", "general")
    for q in ("how much was the electricity bill?", "what did the plumber charge?"):
        reply = bot.ask(key, q)
        assert reply.data["abstained"] and reply.text.startswith((DECLINE, "The chat doesn't say")), reply.text
        assert not numbers(reply.text.split("\n")[0])


@pytest.mark.parametrize("question, expect", [
    ("", "Ask me something"),
    ("hi", "Ask me about something said in this channel"),
    ("what did Bob say about pizza?", "Nobody in this channel has mentioned Bob"),
    ("¿dónde vamos a cenar el viernes?", DECLINE),
])
def test_bad_questions_get_a_clear_reply(demo_bot, question, expect):
    bot, _, _ = demo_bot
    reply = bot.ask(ScopeKey("console", "local", "general"), question)
    assert expect in reply.text and "[1]" not in reply.text.split("\n")[0]


def test_empty_channel_gets_a_clear_reply(demo_bot):
    bot, _, _ = demo_bot
    reply = bot.ask(ScopeKey("console", "local", "nobody-here"), "where are we having dinner?")
    assert "memory of this channel" in reply.text and not reply.citations


def test_each_person_lists_every_member(demo_bot):
    bot, _, _ = demo_bot
    reply = bot.ask(ScopeKey("console", "local", "general"), "what does everyone think about the Thai place?")
    authors = [c.author for c in reply.citations]
    assert reply.data["kind"] == "each" and len(authors) == len(set(authors))
    assert "Leo" in authors and "Priya" in authors


def test_change_questions_show_earlier_then_latest(tmp_path, embedder):
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(1, "Book club is on Tuesday at Ana's flat", author="Ana"),
                  msg(2, "I'll bring crisps", author="Ben"),
                  msg(3, "Plumber on Tuesday, so book club moves to Thursday at the library cafe", author="Ana")])
    sid = store.scopes()[0].id
    ans = Answerer(store, Searcher(store), Records(store), None).answer(
        [sid], "Where was book club before it changed?")
    lines = ans.text.splitlines()
    assert ans.draft.kind == "change" and "earlier" in lines[1] and "Tuesday at Ana's flat" in lines[1]
    assert "latest" in lines[-1] and "Thursday" in lines[-1]
    store.close()


@pytest.mark.xfail(strict=True, reason="in this four-message chat encoder-v2 reads Sofia's \"Can't wait for the "
                   "hike!\" as speaking to the deposit (P 0.90) and Raj's request as not (0.24); docs/reader.md, known "
                   "weaknesses. Strict: a model that fixes it must turn this back into a plain test.")
def test_who_hasnt_uses_the_roster(tmp_path, embedder):
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(1, "Deposit is 15 each, send it to me", author="Raj"),
                  msg(2, "Paid the deposit to Raj", author="Kai"), msg(3, "Paid my deposit too", author="Lena"),
                  msg(4, "Can't wait for the hike!", author="Sofia")])
    sid = store.scopes()[0].id
    ans = Answerer(store, Searcher(store), Records(store), None).answer([sid], "Who hasn't paid the deposit?")
    lead = ans.text.splitlines()[0]
    assert ans.draft.kind == "absent" and "Sofia" in lead and "Kai" not in lead and "Lena" not in lead
    store.close()


def test_who_hasnt_uses_the_roster_without_the_reader(tmp_path, embedder):
    """The feature path (`answer.reader_model = false`) keeps its topic-word reading of who has spoken."""
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(1, "Deposit is 15 each, send it to me", author="Raj"),
                  msg(2, "Paid the deposit to Raj", author="Kai"), msg(3, "Paid my deposit too", author="Lena"),
                  msg(4, "Can't wait for the hike!", author="Sofia")])
    sid = store.scopes()[0].id
    answerer = Answerer(store, Searcher(store), Records(store), None, encoder=None)
    ans = answerer.answer([sid], "Who hasn't paid the deposit?")
    lead = ans.text.splitlines()[0]
    assert ans.draft.kind == "absent" and "Sofia" in lead and "Kai" not in lead and "Lena" not in lead
    store.close()


TRIP_CHAT = [(1, "Deposit for the campsite is 15 each, send it to me", "Raj"),
             (2, "Camping or a hostel? I'd rather a hostel", "Sofia"),
             (3, "Fine, the Lake District it is. We leave at 7am on Saturday", "Raj"),
             (4, "I'll bring the big tent and the stove", "Kai"),
             (5, "Can someone check the weather for Saturday?", "Sofia")]


@pytest.mark.parametrize("question, declines", [
    ("How much is the campsite deposit?", False),
    ("When are we leaving for the Lake District?", False),
    ("What's the wifi password for the office?", True),  # nothing in the chat is about it
    ("Which dentist did Marta recommend?", True),  # a stranger, and a topic the chat never has
])
def test_replies_decline_what_the_chat_never_discusses(tmp_path, embedder, question, declines):
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(i, text, author=a, ts=1_717_200_000 + 60 * i) for i, text, a in TRIP_CHAT])
    sid = store.scopes()[0].id
    ans = Answerer(store, Searcher(store), Records(store), None).answer([sid], question)
    assert ans.abstained == declines, ans.text
    if declines:  # the decline asserts nothing
        assert ans.text.startswith((DECLINE, "The chat doesn't say", "Nobody in this channel"))
    store.close()


def test_an_answer_that_does_not_repeat_the_question_is_found_in_its_context(tmp_path, embedder):
    """The members who answer a request say "I can do the morning", not the request's words."""
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(1, "Who's around on the 3rd? I'll need lifts to the station", author="Ana"),
                  msg(2, "I can do the morning", author="Ben"),
                  msg(3, "I'll take the evening one", author="Cleo"),
                  msg(4, "Anyone seen my blue scarf? Left it at the pub", author="Dev"),
                  msg(5, "The pub quiz is on Thursday again", author="Ben")])
    sid = store.scopes()[0].id
    answerer = Answerer(store, Searcher(store), Records(store), None)
    ans = answerer.answer([sid], "Who is giving Ana lifts to the station?")
    shown = [q.message.author_name for q in ans.draft.quoted]
    assert not ans.abstained and ("Ben" in shown or "Cleo" in shown), ans.text
    store.close()


def test_answers_to_a_question_in_the_chat_count_as_about_it(tmp_path, embedder):
    """ "Should we get a cat?" is answered by the replies after it, which need not say "cat"."""
    from memory.store import Store

    store = Store(tmp_path / "s.db", embedder=embedder)
    store.ingest([msg(1, "Random idea: should we get a cat? My friend's cat had kittens.", author="Mia"),
                  msg(2, "I'm allergic, so that's a no from me, sorry.", author="Noah"),
                  msg(3, "I'd love a cat but only if Noah is okay, which he isn't.", author="Zoe"),
                  msg(4, "I don't mind either way, but someone would have to feed it.", author="Omar"),
                  msg(5, "Update: the landlord moved the inspection to the 15th.", author="Zoe")])
    sid = store.scopes()[0].id
    answerer = Answerer(store, Searcher(store), Records(store), None)
    why = answerer.answer([sid], "Why can't we get a cat?")
    assert "allergic" in why.text and not why.abstained, why.text
    each = answerer.answer([sid], "What does everyone think about getting a cat?")
    assert each.draft.kind == "each" and "Nothing from" not in each.text, each.text
    assert all(w in each.text for w in ("allergic", "love a cat", "don't mind")), each.text
    store.close()


def test_support_check_rules():
    cited = {1: "Maya: Decision: pizza by the river, Friday the 14th at 7pm."}
    assert check_sentence("Maya decided on pizza by the river on Friday at 7pm [1].", cited).ok
    assert not check_sentence("Pizza by the river on Friday at 8pm [1].", cited).ok  # wrong number
    assert not check_sentence("Leo chose pizza by the river [1].", cited, known_names=["Leo"]).ok  # wrong person
    assert not check_sentence("Dinner costs a fortune at the harbour [1].", cited).ok  # words not there
    assert not check_sentence("Pizza by the river.", {}).ok  # cites nothing


def test_verifier_catches_a_tampered_reply(vstore):
    vstore.ingest([msg(1, "The rehearsal is on Thursday at 8pm", author="Ann")])
    sid = vstore.scopes()[0].id
    ans = Answerer(vstore, Searcher(vstore), Records(vstore), None).answer([sid], "When is the rehearsal?")
    assert unchecked_citations(ans, vstore, [sid]) == 0
    ans.text = ans.text.replace("8pm", "9pm")  # the quote no longer matches, so the lead's [1] rests on nothing
    assert unchecked_citations(ans, vstore, [sid]) == 1 + ans.text.split("\n")[0].count("[1]")
    ans.text = ans.text.replace("9pm", "8pm") + "\nIt was moved [2]."
    assert unchecked_citations(ans, vstore, [sid]) == 1


def test_long_messages_are_quoted_around_the_matching_sentence():
    text = ("We talked about a lot of things today. " * 8 + "The venue is the old boathouse on the lake. "
            + "Anyway, see you all soon. " * 6)
    q = quote_of(text, ["venu", "boathous"])
    assert "old boathouse" in q and len(q) <= 250 and q.startswith("…")


@pytest.mark.model
def test_demo_questions_with_the_shipped_model(tmp_path, embedder):
    """Under the model policy the shipped 270M model may write the lead, but only a checked one is shown."""
    from memory.llm.factory import load_llm

    settings = Settings.model_validate({"store": {"path": str(tmp_path / "c.db")}, "writer": {"enabled": False},
                                        "answer": {"policy": "model"}})
    bot = Bot(settings, embedder=embedder, llm=load_llm("llama", None, n_ctx=2048), load_models=False)
    try:
        chat = ConsoleChat(bot, io.StringIO(), io.StringIO())
        chat.load_demo()
        key = ScopeKey("console", "local", "general")
        for question, first, words in DEMO:
            reply = bot.ask(key, question)
            shown = [bot.store.messages([c.message_id])[0].text for c in reply.citations[:2]]
            assert any(first in t for t in shown), reply.text
            assert all(w.casefold() in reply.text.casefold() for w in words), reply.text
            if reply.data["generated"]:  # a sentence the model wrote passed the support check
                assert reply.text.startswith(reply.data["generated"])
    finally:
        bot.close()


def test_decline_threshold_is_the_highest_under_the_false_decline_cap():
    import numpy as np

    from evaluation.rerank_data import Example
    from evaluation.rerank_train import choose_threshold

    def ex(dataset: str, answerable: bool) -> Example:
        return Example(dataset, "c", "q", "x", None, np.zeros((0, 1)), np.zeros(0), [], [], [], 1.0, answerable)

    # dataset a: 20 answerable, one at 0.2, the rest at 0.8, and 5 unanswerable at 0.4; b: 20 answerable at 0.9
    probs = np.asarray([0.2] + [0.8] * 19 + [0.4] * 5 + [0.9] * 20)
    examples = [ex("a", True)] * 20 + [ex("a", False)] * 5 + [ex("b", True)] * 20
    assert choose_threshold(probs, examples, cap=0.05) == 0.8  # one false decline in 20 is 5%: allowed
    probs[1:3] = 0.2  # now 3 of 20 answerable sit at 0.2: the cap forces a threshold at or under them
    assert choose_threshold(probs, examples, cap=0.05) == 0.2


def test_typing_as_a_demo_member_speaks_as_that_member(demo_bot):
    """ "sam: ..." in the console is the demo's Sam, so "each person" questions see one Sam, not two."""
    bot, chat, out = demo_bot
    ask(chat, out, "sam: should we do karaoke after?")
    ask(chat, out, "leo: no way, my voice is gone")
    roster = bot.store.roster(bot.store.scope_id(chat.key))
    assert sorted(p.display_name for p in roster) == ["Leo", "Maya", "Priya", "Sam"]
    reply = ask(chat, out, "@chorus what does everyone think about karaoke?")
    assert "Sam" in reply and "voice is gone" in reply and "Nothing from Maya" in reply, reply


@pytest.mark.xfail(strict=True, reason="encoder-v2 reads Priya's \"Pizza works for me\" as speaking to karaoke "
                   "(P about 0.5, about_p 0.25), so the reply counts her; docs/reader.md, known weaknesses. "
                   "Strict: a model that fixes it must turn this back into a plain test.")
def test_each_person_leaves_out_a_member_who_only_spoke_of_something_else(demo_bot):
    bot, chat, out = demo_bot
    ask(chat, out, "sam: should we do karaoke after?")
    ask(chat, out, "leo: no way, my voice is gone")
    reply = ask(chat, out, "@chorus what does everyone think about karaoke?")
    assert "Nothing from Maya and Priya" in reply, reply


def test_what_did_we_decide_quotes_the_groups_records(demo_bot):
    """No topic word, but the group's decisions and rules answer it: their records' messages, newest first,
    and before the writer has read the chat, the messages the group-act classifier picks."""
    import json

    from memory.llm.fake import ScriptedLLM
    from memory.writer.writer import Writer, WriterConfig

    bot, _, _ = demo_bot
    key = ScopeKey("console", "local", "general")
    before = bot.ask(key, "what did we decide?")  # no GROUP records yet: the messages themselves answer
    assert before.data["kind"] == "group" and "Decision: pizza by the river" in before.text, before.text
    empty = json.dumps({"actions": []})
    Writer(bot.store, ScriptedLLM([empty] * 3), config=WriterConfig(extractive=True),
           records=bot.records).run_pending(force=True)                     # the cue proposer files them
    reply = bot.ask(key, "what did we decide?")
    texts = [bot.store.messages([c.message_id])[0].text for c in reply.citations]
    assert any(t.startswith("Decision: pizza by the river") for t in texts), reply.text
    assert any(t.startswith("Rule for the night") for t in texts), reply.text
    stamps = [bot.store.messages([c.message_id])[0].ts for c in reply.citations]
    assert stamps == sorted(stamps, reverse=True) and not reply.data["abstained"]
    labels = [line.split("]", 1)[1].split(":", 1)[0].strip() for line in reply.text.splitlines()[1:]
              if line.strip().startswith("[")]
    first = reply.text.splitlines()[0]  # "decisions first" only when a decision is listed before other kinds
    assert ("decisions first" in first) == ("decision" in labels and len(set(labels)) > 1), reply.text
    assert "Ask me about" in bot.ask(key, "hi").text                         # a greeting still gets the hint
