"""The platform-neutral bot: what happens on a message, a mention and a command.

Adapters translate platform events into ``Message`` values and call ``Bot``;
they render the ``Reply`` it returns. Ingest never calls a model.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self, Unpack

from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import shipped_models
from memory.analysis.types import ActModel, LinkModel
from memory.catchup import subscriptions
from memory.embeddings.base import Embedder
from memory.errors import ChorusError, EmbeddingError, ModelError
from memory.llm.base import LLM, Completion, Options
from memory.models import Message, ScopeKey, clean_text
from memory.query.answer import Answerer, PersonaVoice, Policy
from memory.query.compose import Budgets
from memory.question import Question
from memory.records import GROUP, Records
from memory.records_sync import attach
from memory.search import Searcher
from memory.store import Store
from memory.timefmt import stamp
from memory.writer.insights import Persona
from memory.writer.verify import RosterIndex
from memory.writer.writer import Writer, WriterConfig

from .config import Settings
from .door import Door, Remembered
from .memory_views import profile_reply, timeline_reply
from .replies import Citation, Reply, cut_for_chat
from .status import read_status

log = logging.getLogger(__name__)


def load_embedder_from(settings: Settings) -> Embedder:
    from memory.embeddings.factory import load_embedder

    cfg = settings.embeddings
    return load_embedder(cfg.backend, cfg.model_path or None, n_gpu_layers=cfg.n_gpu_layers,
                         n_threads=cfg.n_threads or None, dtype=cfg.dtype or None)


def load_llm_from(settings: Settings) -> LLM:
    from memory.llm.factory import load_llm

    cfg = settings.llm
    if cfg.backend == "openai":
        return load_llm("openai", base_url=cfg.base_url, model=cfg.model, api_key_env=cfg.api_key_env or None,
                        timeout=cfg.timeout, max_retries=cfg.max_retries, structured=cfg.structured,
                        prompt_form=cfg.prompt_form, n_ctx=cfg.n_ctx)
    return load_llm("llama", cfg.model_path or None, n_ctx=cfg.n_ctx, n_gpu_layers=cfg.n_gpu_layers,
                    n_threads=cfg.n_threads or None, seed=cfg.seed, prompt_form=cfg.prompt_form)


def uses_shipped_model(settings: Settings) -> bool:
    """Whether the language model is the tiny one shipped on PyPI (the "auto" settings follow it)."""
    return settings.llm.backend == "llama" and not settings.llm.model_path


def writer_config(settings: Settings) -> WriterConfig:
    w = settings.writer
    return WriterConfig(window_messages=w.window_messages, max_failures=w.max_failures,
                        grounding_threshold=w.grounding_threshold, max_new_tokens=w.max_new_tokens,
                        heads_token_budget=w.heads_token_budget, idle_gap_s=settings.store.idle_gap_minutes * 60,
                        extractive=w.content_mode == "extractive" or (
                            w.content_mode == "auto" and uses_shipped_model(settings)),
                        insights=not uses_shipped_model(settings), after_analysis=settings.analysis.enabled)


def persona_of(settings: Settings) -> Persona | None:
    """The persona for insights, or None when insights are switched off."""
    p = settings.persona
    return Persona(p.name, p.description, p.voice, p.cares_about) if p.insights else None


def parse_scope(text: str) -> ScopeKey:
    parts = text.split(":")
    if len(parts) != 3:
        raise ChorusError(f"scope {text!r} must be written platform:workspace:channel")
    return ScopeKey(*parts)


class NoModel(LLM):
    """Stands in for the language model where none is loaded: any call raises ``ModelError``."""

    name = "none"
    n_ctx = 0

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def complete(self, prompt: str, *, max_tokens: int, **options: Unpack[Options]) -> Completion:
        raise ModelError(self.reason)

    def count_tokens(self, text: str) -> int:
        raise ModelError(self.reason)


class Bot:
    """Holds the store, search and models; every adapter talks to one of these."""

    def __init__(self, settings: Settings, *, store: Store | None = None, embedder: Embedder | None = None,
                 llm: LLM | None = None, load_models: bool = True,
                 analysis_models: tuple[ActModel, LinkModel] | None = None) -> None:
        self.settings = settings
        if embedder is None and load_models:
            embedder = load_embedder_from(settings)
        self.store = store or Store(Path(settings.store.path).expanduser(), embedder=embedder,
                                    idle_gap_s=settings.store.idle_gap_minutes * 60)
        self.searcher = Searcher(self.store)
        self.records = Records(self.store)
        attach(self.store, self.records, threshold=settings.writer.grounding_threshold)
        subscriptions.attach(self.store)  # forgetting a member forgets their digest subscriptions too
        self._writer: Writer | None = None
        self._llm = llm
        self._llm_error: str | None = None
        self._llm_lock = threading.Lock()
        self._load_models = load_models
        self._links = [[parse_scope(s) for s in group] for group in settings.scopes.links]
        self._embed_wakeup = threading.Event()
        self._embed_stop = threading.Event()
        self._embed_thread: threading.Thread | None = None
        self._analysis: AnalysisPass | None = None
        self._analysis_error: str | None = None
        self._analysis_models = analysis_models  # None: the shipped models, loaded on first use
        # The one door into the store: the privacy gate, then the store or (locked, disk full) the retry queue.
        self.door = Door(self.store, default_opt_in=settings.scopes.default_opt_in, on_stored=self._wake_embedder)

    # ---------------------------------------------------------------- models
    @property
    def llm(self) -> LLM | None:
        """The shared language model, loaded on first use; None (with a logged reason) if it cannot load."""
        if self._llm is not None or not self._load_models:
            return self._llm
        with self._llm_lock:
            if self._llm is None and self._llm_error is None:
                try:
                    self._llm = load_llm_from(self.settings)
                except ModelError as exc:
                    self._llm_error = str(exc)
                    log.error("language model unavailable: %s", exc)
        return self._llm

    @property
    def llm_error(self) -> str | None:
        """Why the language model could not be loaded; None if it loaded or was never tried."""
        return self._llm_error

    def writer(self) -> Writer | None:
        """The memory writer, sharing this bot's model; None when no model can be loaded."""
        if self._writer is None:
            llm = self.llm
            if llm is None:
                return None
            config = writer_config(self.settings)
            # The writer waits for the analysis of its window only while the analysis pass can run.
            config.after_analysis = config.after_analysis and self.analysis is not None
            self._writer = Writer(self.store, llm, records=self.records, persona=persona_of(self.settings),
                                  config=config)
        return self._writer

    def read_only_writer(self) -> Writer:
        """The writer's bookkeeping (lag, quarantine, speed) without loading a model.

        ``chorus status`` reads it; a window run through it fails with the reason there is no model.
        """
        return Writer(self.store, NoModel(self._llm_error or "no language model is loaded (read-only use)"),
                      records=self.records)

    # ---------------------------------------------------------------- scopes
    def scope_ids(self, key: ScopeKey) -> list[int]:
        """The scope itself plus any scopes the operator linked to it in the config."""
        own = self.store.scope_id(key)
        ids = [own] if own is not None else []
        for group in self._links:
            if key in group:
                for other in group:
                    sid = self.store.scope_id(other)
                    if sid is not None and sid not in ids:
                        ids.append(sid)
        return ids

    # ---------------------------------------------------------------- events
    def remember(self, messages: list[Message], *, embed: bool = False, batch_size: int = 256,
                 progress: Callable[[int], None] | None = None, default_opt_in: bool | None = None) -> Remembered:
        """Remember messages through the one door (``bot.door``): privacy gate, then store or retry queue.

        No model runs on this path: vectors and the analysis follow from the background backlog.
        """
        return self.door.remember(messages, embed=embed, batch_size=batch_size, progress=progress,
                                  default_opt_in=default_opt_in)

    def _wake_embedder(self) -> None:
        if self.store.embedder is not None or self.settings.analysis.enabled:
            self._start_embedder()
            self._embed_wakeup.set()

    def _start_embedder(self) -> None:
        if self._embed_thread is None or not self._embed_thread.is_alive():
            self._embed_thread = threading.Thread(target=self._embed_loop, name="chorus-embed", daemon=True)
            self._embed_thread.start()

    def _embed_loop(self) -> None:
        """The backlog thread: vectors first, then the analysis that reads them, a batch at a time each."""
        while not self._embed_stop.is_set():
            self._embed_wakeup.wait(timeout=5.0)
            self._embed_wakeup.clear()
            if self._embed_stop.is_set() or self.store.closed:
                break
            try:  # one batch at a time, so closing never waits for a whole backlog
                while not self._embed_stop.is_set() and (self._embed_batch() + self._analysis_batch()):
                    pass
            except Exception:  # a background job is a boundary: log, retry on the next wake-up
                log.exception("backlog crashed")

    def _embed_batch(self) -> int:
        if self.store.embedder is None:
            return 0
        try:
            return self.store.embed_pending(batch_size=64, limit=64)
        except ChorusError as exc:
            log.error("embedding backlog failed: %s", exc, exc_info=True)
            return 0

    def _analysis_batch(self) -> int:
        try:
            return self.analyse_pending(limit=64)
        except ChorusError as exc:
            log.error("analysis backlog failed: %s", exc, exc_info=True)
            return 0

    @property
    def analysis(self) -> AnalysisPass | None:
        """The analysis pass with the shipped models; None when switched off or the models cannot load."""
        if not self.settings.analysis.enabled or self._analysis_error is not None:
            return None
        if self._analysis is None:
            with self._llm_lock:
                if self._analysis is None and self._analysis_error is None:
                    try:
                        acts, links = self._analysis_models or shipped_models(
                            encoder=self.settings.analysis.encoder)
                        self._analysis = AnalysisPass(self.store, self.records, acts, links)
                    except ChorusError as exc:
                        self._analysis_error = str(exc)
                        log.error("analysis pass unavailable: %s", exc)
        return self._analysis

    def analyse_pending(self, scope_ids: list[int] | None = None, limit: int | None = 64) -> int:
        """Analyse waiting messages now (of these scopes; at most ``limit``): what a question or a catch-up
        needs first. Bounded, like ``flush_embeddings``: a backlog never holds a reply for long."""
        analysis = self.analysis
        if analysis is None or not self.store.pending_analysis(scope_ids):
            return 0
        return analysis.run(limit=limit, scope_ids=scope_ids)

    def flush_embeddings(self, scope_ids: list[int] | None = None, limit: int = 64) -> int:
        """Embed the newest waiting messages of these scopes now, so a question sees them by meaning too.

        Bounded: under a backlog (more traffic than the embedder keeps up with) a question pays for at
        most ``limit`` embeddings; BM25 finds every stored message regardless.
        """
        if self.store.embedder is None or not self.store.pending_embeddings():
            return 0
        return self.store.embed_pending(batch_size=64, limit=limit, scope_ids=scope_ids, newest_first=True)

    def question(self, key: ScopeKey, text: str, *, asked_in: Message | None = None,
                 asker_id: str | None = None) -> Question:
        """The one analysis of a question asked in this scope (its people, kind, era, catch-up intent), which
        every later step reads: ``Actions.ask`` routes on it, ``ask`` answers it. The asker is
        ``asker_id``, else the author of ``asked_in``."""
        text = clean_text(text).strip()  # text from a platform may hold NULs or lone surrogates
        return self.answerer().analyse(self.scope_ids(key), text, asked_at=asked_in.ts if asked_in else None,
                                       asker_id=asker_id or (asked_in.author_id if asked_in else None))

    def ask(self, key: ScopeKey, question: Question | str, *, asked_in: Message | None = None) -> Reply:
        """Answer a question from this scope's memory, citing the messages used.

        ``question`` is the ``Question`` from ``question`` (text is analysed here the same way); ``asked_in``
        is the chat message that carried it, never its own evidence.
        """
        if not (question.text if isinstance(question, Question) else clean_text(question)).strip():
            return Reply("Ask me something about this channel, e.g. `@chorus what did we decide about Friday?`")
        scope_ids = self.scope_ids(key)
        if not scope_ids:
            return Reply("I don't have any memory of this channel yet.")
        q = question if isinstance(question, Question) else self.question(key, question, asked_in=asked_in)
        try:
            self.flush_embeddings(scope_ids)
        except EmbeddingError as exc:  # words still find every message; the backlog retries later
            log.warning("could not embed new messages before answering: %s", exc, exc_info=True)
        try:
            self.analyse_pending(scope_ids)  # the newest messages' entities and acts, bounded like the vectors
        except ChorusError as exc:  # the reply reads what is analysed; the backlog retries the rest later
            log.warning("could not analyse new messages before answering: %s", exc, exc_info=True)
        self.searcher.degraded = None
        exclude: set[int] = set()
        if asked_in is not None:
            stored = self.store.find(ScopeKey.of(asked_in), asked_in.msg_id)
            if stored is not None:
                exclude.add(stored.id)
        result = self.answerer().answer(scope_ids, q, exclude=frozenset(exclude))
        # The reply text already quotes each cited message; citations carry the links adapters render.
        citations = [Citation(q.n, q.message.id, q.message.platform, q.message.workspace, q.message.channel,
                              q.message.msg_id, q.message.author_name, q.message.ts, q.quote)
                     for q in (result.draft.quoted if result.draft else [])]
        text = cut_for_chat(result.text, self.settings.answer.max_chars)
        notes = list(result.notes)
        if self.searcher.degraded:
            notes.append(f"searched by words only: {self.searcher.degraded}")
        return Reply(text, citations, data={"model_used": result.model_used, "notes": notes,
                                            "abstained": result.abstained,
                                            "kind": result.draft.kind if result.draft else "",
                                            "generated": result.generated,
                                            "rows": [r.name for r in result.pack.rows]})

    def reply_policy(self) -> Policy:
        """The configured reply policy with "auto" resolved: evidence only for the shipped model."""
        a = self.settings.answer
        return a.policy if a.policy != "auto" else ("evidence" if uses_shipped_model(self.settings) else "model")

    def answerer(self) -> Answerer:
        p = self.settings.persona
        s = self.settings.search
        a = self.settings.answer
        policy = self.reply_policy()
        reader = None
        if a.reader and policy == "model":  # EGMemory's adaptive reader, for capable models (docs/models.md)
            from memory.query.reader import Reader, ReaderConfig

            reader = Reader(self.store, self.searcher, self.records, self.llm,
                            config=ReaderConfig(max_rounds=a.reader_rounds, token_budget=a.reader_token_budget))
        return Answerer(self.store, self.searcher, self.records, self.llm if policy == "model" else None,
                        persona=PersonaVoice(p.name, p.description, p.voice, p.cares_about),
                        budgets=Budgets(recall_pool=s.recall_pool, top_k=s.top_k, neighbours=s.neighbours,
                                        token_budget=a.evidence_token_budget),
                        max_new_tokens=a.max_new_tokens, policy=policy,
                        decline_below=None if a.decline_below == "trained" else float(a.decline_below), reader=reader,
                        encoder="shipped" if a.reader_model else None)

    def profile(self, key: ScopeKey, person: str) -> Reply:
        """A person's current records, what others said about them and the group records they voiced, cited
        (their messages, marked as such, until the writer has written records; bot/memory_views.py)."""
        scope_ids = self.scope_ids(key)
        roster = [p for sid in scope_ids for p in self.store.roster(sid)]
        pid = RosterIndex(roster).resolve(person.lstrip("@"))
        if pid is None or pid == GROUP:
            return Reply(f"I don't know anyone called {person.strip()[:60]!r} in this channel.")
        return profile_reply(self.store, self.records, scope_ids, roster, pid, self.settings.answer.max_chars)

    def timeline(self, key: ScopeKey, topic: str) -> Reply:
        """How a topic evolved: its records' update chains in time order, else the messages about it, cited."""
        topic = clean_text(topic)
        scope_ids = self.scope_ids(key)
        names = {p.person_id: p.display_name for sid in scope_ids for p in self.store.roster(sid)}
        return timeline_reply(self.store, self.searcher, self.records, scope_ids, topic, names,
                              self.settings.answer.max_chars)

    def whosaid(self, key: ScopeKey, phrase: str) -> Reply:
        phrase = clean_text(phrase)
        scope_ids = self.scope_ids(key)
        found = self.searcher.phrase(scope_ids, phrase, limit=10) if scope_ids else []
        if not found:
            return Reply(f"Nobody here said “{phrase.strip()[:100]}” as far as I remember.")
        citations = [Citation(n, m.id, m.platform, m.workspace, m.channel, m.msg_id, m.author_name, m.ts,
                              _excerpt(m.text)) for n, m in enumerate(found, 1)]
        first = found[0]
        lines = [f"{first.author_name} said it first, on {stamp(first.ts)} [1]."]
        lines += [f"[{c.n}] {c.author} ({stamp(c.ts)}): {c.excerpt}" for c in citations]
        return Reply(cut_for_chat("\n".join(lines), self.settings.answer.max_chars), citations)

    def status(self, key: ScopeKey | None = None) -> Reply:
        """What is remembered here (or in the whole store) and how far memory has got (bot/status.py)."""
        scope_ids = self.scope_ids(key) if key else [s.id for s in self.store.scopes()]
        replies = ("quoted messages, no model sentence" if self.reply_policy() == "evidence"
                   else "quoted messages under a model sentence that passed the support check")
        if not self.settings.persona.insights:
            insights = "switched off (persona.insights)"
        elif uses_shipped_model(self.settings):
            insights = ("none written: the embedded 270M model's insights fail the support check; a configured "
                        "model (llm.model_path or llm.backend) writes them under that check")
        else:
            insights = "written by the configured model, each kept only if the facts it cites support it"
        analysis = ("switched off (analysis.enabled)" if not self.settings.analysis.enabled
                    else f"unavailable ({self._analysis_error})" if self._analysis_error else "")
        st = read_status(self.store, self.records, self.read_only_writer(), scope_ids, replies=replies,
                         model_error=self._llm_error, insights=insights, analysis=analysis)
        return Reply(st.text(), data=st.data())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close on the way out, however the block ends (the CLI commands' one-bot lifetime)."""
        self.close()

    def close(self) -> None:
        self.door.close()
        self._embed_stop.set()
        self._embed_wakeup.set()
        if self._embed_thread is not None:
            self._embed_thread.join(timeout=30)
        self.store.close()


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
