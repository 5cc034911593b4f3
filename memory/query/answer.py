"""Answer a question from one scope's memory: evidence first, a generated sentence only if it checks out.

The pipeline projects the question, composes the evidence pack, and builds an
evidence-first reply (`reply.ReplyBuilder`). Under the ``model`` policy the model
may then write one short lead sentence over the quoted messages; it is shown only
when `support.check_sentence` finds its names, numbers and words in the messages
it cites. Nothing the model says can add a citation, and weak evidence is declined
before any model runs.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..errors import ModelError
from ..ftsquery import stem
from ..llm.base import INTERACTIVE, LLM
from ..llm.chat import generate  # picks the raw or chat form the model wants (memory/llm/chat.py)
from ..llm.prompts_chat import answer_messages
from ..models import StoredMessage
from ..records import GROUP, GROUP_LAYERS, Records
from ..search import Searcher
from ..store import Person, Store
from ..timefmt import stamp
from .compose import Budgets, Composer, EvidencePack
from .project import Projection, project
from .reader_reply import reader_answer
from .reply import DECLINE, ReplyBuilder, ReplyDraft, question_stems, wants_members
from .support import SupportResult, check_sentence, idf, sentences

if TYPE_CHECKING:
    from .reader import Reader

log = logging.getLogger(__name__)

ABSTAIN = DECLINE
Policy = Literal["evidence", "model"]
# Decline below this evidence strength (the best quoted message's relevance: IDF-weighted share of the
# question's topic words, slot-aware, or closeness in meaning). Chosen leave-one-dataset-out
# (docs/replies.md): the strictest value keeping false declines at or under 10% on each tuning split.
DECLINE_BELOW = 0.05
_CITE = re.compile(r"\[(\d{1,3})\]")
# "What did we decide?", "what's the plan?", "any rules?": no topic word, but the group's own records answer it.
_GROUP_ASK = re.compile(r"\b(decid\w*|decision\w*|agree\w*|plans?|planned|rules?|settled|norms?)\b", re.I)
GROUP_QUOTES = 3
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


def without_names(question: str, roster: list[Person]) -> str:
    """The question with members' names taken out, so closeness in meaning is about the topic.

    Stored vectors embed "author: text"; a name in the question would pull every message of that
    person closer, whatever it says.
    """
    names = sorted({n for p in roster for n in (*p.names(), p.display_name.split()[0]) if len(n) > 1},
                   key=len, reverse=True)
    if not names:
        return question
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in names) + r")(?:'s|’s)?(?!\w)", re.I)
    stripped = " ".join(pattern.sub(" ", question).split())
    return stripped or question


class Answerer:
    """The query pipeline end to end: project, compose, evidence-first reply, optional checked sentence."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, llm: LLM | None, *,
                 persona: PersonaVoice | None = None, budgets: Budgets | None = None,
                 max_new_tokens: int = 48, policy: Policy = "evidence",
                 decline_below: float = DECLINE_BELOW, reader: Reader | None = None) -> None:
        self.store = store
        self.searcher = searcher
        self.composer = Composer(store, searcher, records, budgets)
        self.llm = llm
        self.persona = persona or PersonaVoice()
        self.max_new_tokens = max_new_tokens
        self.policy: Policy = policy
        self.builder = ReplyBuilder(decline_below=decline_below)
        self.reader = reader  # EGMemory's adaptive reader (answer.reader); its answer passes the same check

    def prepare(self, scope_ids: list[int], question: str, *, asked_at: float | None = None,
                asker_id: str | None = None, exclude: frozenset[int] = frozenset(),
                **ablations: bool) -> tuple[EvidencePack, str, dict[str, str]]:
        """Everything up to the reply: the pack and its rendered evidence (no generation)."""
        t = time.perf_counter()
        roster = self.roster(scope_ids)
        asked_at = asked_at or time.time()
        projection: Projection = project(question, roster, asked_at=asked_at, asker_id=asker_id)
        t_project = (time.perf_counter() - t) * 1000
        pack = self.composer.compose(scope_ids, question, projection, roster, exclude=exclude, asked_at=asked_at,
                                     **ablations)
        pack.timings_ms["project"] = t_project
        names = {p.person_id: p.display_name for p in roster}
        evidence = pack.render(names)
        pack.timings_ms["prepare_total"] = (time.perf_counter() - t) * 1000
        return pack, evidence, names

    def roster(self, scope_ids: list[int]) -> list[Person]:
        return [p for sid in scope_ids for p in self.store.roster(sid)]

    def answer(self, scope_ids: list[int], question: str, *, policy: Policy | None = None, **kw) -> Answer:
        """The reply to ``question``; ``policy`` overrides the configured one for this call."""
        t0 = time.perf_counter()
        pack, evidence, _ = self.prepare(scope_ids, question, **kw)
        timings = dict(pack.timings_ms)
        exclude = kw.get("exclude", frozenset())
        draft = self.draft(scope_ids, question, pack, exclude)
        timings["reply"] = (time.perf_counter() - t0) * 1000 - timings.get("prepare_total", 0.0)
        ans = Answer(draft.text(), pack, [q.n for q in draft.quoted], draft.declined, timings_ms=timings,
                     notes=list(draft.notes), draft=draft)
        if (policy or self.policy) == "model" and self.llm is not None and draft.kind == "evidence" \
                and draft.quoted:
            if self.reader is None or not reader_answer(self.reader, ans, scope_ids, question,
                                                        self.roster(scope_ids), **kw):
                self._generate(question, ans)
        timings["total"] = (time.perf_counter() - t0) * 1000
        return ans

    def draft(self, scope_ids: list[int], question: str, pack: EvidencePack,
              exclude: frozenset[int] = frozenset()) -> ReplyDraft:
        """The evidence-first reply for a composed pack (deterministic, no model)."""
        roster = self.roster(scope_ids)
        ranked = [m for m in pack.ranked(10) if m.id not in exclude and not m.to_bot]
        stems = question_stems(question, roster)
        if not stems and not pack.projection.people and _GROUP_ASK.search(question):
            group = self.group_messages(scope_ids, exclude)
            if group:
                return ReplyDraft("Here's what the group settled on, newest first:", self.builder.quotes(group, []),
                                  False, "group", 1.0)
        weights = self.term_weights(stems, scope_ids)
        members = [p.person_id for p in roster if not p.is_bot]
        per_author = None
        if members and wants_members(question, len(pack.projection.people)):
            found = pack.per_author  # the rows' fallbacks, found with the same query, when rows needed them
            if found is None or any(p not in found for p in members if p in pack.projection.people):
                found = self.searcher.best_by_authors(scope_ids, pack.projection.issue, members)
            per_author = {a: m for a, m in found.items() if m.id not in exclude and not m.to_bot}
        follow_ups: dict[int, tuple[StoredMessage, StoredMessage]] = {}
        # Messages right after the best hits: short replies ("paid too") speak to the same topic, and the
        # answers to a question or proposal ("should we get a cat?" - "I'm allergic") to the question.
        anchors = ranked[:5] if per_author is not None else [m for m in ranked[:3] if "?" in m.text]
        for anchor in anchors:
            for m in self.store.neighbours(anchor, before=0, after=3):
                if m.id != anchor.id and m.id not in exclude and not m.to_bot:
                    follow_ups.setdefault(m.id, (m, anchor))
        known = self.known_words(question, scope_ids)
        sims = self.similarities(scope_ids, without_names(question, roster),
                                 [m.id for m in ranked] + [m.id for m in (per_author or {}).values()]
                                 + list(follow_ups))
        return self.builder.build(question, pack, ranked, roster, weights, per_author=per_author,
                                  known_words=known, sims=sims, follow_ups=follow_ups)

    def group_messages(self, scope_ids: list[int], exclude: frozenset[int] = frozenset()) -> list[StoredMessage]:
        """The messages the group's current decisions, plans and rules rest on, newest first.

        Only GROUP records qualify, and the gate files one only on a message that speaks for the group, so
        each quoted message is the checked provenance of a group record, not a search guess.
        """
        records = self.composer.records
        heads = records.heads(scope_ids, owners=[GROUP], layers=list(GROUP_LAYERS))
        ids = {mid for r in records.get([h.id for h in heads], with_sources=True) for mid in r.sources}
        msgs = [m for m in self.store.messages(sorted(ids)) if m.id not in exclude and not m.to_bot]
        return sorted(msgs, key=lambda m: (m.ts, m.id), reverse=True)[:GROUP_QUOTES]

    def similarities(self, scope_ids: list[int], text: str, ids: list[int]) -> dict[int, float]:
        """Cosine of the question to each candidate's vector (none when the embedder is unavailable)."""
        if self.store.embedder is None or not ids:
            return {}
        qv = self.searcher.vector_or_none(text)
        return {} if qv is None else self.searcher.vectors.similarities(scope_ids, qv, ids)

    def term_weights(self, stems: list[str], scope_ids: list[int]) -> dict[str, float]:
        """IDF of each stem over the messages of the scopes the asker may see (rare words say more).

        Only those scopes count: a word's rarity elsewhere in the file must not change a reply here.
        """
        if not stems:
            return {}
        stats = self.store.term_stats(scope_ids, stems)
        return {s: idf(int(stats.df.get(s, 0)), stats.n or 1) for s in stems}

    def known_words(self, question: str, scope_ids: list[int]) -> set[str]:
        """Capitalised words of the question that occur in the messages of the scopes the asker may see."""
        words = {w.casefold() for w in re.findall(r"(?<![\w'’])[A-Z][a-z]{2,}", question)}
        if not words:
            return set()
        by_stem = {stem(w): w for w in words}
        return {by_stem[s] for s in self.store.vocabulary(scope_ids, list(by_stem))}

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
            draft.lead, draft.kind, draft.declined = DECLINE + " The closest I found:", "decline", True
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
