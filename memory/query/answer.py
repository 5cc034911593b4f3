"""Answer a question from one scope's memory: evidence first, a generated sentence only if it checks out.

The pipeline analyses the question once (memory/question.py), composes the evidence
pack, reranks the candidates with their conversational context (a learned model,
memory/query/rank_model.py), lets the learned decline decide whether the chat answers
the question, and builds an evidence-first reply (`reply.ReplyBuilder`). Under the
``model`` policy the model may then write one short lead sentence over the quoted
messages; it is shown only when `support.check_sentence` finds its names, numbers and
words in the messages it cites. Nothing the model says can add a citation, and weak
evidence is declined before any model runs.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..encoder.model import Encoder, shipped_encoder
from ..errors import ModelError
from ..ftsquery import stem
from ..groupstate import GroupState
from ..llm.base import INTERACTIVE, LLM
from ..llm.chat import generate  # picks the raw or chat form the model wants (memory/llm/chat.py)
from ..llm.prompts_chat import answer_messages
from ..models import StoredMessage
from ..question import Question, analyse, content_stems
from ..records import Records
from ..search import Searcher
from ..store import Person, Store
from ..timefmt import stamp
from .candidates import FEATURES, Candidate, coverage, features, gather
from .compose import Budgets, Composer, EvidencePack
from .discussion import DIRECT_COSINE, DIRECT_COVERAGE, View, discussion, on_topic, views
from .rank_model import Decline, Reranker, decline_features, shipped
from .reader_reply import reader_answer
from .reading import about, judge
from .reply import DECLINE, Ranking, ReplyBuilder, ReplyDraft, decline_lead
from .state_reply import StateReader
from .support import SupportResult, check_sentence, idf, sentences

if TYPE_CHECKING:
    from .reader import Reader

log = logging.getLogger(__name__)

ABSTAIN = DECLINE
Policy = Literal["evidence", "model"]
_CITE = re.compile(r"\[(\d{1,3})\]")
# Below this cosine to every candidate, a question none of whose words the chat uses is off topic. Chosen on
# SocialMemBench and FriendsQA; its false declines per dataset are in docs/replies.md.
OFF_TOPIC_COSINE = 0.35
DISCUSSION_ANCHORS = 12  # the best on-topic candidates whose discussions "each" and "who hasn't" read
_COS = FEATURES.index("cos")
# The model's own "the messages don't say": its sentence then turns the reply into a decline.
_DONT_KNOW = re.compile(r"\b(i don'?t know|i do not know|not (mentioned|in the messages)|no (answer|information))\b",
                        re.I)


@dataclass
class PersonaVoice:
    name: str = "Chorus"
    description: str = "the group's attentive, even-handed memory keeper"
    voice: str = "warm, brief and plain-spoken"
    cares_about: str = "keeping everyone's views straight"


@dataclass
class Answer:
    """A reply as the user reads it, with the messages it cites (in the order shown)."""

    text: str
    pack: EvidencePack
    cited: list[int]  # citation numbers as shown in ``text``
    abstained: bool
    prompt: str = ""
    prompt_tokens: int = 0
    model_used: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    draft: ReplyDraft | None = None
    generated: str = ""  # the model's sentence when it passed the support check
    support: SupportResult | None = None

    @property
    def cited_messages(self) -> list[StoredMessage]:
        return [q.message for q in self.draft.quoted] if self.draft else []


def answer_prompt(persona: PersonaVoice, question: str, evidence: str) -> str:
    """The completion-form prompt: one sentence over the quoted messages, citing them by number."""
    return (f"You are {persona.name}, {persona.description}. You speak in a {persona.voice} way.\n"
            "Below are messages from a group chat. Answer the question in one short sentence, using only "
            "words and facts from these messages, and put the number of each message you used in brackets, "
            "like [1]. If they do not answer it, write: I don't know.\n\n"
            f"{evidence}\n\nQuestion: {question.strip()}\nAnswer:")


class Answerer:
    """The query pipeline end to end: analyse, compose, rerank, decline or quote, optional checked sentence."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, llm: LLM | None, *,
                 persona: PersonaVoice | None = None, budgets: Budgets | None = None,
                 max_new_tokens: int = 48, policy: Policy = "evidence",
                 decline_below: float | None = None, reader: Reader | None = None,
                 models: Path | None = None, encoder: Encoder | None | Literal["shipped"] = "shipped") -> None:
        self.store = store
        self.searcher = searcher
        self.composer = Composer(store, searcher, records, budgets)
        self.llm = llm
        self.persona = persona or PersonaVoice()
        self.max_new_tokens = max_new_tokens
        self.policy: Policy = policy
        self.builder = ReplyBuilder()
        self.models = models  # the reply models' folder (memory/query/models by default)
        self._decline_below = decline_below  # None: the decline model's trained threshold
        self.reader = reader  # EGMemory's adaptive reader (answer.reader); its answer passes the same check
        # The fine-tuned encoder that judges the best candidates (memory/query/reading.py); None: the reranker's
        # order and the feature decline alone (how training rows are built, and the measured baseline).
        self._encoder = encoder
        self.states = StateReader(store, GroupState(records), self.builder)

    @property
    def decline_below(self) -> float:
        """The probability under which the reply declines: answer.decline_below, else the judging model's
        trained threshold (the encoder's, or the feature decline's without it)."""
        if self._decline_below is not None:
            return self._decline_below
        encoder = self.encoder()
        return encoder.threshold if encoder is not None else self.shipped()[1].threshold

    def encoder(self) -> Encoder | None:
        """The judging encoder, loaded on first use (None when this answerer runs without one)."""
        if self._encoder == "shipped":
            self._encoder = shipped_encoder()
        return self._encoder

    def shipped(self) -> tuple[Reranker, Decline]:
        """The reranker and the decline, loaded on first use (ModelMissing names the fix when absent)."""
        return shipped(str(self.models) if self.models else None)

    def analyse(self, scope_ids: list[int], question: str, *, asked_at: float | None = None,
                asker_id: str | None = None, roster: list[Person] | None = None) -> Question:
        """The question analysis against this channel's roster and vocabulary."""
        return analyse(question, roster if roster is not None else self.roster(scope_ids),
                       asked_at=asked_at or time.time(), asker_id=asker_id,
                       known=lambda words: self.known_words(scope_ids, words))

    def prepare(self, scope_ids: list[int], question: Question | str, *, asked_at: float | None = None,
                asker_id: str | None = None, exclude: frozenset[int] = frozenset(),
                **ablations: bool) -> tuple[EvidencePack, str, dict[str, str]]:
        """Everything up to the reply: the pack and its rendered evidence (no generation).

        ``question`` is the caller's analysed ``Question`` (the bot analyses once, see ``Bot.question``);
        plain text, as tests and evaluation pass it, is analysed here, asked at ``asked_at`` by ``asker_id``.
        """
        t = time.perf_counter()
        roster = self.roster(scope_ids)
        q = question if isinstance(question, Question) else \
            self.analyse(scope_ids, question, asked_at=asked_at, asker_id=asker_id, roster=roster)
        t_analyse = (time.perf_counter() - t) * 1000
        pack = self.composer.compose(scope_ids, q, roster, exclude=exclude, **ablations)
        pack.roster = roster
        pack.timings_ms["analyse"] = t_analyse
        names = {p.person_id: p.display_name for p in roster}
        evidence = pack.render(names)
        pack.timings_ms["prepare_total"] = (time.perf_counter() - t) * 1000
        return pack, evidence, names

    def roster(self, scope_ids: list[int]) -> list[Person]:
        return [p for sid in scope_ids for p in self.store.roster(sid)]

    def answer(self, scope_ids: list[int], question: Question | str, *, policy: Policy | None = None,
               **kw) -> Answer:
        """The reply to ``question`` (a ``Question``, or text analysed as in ``prepare``); ``policy`` overrides the
        configured one for this call."""
        t0 = time.perf_counter()
        pack, evidence, _ = self.prepare(scope_ids, question, **kw)
        timings = dict(pack.timings_ms)
        exclude = kw.get("exclude", frozenset())
        draft = self.draft(scope_ids, pack, exclude)
        timings["reply"] = (time.perf_counter() - t0) * 1000 - timings.get("prepare_total", 0.0)
        ans = Answer(draft.text(), pack, [q.n for q in draft.quoted], draft.declined, timings_ms=timings,
                     notes=list(draft.notes), draft=draft)
        if (policy or self.policy) == "model" and self.llm is not None and draft.kind == "evidence" \
                and draft.quoted:
            if self.reader is None or not reader_answer(self.reader, ans, scope_ids, pack.question, exclude=exclude):
                self._generate(pack.question.text, ans)
        timings["total"] = (time.perf_counter() - t0) * 1000
        return ans

    def candidates(self, scope_ids: list[int], pack: EvidencePack, exclude: frozenset[int] = frozenset()
                   ) -> tuple[list[Candidate], np.ndarray, tuple[int, dict[str, int]]]:
        """The pack's candidates with their context, their features (what the reranker and training read),
        and the visible scopes' document frequencies of the question's topic stems (read once, used twice)."""
        q = pack.question
        roster = pack.roster if pack.roster is not None else self.roster(scope_ids)
        extra: list[StoredMessage] = []
        if q.wants_members:  # each member's best message, so "each" and "who hasn't" see every member
            members = [p.person_id for p in roster if not p.is_bot]
            found = pack.per_author
            if found is None or any(p not in found for p in members):
                found = self.searcher.best_by_authors(scope_ids, q.issue, members)
            extra = list(found.values())
        cands = gather(self.store, pack.hits, exclude=exclude, extra=extra)
        ids = {m.id for c in cands for m in (c.message, *c.prev, c.next, c.parent) if m is not None}
        sims = self.similarities(scope_ids, q.dense_text, sorted(ids))
        stats = self.doc_freqs(scope_ids, q.stems)
        weights = self.term_weights(scope_ids, q.stems, stats)
        stored = self.store.parsed({m.id for c in cands for m in (c.message, *c.prev[:1])})
        return cands, features(q, cands, roster, weights, sims, stored), stats

    def rank(self, scope_ids: list[int], pack: EvidencePack, exclude: frozenset[int] = frozenset()) -> Ranking:
        """The pack's candidates in context, scored by the reranker, and the decline's verdict."""
        q = pack.question
        reranker, decline = self.shipped()
        cands, x, stats = self.candidates(scope_ids, pack, exclude)
        scores = reranker.score(x)
        order = [int(i) for i in np.lexsort((np.arange(len(cands)), -scores))] if len(cands) else []
        for i, c in enumerate(cands):
            c.score = float(scores[i])
        vocab = self.vocab_share(scope_ids, q.stems, exclude, stats)
        # Off topic, whatever the model says: no topic word of the question occurs in the visible chat, nobody
        # is named, and no message is even loosely close in meaning (docs/replies.md measures this gate).
        off_topic = vocab == 0 and not q.named and (len(cands) == 0 or float(x[:, _COS].max()) < OFF_TOPIC_COSINE)
        encoder = self.encoder()
        if encoder is None:
            p = decline.probability(decline_features(q, x, scores, order, vocab))
            return Ranking(cands, x, scores, order, p, p >= self.decline_below and not off_topic, q.stems)
        judged = judge(encoder, q.reader_text or q.text, cands, order, scores)
        return Ranking(cands, x, scores, judged.order, judged.best,
                       judged.best >= self.decline_below and not off_topic, q.stems, judged.readings,
                       self.decline_below)

    def draft(self, scope_ids: list[int], pack: EvidencePack, exclude: frozenset[int] = frozenset()) -> ReplyDraft:
        """The evidence-first reply for a composed pack (deterministic, no model)."""
        q = pack.question
        roster = pack.roster if pack.roster is not None else self.roster(scope_ids)
        if q.group_ask:
            group = self.states.decided(scope_ids, exclude)
            if group is not None:
                return group
        early = self.builder.preliminary(q, roster, bool(pack.hits) or bool(pack.per_author))
        if early is not None:
            return early
        ranking = self.rank(scope_ids, pack, exclude)
        views = self.member_views(scope_ids, q, ranking, roster, exclude) if q.wants_members else None
        draft = self.builder.build(q, ranking, roster, views)
        if draft.kind in ("evidence", "change") and q.reads_chain:
            # The answer rests on a plan or decision that changed, and the question names which version it
            # wants: read that end of its history. Otherwise the reader's order stands (docs/replies.md).
            chain = self.states.chain_of(ranking)
            era = q.era if q.era != "now" or not q.change else "history"
            state = self.states.draft(era, chain, q.stems, ranking.p_answer, exclude, ranking) if chain else None
            if state is not None:
                draft = state
        draft.notes.append(f"p(answer) {ranking.p_answer:.3f} (threshold {self.decline_below:.3f}); "
                           f"kind {q.kind}; {'; '.join(q.reasons)}")
        return draft

    def member_views(self, scope_ids: list[int], q: Question, ranking: Ranking, roster: list[Person],
                     exclude: frozenset[int] = frozenset()) -> list[View]:
        """Each asked-about member's part in the discussion the best on-topic candidates belong to."""
        members = q.named if len(q.named) >= 2 else [p.person_id for p in roster if not p.is_bot]
        anchors = [ranking.cands[i].message for i in ranking.order if ranking.on_topic(i)][:DISCUSSION_ANCHORS]
        if not anchors:
            return views([], {}, members)
        msgs = discussion(self.store, anchors, exclude=exclude)
        sims = self.similarities(scope_ids, q.dense_text, [m.id for m in msgs])
        weights = self.term_weights(scope_ids, q.stems)
        encoder = self.encoder()
        read = about(encoder, q, msgs, weights, sims) if encoder is not None else None

        def direct(m: StoredMessage) -> float:
            if read is not None:  # the reader says whether the message speaks to the question
                return read.get(m.id, 0.0)
            cov = coverage(q.stems, weights, set(content_stems(m.text)))
            cos = sims.get(m.id, 0.0)
            return max(cov, cos) if cov >= DIRECT_COVERAGE or cos >= DIRECT_COSINE else 0.0

        links = {mid: a.link.target for mid, a in self.store.analyses([m.id for m in msgs]).items()
                 if a.link is not None and a.link.kind in ("answers", "confirms")}
        return views(msgs, on_topic(msgs, direct, links), members)

    def similarities(self, scope_ids: list[int], text: str, ids: list[int]) -> dict[int, float]:
        """Cosine of the question to each candidate's vector (none when the embedder is unavailable)."""
        if self.store.embedder is None or not ids:
            return {}
        qv = self.searcher.vector_or_none(text)
        return {} if qv is None else self.searcher.vectors.similarities(scope_ids, qv, ids)

    def doc_freqs(self, scope_ids: list[int], stems: list[str]) -> tuple[int, dict[str, int]]:
        """The number of messages and each stem's document frequency in the visible scopes."""
        stats = self.store.term_stats(scope_ids, stems)
        return stats.n or 1, {s: int(stats.df.get(s, 0)) for s in stems}

    def term_weights(self, scope_ids: list[int], stems: list[str],
                     stats: tuple[int, dict[str, int]] | None = None) -> dict[str, float]:
        """IDF of each stem over the visible scopes' messages (rare words say more about relevance);
        ``stats``: their `doc_freqs` when the caller has read them."""
        if not stems:
            return {}
        n, df = stats if stats is not None else self.doc_freqs(scope_ids, stems)
        return {s: idf(df[s], n) for s in stems}

    def known_words(self, scope_ids: list[int], words: list[str]) -> set[str]:
        """Those of ``words`` (lower-cased) that the visible scopes' messages use."""
        if not words:
            return set()
        by_stem = {stem(w): w for w in words}
        _, df = self.doc_freqs(scope_ids, list(by_stem))
        return {by_stem[s] for s, d in df.items() if d > 0}

    def vocab_share(self, scope_ids: list[int], stems: list[str], exclude: frozenset[int] = frozenset(),
                    stats: tuple[int, dict[str, int]] | None = None) -> float:
        """The share of the question's topic stems that the visible scopes' messages use at all.

        ``exclude``d messages do not count (a counterfactual: the evidence taken out of the store);
        ``stats``: the stems' `doc_freqs` when the caller has read them.
        """
        if not stems:
            return 1.0
        df = dict((stats if stats is not None else self.doc_freqs(scope_ids, stems))[1])
        if exclude:
            for m in self.store.messages(sorted(exclude)):
                if m.to_bot:  # questions to the bot are never indexed, so they were never counted
                    continue
                for s in set(content_stems(m.text)) & set(df):
                    df[s] -= 1
        return sum(1 for s in stems if df.get(s, 0) > 0) / len(stems)

    # ------------------------------------------------------------------ the model's sentence
    def _generate(self, question: str, ans: Answer) -> None:
        draft = ans.draft
        assert draft is not None
        evidence = "\n".join(f"[{q.n}] {q.message.author_name} ({stamp(q.message.ts)[:10]}): {q.quote}"
                             for q in draft.quoted)
        ans.prompt = answer_prompt(self.persona, question, evidence)
        t = time.perf_counter()
        try:
            out = generate(self.llm, raw_prompt=ans.prompt, messages=answer_messages(self.persona, question, evidence),
                           max_tokens=self.max_new_tokens, temperature=0.0, stop=["\nQuestion:", "\n\n", "\n["],
                           chat_stop=["\n\n"], priority=INTERACTIVE)
        except ModelError as exc:
            log.warning("answer model failed: %s", exc)
            ans.notes.append(f"model unavailable: {exc}")
            return
        finally:
            ans.timings_ms["generate"] = (time.perf_counter() - t) * 1000
        ans.model_used = True
        ans.prompt_tokens = out.prompt_tokens
        text = " ".join(out.text.split())
        if _DONT_KNOW.search(text) and len(text) < 80:
            # The model, shown only these messages, says they do not answer it: decline, keep them as the closest.
            lead = decline_lead(ans.pack.question) + " The closest I found:"
            draft.lead, draft.kind, draft.declined = lead, "decline", True
            ans.abstained, ans.text = True, draft.text()
            ans.notes.append("the model found no answer in the quoted messages")
            return
        sentence, result = self.check(text, draft)
        ans.support = result
        if sentence:
            ans.generated = sentence
            draft.lead = sentence
            ans.text = draft.text()
        else:
            ans.notes.append(f"model sentence not shown ({result.reason}): {text[:200]!r}")

    @staticmethod
    def check(text: str, draft: ReplyDraft) -> tuple[str, SupportResult]:
        """The model's answer if every sentence passes the support check against what it cites, else ''."""
        quoted = {q.n: q for q in draft.quoted}
        kept: list[str] = []
        result = SupportResult(False, reason="empty answer")
        for sentence in sentences(text)[:2]:
            marks = [int(n) for n in _CITE.findall(sentence)]
            unknown = [n for n in marks if n not in quoted]
            if unknown:
                return "", SupportResult(False, reason=f"cites [{unknown[0]}], which the reply does not show")
            cited = {n: f"{quoted[n].message.author_name}: {quoted[n].message.text}" for n in dict.fromkeys(marks)}
            names = [quoted[n].message.author_name for n in cited]
            result = check_sentence(sentence, cited, known_names=names)
            if not result.ok:
                return "", result
            kept.append(sentence)
        return " ".join(kept), result
