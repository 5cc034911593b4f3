"""The fine-tuned encoder's plumbing: the token layout training and run time share, the answer's words
mapped back to the message, and the shipped file completed with the installed package's word table."""
from __future__ import annotations

import pytest

from memory.encoder.build import WORDS, assembled
from memory.encoder.inputs import MAX_TOKENS, Tokens, candidate_text, encode_pair, span_text, span_tokens
from memory.encoder.model import MODELS, VERSION, best_span
from memory.errors import ModelMissing


@pytest.fixture(scope="module")
def tokens():
    return Tokens()


def test_layout_is_question_then_context_then_candidate(tokens):
    cand = candidate_text("Maya", "Decision: pizza by the river, Friday the 14th at 7pm.")
    enc = encode_pair(tokens, "where are we having dinner?", "Sam: what about pizza?", cand)
    assert enc.ids[0] == tokens.cls and enc.ids[-1] == tokens.sep and enc.ids.count(tokens.sep) == 3
    first_sep = enc.ids.index(tokens.sep)
    assert set(enc.types[:first_sep + 1]) == {0} and set(enc.types[first_sep + 1:]) == {1}
    assert enc.cand_end - enc.cand_start == len(enc.offsets) and not enc.truncated
    at = cand.index("pizza by the river")
    got = span_tokens(enc, at, at + len("pizza by the river"))
    assert got is not None and span_text(enc, *got) == "pizza by the river"


def test_long_texts_fit_and_a_cut_span_is_not_a_target(tokens):
    long_q = "what " * 80 + "?"
    cand = candidate_text("Ana", "word " * 200 + "the answer is here")
    enc = encode_pair(tokens, long_q, "ctx " * 100, cand)
    assert len(enc.ids) <= MAX_TOKENS and enc.truncated
    assert span_tokens(enc, cand.index("the answer"), len(cand)) is None
    assert len([t for t in enc.types if t == 0]) <= 34  # the question is capped, the candidate keeps the room


def test_span_text_widens_to_whole_words(tokens):
    cand = candidate_text("Leo", "Leo has the spare key now")
    enc = encode_pair(tokens, "who has the key?", "", cand)
    assert span_text(enc, enc.cand_start, enc.cand_start) == "Leo"


def test_best_span_stays_inside_the_candidate_and_in_order():
    import numpy as np

    start, end = np.zeros(10), np.zeros(10)
    start[1], end[0] = 9.0, 9.0  # the best pair outside or backwards must not win
    start[5], end[7] = 3.0, 3.0
    assert best_span(start, end, 4, 9) == (5, 7)
    assert best_span(start, end, 4, 4) == (-1, -1)


def test_the_shipped_file_leaves_out_the_word_table_and_gets_it_back(tmp_path):
    import onnx

    shipped = MODELS / f"{VERSION}.onnx"
    assert WORDS not in {t.name for t in onnx.load(str(shipped), load_external_data=False).graph.initializer}
    full = assembled(shipped, cache_dir=tmp_path)
    assert WORDS in {t.name for t in onnx.load(str(full)).graph.initializer}
    assert assembled(shipped, cache_dir=tmp_path) == full  # built once, then read from the cache
    with pytest.raises(ModelMissing, match="chorus train answer"):
        assembled(tmp_path / "nope.onnx", cache_dir=tmp_path)


def test_the_shipped_metadata_carries_the_choices_the_reply_reads():
    """Threshold, order weight and each-member floor come from the model's metadata, chosen in training."""
    import json

    from memory.encoder.model import shipped_encoder

    meta = json.loads((MODELS / f"{VERSION}.json").read_text())
    enc = shipped_encoder()
    assert (enc.threshold, enc.rerank_weight, enc.about_p) == (meta["threshold"], meta["rerank_weight"],
                                                               meta["about_p"])
    assert 0 < enc.threshold < enc.about_p < 1
    assert "chorus train answer --run" in meta["rebuild"] and meta["about_choice"]["questions"] > 0


def test_age_tags_say_how_much_older_than_the_newest():
    from memory.encoder.inputs import OLDEST_WORDS, age_tags

    day = 86400.0
    now = 1_700_000_000.0
    tags = age_tags([now, now - 600, now - 5 * 3600, now - 1.5 * day, now - 3 * day, now - 10 * day,
                     now - 90 * day, None])
    assert tags == ["newest", "newest", "hours earlier", "a day earlier", "days earlier", "weeks earlier",
                    OLDEST_WORDS, ""]
    assert age_tags([None, None]) == ["", ""]
    # against a given yardstick (the newest of what the reply reads), a later message is still "newest"
    assert age_tags([now + day, now - 2 * day], reference=now) == ["newest", "days earlier"]


def test_an_age_tag_opens_the_second_segment_and_moves_nothing_else(tokens):
    cand = candidate_text("Leo", "Leo is bringing the trophies now")
    plain = encode_pair(tokens, "who is bringing the trophies?", "Sam: I can't make it", cand)
    aged = encode_pair(tokens, "who is bringing the trophies?", "Sam: I can't make it", cand, age="days earlier")
    tag = tokens.tag("days earlier")
    q_end = plain.ids.index(tokens.sep) + 1
    assert tag and aged.ids[q_end:q_end + len(tag)] == tag and aged.types[q_end] == 1
    assert aged.ids[:q_end] + aged.ids[q_end + len(tag):] == plain.ids
    assert aged.cand_start == plain.cand_start + len(tag) and aged.offsets == plain.offsets
    got = span_tokens(aged, cand.index("Leo is"), cand.index("Leo is") + len("Leo is bringing"))
    assert got is not None and span_text(aged, *got) == "Leo is bringing"
    long = encode_pair(tokens, "what " * 80, "ctx " * 100, candidate_text("Ana", "word " * 200), age="weeks earlier")
    assert len(long.ids) <= MAX_TOKENS
