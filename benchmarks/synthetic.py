"""A deterministic synthetic multi-party chat history for benchmarks.

Channels have 5-30 speakers with skewed activity; message lengths follow a
log-normal distribution (mostly short, some paragraphs); words mix common English
with Zipf-distributed topic words, so BM25 and FTS5 see realistic term statistics.
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterator

from memory.models import Message

COMMON = """i you we they he she it the a an and or but so to of in on at for with about is are was were be have
has had do did will would can could should just really think know want need like get go going make see
look time day week today tomorrow yesterday friday monday weekend meeting lunch dinner coffee plan idea
good great fine okay sure maybe yes no thanks please sorry again still already soon later now then here
there what when where who why how this that these those some any all more most other new old first last
long little big small right left next back work home team project call trip money price book game movie
music food place party weather office train car ticket photo message group chat people friend family""".split()

_SYLLABLES = ["ka", "lo", "mi", "ra", "ven", "dor", "sil", "tu", "pe", "qua", "zen", "bri", "mon", "tal", "gor",
              "ne", "fa", "xi", "lum", "ost", "ari", "del", "pon", "cre", "hal"]


def topic_words(n: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(words)


class Zipf:
    """Sample indexes 0..n-1 with probability proportional to 1/(rank+1)^s."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        weights = [1.0 / (i + 1) ** s for i in range(n)]
        total = sum(weights)
        self.cum: list[float] = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self.cum.append(acc)
        self.rng = rng

    def sample(self) -> int:
        import bisect

        return min(bisect.bisect_left(self.cum, self.rng.random()), len(self.cum) - 1)


def sentence(rng: random.Random, topics: list[str], zipf: Zipf, n_words: int) -> str:
    words = []
    for _ in range(n_words):
        words.append(topics[zipf.sample()] if rng.random() < 0.35 else rng.choice(COMMON))
    text = " ".join(words)
    return text[:1].upper() + text[1:] + rng.choice([".", ".", "!", "?", ""])


def history(n_messages: int, *, channels: int = 8, seed: int = 7, platform: str = "bench",
            workspace: str = "w1", start_ts: float = 1_700_000_000.0) -> Iterator[Message]:
    """Yield ``n_messages`` across ``channels`` channels in time order."""
    rng = random.Random(seed)
    topics = topic_words(3000, rng)
    zipf = Zipf(len(topics), 1.07, rng)
    rosters = []
    for c in range(channels):
        size = rng.randint(5, 30)
        rosters.append([(f"u{c}_{i}", f"Person {c}-{i}") for i in range(size)])
    activity = [Zipf(len(r), 1.2, rng) for r in rosters]
    ts = start_ts
    for n in range(n_messages):
        c = rng.randrange(channels)
        author_id, author_name = rosters[c][activity[c].sample()]
        ts += rng.expovariate(1 / 40.0) + (3 * 3600 if rng.random() < 0.01 else 0)
        n_words = max(1, min(400, int(math.exp(rng.gauss(2.3, 0.8)))))
        yield Message(platform, workspace, f"c{c}", f"m{n}", author_id, author_name,
                      sentence(rng, topics, zipf, n_words), ts)


def queries(n: int, *, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    topics = topic_words(3000, random.Random(7))
    zipf = Zipf(len(topics), 1.07, rng)
    return [f"what did people say about {topics[zipf.sample()]} and {topics[zipf.sample()]}" for _ in range(n)]
