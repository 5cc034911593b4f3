"""SpeakerLevenshtein: every expected number below is worked out by hand in the comments."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from evaluation.speaker_levenshtein import (
    MemRecord,
    hungarian,
    owner_score,
    pair_similarity,
    sequence_ratio,
    speaker_levenshtein,
    token_f1,
)

approx = pytest.approx


def rec(owner: str, content: str, source: str = "", layer: str = "core", **kw) -> MemRecord:
    return MemRecord(owner=owner, content=content, layer=layer, source=source or owner, **kw)


def test_token_f1_hand_values():
    # {mom, likes, tea} vs {mom, likes, green, tea}: overlap 3, P = 3/3, R = 3/4, F1 = 1.5/1.75 = 6/7
    assert token_f1("Mom likes tea!", "mom likes green tea") == approx(6 / 7)
    # sets, not multisets: {tea} vs {tea}
    assert token_f1("tea tea", "Tea") == 1.0
    # each CJK character is a token: {我,爱,茶} vs {我,爱,咖,啡}: overlap 2, P = 2/3, R = 2/4,
    # F1 = 2 * (1/3) / (7/6) = 4/7
    assert token_f1("我爱茶", "我爱咖啡") == approx(4 / 7)
    assert token_f1("", "tea") == 0.0 and token_f1("tea", "golf") == 0.0


def test_sequence_ratio_hand_values():
    # "mom likes tea" (13 chars) vs "mom likes green tea" (19): blocks "mom likes " (10) + "tea" (3)
    # -> 2 * 13 / 32 = 0.8125; token-level: 3 of [mom likes tea] in order -> 2 * 3 / 7
    assert sequence_ratio("Mom likes tea!", "mom likes green tea") == approx(0.8125)
    assert sequence_ratio("Mom likes tea!", "mom likes green tea", by_token=True) == approx(6 / 7)
    # "abc" vs "abd": chars share "ab" -> 4/6; as tokens abc != abd -> 0
    assert sequence_ratio("abc", "abd") == approx(2 / 3)
    assert sequence_ratio("abc", "abd", by_token=True) == 0.0
    assert sequence_ratio("tea", "golf") == 0.0


def test_pair_similarity_hand_values():
    # 0.6 * 6/7 + 0.4 * 0.8125 = 0.514286 + 0.325
    assert pair_similarity("Mom likes tea", "mom likes green tea") == approx(0.6 * 6 / 7 + 0.325)
    # "a b c" vs "a d e": F1 = 1/3; chars "a " + " " -> 2*3/10 = 0.6; 0.2 + 0.24 = 0.44 < 0.5
    assert pair_similarity("a b c", "a d e") == approx(0.44)
    # ...so it is gated to zero: F = 2 * 0 / 2
    assert owner_score([rec("Mom", "a b c")], [rec("Mom", "a d e")]) == 0.0


def test_identical_sets_score_one():
    recs = [rec("Mom", "knee still hurts"), rec("Mom", "wants the easy trail"),
            rec("GROUP", "group chose the easy trail", source="Dad", layer="interaction")]
    res = speaker_levenshtein(recs, list(reversed(recs)))
    assert res.score == approx(1.0)
    assert res.per_owner == {"group": approx(1.0), "mom": approx(1.0)}
    assert res.n_matched == 3


def test_empty_cases():
    assert speaker_levenshtein([], []).score == 1.0
    # owner only in the reference: F = 0 / (0 + 1)
    assert speaker_levenshtein([], [rec("Mom", "tea")]).score == 0.0
    assert speaker_levenshtein([rec("Mom", "tea")], []).score == 0.0


def test_single_missing_record():
    # ref {A, B}, pred {A}: F = 2 * 1 / (1 + 2) = 2/3; one owner so mean = worst = 2/3
    a, b = rec("Mom", "knee still hurts"), rec("Mom", "wants the easy trail")
    res = speaker_levenshtein([a], [a, b])
    assert res.score == approx(2 / 3)


def test_single_extra_record():
    # pred {A, B}, ref {A}: F = 2 * 1 / (2 + 1) = 2/3
    a, b = rec("Mom", "knee still hurts"), rec("Mom", "wants the easy trail")
    assert speaker_levenshtein([a, b], [a]).score == approx(2 / 3)


def test_record_under_wrong_owner():
    # ref: Mom{A}, Dad{B}; pred: Dad{A', B} where A' is A filed under Dad.
    # F_mom = 0 / (0 + 1) = 0; F_dad = 2 * 1 / (2 + 1) = 2/3 (A' cannot meet A across buckets)
    # score = 0.8 * (0 + 2/3) / 2 + 0.2 * 0 = 0.8/3
    a = rec("Mom", "knee still hurts", source="Cara")
    b = rec("Dad", "prefers the easy trail")
    a_wrong = rec("Dad", "knee still hurts", source="Cara")
    res = speaker_levenshtein([a_wrong, b], [a, b])
    assert res.per_owner == {"dad": approx(2 / 3), "mom": 0.0}
    assert res.worst_owner == "mom"
    assert res.score == approx(0.8 / 3)


def test_coordinate_gate_blocks_identical_content():
    ref = [rec("Mom", "knee still hurts", source="Cara", layer="core")]
    # same owner and text, different source -> k = 0 -> F = 0
    assert speaker_levenshtein([rec("Mom", "knee still hurts", source="Ben")], ref).score == 0.0
    # different layer -> also blocked
    assert speaker_levenshtein([rec("Mom", "knee still hurts", source="Cara", layer="profile")],
                               ref).score == 0.0
    # utype/session/time are not coordinates of the gate (Eq. 14 uses owner, source, layer only)
    other = rec("Mom", "knee still hurts", source="Cara", utype="stance", session=9, time=1.0)
    assert speaker_levenshtein([other], ref).score == approx(1.0)


def test_owner_names_normalised():
    ref = [rec("Big Ben", "likes the ridge", source="Big Ben")]
    pred = [rec("  big   BEN ", "likes the ridge", source="BIG ben")]
    res = speaker_levenshtein(pred, ref)
    assert res.score == approx(1.0) and list(res.per_owner) == ["big ben"]


def test_hungarian_beats_greedy():
    r1, r2 = rec("Mom", "mom likes green tea"), rec("Mom", "mom likes tea")
    p1, p2 = rec("Mom", "mom likes green tea"), rec("Mom", "green tea")
    # k(p1,r1) = 1.0
    # k(p1,r2) = 0.6*6/7 + 0.4*0.8125 = 0.839286            (see pair-similarity test)
    # k(p2,r1): F1 {green,tea} vs 4 tokens = 2/3; chars "green tea"(9) inside 19 -> 18/28
    #           0.4 + 0.4*9/14 = 0.657143 >= 0.5
    # k(p2,r2): F1 = 2*(1/2)(1/3)/(5/6) = 0.4; chars " tea" + "e" = 5 -> 10/22;
    #           0.24 + 0.181818 = 0.421818 < 0.5 -> 0
    k12 = 0.6 * 6 / 7 + 0.4 * 0.8125
    k21 = 0.6 * 2 / 3 + 0.4 * 18 / 28
    assert pair_similarity(p2.content, r1.content) == approx(k21)
    assert pair_similarity(p2.content, r2.content) == approx(0.24 + 0.4 * 10 / 22)
    # Greedy takes the single best pair (p1,r1)=1.0 first, leaving p2 with r2 (0): total 1.0, F = 0.5.
    # Hungarian takes (p1,r2)+(p2,r1) = 0.839286 + 0.657143 = 1.496429, F = 2*1.496429/4 = 0.748214.
    k = np.array([[1.0, k12], [k21, 0.0]])
    greedy_total = k[0, 0] + k[1, 1]
    assert greedy_total == 1.0
    assert sorted(hungarian(-k)) == [(0, 1), (1, 0)]
    assert owner_score([p1, p2], [r1, r2]) == approx(2 * (k12 + k21) / 4)
    assert owner_score([p1, p2], [r1, r2]) == approx(0.748214, abs=1e-6)


def test_mean_plus_worst_combination():
    # Mom: identical single record -> F = 1; Dad: ref {X, Y}, pred {X} -> F = 2/3.
    # mean = 5/6, worst = 2/3 -> 0.8 * 5/6 + 0.2 * 2/3 = 2/3 + 2/15 = 0.8
    m, x, y = rec("Mom", "knee still hurts"), rec("Dad", "easy trail"), rec("Dad", "drives the car")
    res = speaker_levenshtein([m, x], [m, x, y])
    assert res.per_owner == {"dad": approx(2 / 3), "mom": approx(1.0)}
    assert res.worst_owner == "dad"
    assert res.score == approx(0.8)
    assert (res.n_pred, res.n_ref, res.n_matched) == (2, 3, 2)


def _brute_force(cost: np.ndarray) -> float:
    n, m = cost.shape
    if n <= m:
        return min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
    return _brute_force(cost.T)


@pytest.mark.parametrize("seed", range(60))
def test_hungarian_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(1, 6, size=2)
    cost = rng.integers(-5, 10, size=(n, m)).astype(float) if seed % 2 else rng.random((n, m))
    pairs = hungarian(cost)
    rows, cols = zip(*pairs)
    assert len(pairs) == min(n, m)
    assert len(set(rows)) == len(rows) and len(set(cols)) == len(cols)
    assert sum(cost[i, j] for i, j in pairs) == approx(_brute_force(cost))


def test_hungarian_empty():
    assert hungarian(np.zeros((0, 3))) == []
