"""Answer in the persona's voice from one evidence pack, with citations that exist.

The model sees the evidence and rules in our own words; a post-check removes
citation markers that point at nothing, adds the sources when the model cited
none, and turns an answer with no evidence behind it into a plain abstention.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from ..errors import ModelError
from ..llm.base import INTERACTIVE, LLM
from ..records import Records
from ..search import Searcher
from ..store import Person, Store
from .compose import Budgets, Composer, EvidencePack
from .project import Projection, project

log = logging.getLogger(__name__)

ABSTAIN = "I don't have anything in this channel's memory that answers that."
_CITE = re.compile(r"\[(\d{1,3})\]")
_ABSTAIN_WORDS = re.compile(r"\b(no information|not (mentioned|say|said|know)|don'?t know|do not know|"
                            r"cannot (tell|determine|answer)|can'?t (tell|say)|nothing (about|in))\b", re.I)


@dataclass
class PersonaVoice:
    name: str = "Chorus"
    description: str = "the group's attentive, even-handed memory keeper"
    voice: str = "warm, brief and plain-spoken"
    cares_about: str = "keeping everyone's views straight"


@dataclass
class Answer:
    text: str
    pack: EvidencePack
    cited: list[int]
    abstained: bool
    prompt: str = ""
    prompt_tokens: int = 0
    model_used: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def answer_prompt(persona: PersonaVoice, question: str, evidence: str) -> str:
    return (f"You are {persona.name}, {persona.description}. You speak in a {persona.voice} way.\n"
            "Answer the question about this group chat using only the evidence below.\n"
            "Rules: cite the evidence you use by its number, like [2]. Keep each person's view separate and "
            "never replace what one person thinks with what the group decided. If the evidence does not contain "
            "the answer, say plainly that you don't know.\n\n"
            f"{evidence}\n\nQuestion: {question.strip()}\nAnswer:")


class Answerer:
    """The query pipeline end to end: project, compose, answer, post-check."""

    def __init__(self, store: Store, searcher: Searcher, records: Records, llm: LLM | None, *,
                 persona: PersonaVoice | None = None, budgets: Budgets | None = None,
                 max_new_tokens: int = 64) -> None:
        self.store = store
        self.composer = Composer(store, searcher, records, budgets)
        self.llm = llm
        self.persona = persona or PersonaVoice()
        self.max_new_tokens = max_new_tokens

    def prepare(self, scope_ids: list[int], question: str, *, asked_at: float | None = None,
                asker_id: str | None = None, exclude: frozenset[int] = frozenset(),
                **ablations: bool) -> tuple[EvidencePack, str, dict[str, str]]:
        """Everything up to the model call: the pack and the prompt (no generation)."""
        t = time.perf_counter()
        roster: list[Person] = [p for sid in scope_ids for p in self.store.roster(sid)]
        projection: Projection = project(question, roster, asked_at=asked_at or time.time(), asker_id=asker_id)
        t_project = (time.perf_counter() - t) * 1000
        pack = self.composer.compose(scope_ids, question, projection, roster, exclude=exclude, **ablations)
        pack.timings_ms["project"] = t_project
        names = {p.person_id: p.display_name for p in roster}
        prompt = answer_prompt(self.persona, question, pack.render(names))
        pack.timings_ms["prepare_total"] = (time.perf_counter() - t) * 1000
        return pack, prompt, names

    def answer(self, scope_ids: list[int], question: str, **kw) -> Answer:
        pack, prompt, _ = self.prepare(scope_ids, question, **kw)
        timings = dict(pack.timings_ms)
        if not pack.cites:
            return Answer(ABSTAIN, pack, [], True, prompt, timings_ms=timings, notes=["no evidence found"])
        notes: list[str] = []
        text = ""
        prompt_tokens = 0
        if self.llm is not None:
            t = time.perf_counter()
            try:
                out = self.llm.complete(prompt, max_tokens=self.max_new_tokens, temperature=0.0,
                                        stop=["\nQuestion:", "\n\n"], priority=INTERACTIVE)
                text = " ".join(out.text.split())
                prompt_tokens = out.prompt_tokens
            except ModelError as exc:
                log.warning("answer model failed: %s", exc)
                notes.append(f"model unavailable: {exc}")
            timings["generate"] = (time.perf_counter() - t) * 1000
        if not text:
            return self._evidence_only(pack, prompt, timings, notes)
        text, cited, dropped = self.post_check(text, pack)
        if dropped:
            notes.append(f"dropped citations that point at nothing: {dropped}")
        abstained = bool(_ABSTAIN_WORDS.search(text)) and not cited
        if not cited and not abstained:
            cited = [c.n for c in pack.cites[:3]]
            text += " (sources: " + " ".join(f"[{n}]" for n in cited) + ")"
        return Answer(text, pack, cited, abstained, prompt, prompt_tokens, True, timings, notes)

    @staticmethod
    def post_check(text: str, pack: EvidencePack) -> tuple[str, list[int], list[int]]:
        """Remove [n] markers that cite nothing; return the text, real citations and dropped ones."""
        valid = {c.n for c in pack.cites}
        cited: list[int] = []
        dropped: list[int] = []

        def fix(m: re.Match) -> str:
            n = int(m.group(1))
            if n in valid:
                if n not in cited:
                    cited.append(n)
                return m.group(0)
            dropped.append(n)
            return ""

        cleaned = re.sub(r"\s+([.,;:!?])", r"\1", _CITE.sub(fix, text)).strip()
        return cleaned, cited, dropped

    def _evidence_only(self, pack: EvidencePack, prompt: str, timings: dict, notes: list[str]) -> Answer:
        """No model output: show the best evidence itself, best first."""
        by_id = {c.message.id: c.n for c in pack.cites}
        ranked = [by_id[h.message.id] for h in pack.hits if h.message.id in by_id][:3] or [pack.cites[0].n]
        return Answer("Here is what I remember that looks relevant: " + " ".join(f"[{n}]" for n in ranked),
                      pack, ranked, False, prompt, timings_ms=timings, notes=notes)
