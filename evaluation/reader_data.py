"""Reader training and evaluation rows, built on the candidates the reply itself would read.

For every labelled question (evaluation/reader_labels.py) the conversation is ingested and analysed
as the bot would, the question goes through the reply's own search and reranker (`Answerer.rank`), and
the reranker's best `TOP` candidates become rows: the candidate, the turn it follows (its parent, else
the previous turn), its author, and its label: 1 when it answers (with the answer's spans), 0 when it
does not, -1 when it must not count either way (a stale or supporting turn). Gold turns search missed
are added as positives, and a near miss's topic turns and an answer's decoys (LABELLING.md Part A4) as
negatives, so the model always sees the hard cases. Each answerable question also yields a counterfactual (its
answering turns removed from what search may return), which is scored but not trained on.

Rows are cached per conversation under ``out/reader/rows/`` keyed by its messages and labels, so new
labels on one chat rebuild only that chat.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from memory.embeddings.base import Embedder
from memory.errors import DatasetError
from memory.query.answer import Answerer
from memory.query.candidates import Candidate
from memory.query.reading import pair_texts
from memory.records import Records
from memory.search import Searcher

from .reader_labels import Labelled, LabelledConversation
from .stores import conversation_stores, safe_name

TOP = 12  # the reranker's best candidates the reader reads at reply time
ROWS_VERSION = 1
CACHE = Path("out/reader/rows")


@dataclass
class Row:
    """One candidate of one question."""

    msg_id: str
    candidate: str  # "author: text"
    context: str  # "author: text" of the turn it follows, or ""
    label: int  # 1 answers, 0 does not, -1 neither
    spans: list[str] = field(default_factory=list)
    rank: int = 0  # its place in the reranker's order (0 best; TOP and above: added)
    rerank: float = 0.0  # the reranker's score
    ts: float | None = None  # when it was sent (filled in from the conversation as rows are read)


@dataclass
class QuestionRows:
    """A question's candidates, as the reader sees them."""

    qid: str
    source: str
    conversation: str
    question: str
    kind: str  # answerable, near_miss, off_topic, counterfactual
    category: str
    author_span: bool
    rows: list[Row]
    p_decline_model: float = 0.0  # the shipped decline model's P(answerable), the baseline
    gold_in_top: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @staticmethod
    def from_json(line: str) -> QuestionRows:
        raw = json.loads(line)
        raw["rows"] = [Row(**r) for r in raw["rows"]]
        return QuestionRows(**raw)




def question_rows(answerer: Answerer, scope_ids: list[int], asked_at: float, lq: Labelled,
                  by_msg: dict[str, int], *, counterfactual: bool = False) -> QuestionRows:
    """The rows of one labelled question (``counterfactual``: with its answering turns taken out)."""
    exclude = frozenset(by_msg[g] for g in lq.gold if g in by_msg) if counterfactual else frozenset()
    pack, _, _ = answerer.prepare(scope_ids, lq.question, asked_at=asked_at, exclude=exclude)
    ranking = answerer.rank(scope_ids, pack, exclude)
    chosen = [ranking.cands[i] for i in ranking.order[:TOP]]
    scores = {ranking.cands[i].message.msg_id: float(ranking.scores[i]) for i in ranking.order}
    wanted = [] if counterfactual else list(lq.gold) + list(lq.topic)
    have = {c.message.msg_id for c in chosen}
    missing = [by_msg[w] for w in wanted if w not in have and w in by_msg]
    extra = _candidates_for(answerer, missing, exclude) if missing else []
    rows = []
    for rank, c in enumerate(chosen + extra):
        mid = c.message.msg_id
        if counterfactual:
            label, spans = (-1 if mid in lq.ignore else 0), []
        elif mid in lq.gold:
            label, spans = 1, [s for s in lq.gold[mid] if s]
        else:
            label, spans = (-1 if mid in lq.ignore else 0), []
        ctx, cand = pair_texts(c)
        rows.append(Row(mid, cand, ctx, label, spans,
                        rank if rank < len(chosen) else TOP + rank - len(chosen), scores.get(mid, -99.0)))
    return QuestionRows(lq.id, lq.source, "", lq.question, "counterfactual" if counterfactual else lq.kind,
                        lq.category, lq.author_span, rows, ranking.p_answer,
                        any(r.label == 1 and r.rank < TOP for r in rows))


def _candidates_for(answerer: Answerer, ids: list[int], exclude: frozenset[int]) -> list[Candidate]:
    """Candidates (with their context) for given messages that search did not rank."""
    from memory.query.candidates import gather

    msgs = answerer.store.messages(ids)
    return gather(answerer.store, [], exclude=exclude, extra=msgs)


def build(convs: list[LabelledConversation], embedder: Embedder, *, counterfactuals: bool = True,
          desc: str = "reader rows") -> Iterator[QuestionRows]:
    """Rows for every labelled question of ``convs`` (one store per conversation, as evaluation builds them)."""
    by_conv = {lc.conv.id: lc for lc in convs}
    total = sum(len(lc.questions) * (2 if counterfactuals else 1) for lc in convs)
    bar = tqdm(total=total, desc=desc, unit="q")
    for cs in conversation_stores([lc.conv for lc in convs if lc.questions], embedder):
        lc = by_conv[cs.conv.id]
        answerer = Answerer(cs.store, Searcher(cs.store), Records(cs.store), None, encoder=None)
        by_msg: dict[str, int] = {}
        with cs.store.read() as conn:
            for sid in cs.scope_ids:
                by_msg.update({r[0]: r[1] for r in conn.execute("SELECT msg_id, id FROM messages WHERE scope_id = ?",
                                                                (sid,))})
        for lq in lc.questions:
            variants = [False] + ([True] if counterfactuals and lq.answerable and not lq.each else [])
            for cf in variants:
                qr = question_rows(answerer, cs.scope_ids, cs.asked_at, lq, by_msg, counterfactual=cf)
                qr.conversation = cs.conv.id
                bar.update(1)
                yield qr
            if len(variants) == 1 and counterfactuals:
                bar.update(1)
    bar.close()


def conversation_key(lc: LabelledConversation) -> str:
    """What a conversation's rows depend on: its messages, its labels and this module's version."""
    raw = json.dumps([ROWS_VERSION, TOP, [(m.msg_id, m.author_name, m.text) for m in lc.conv.messages],
                      [asdict(q) | {"ignore": sorted(q.ignore)} for q in lc.questions]], ensure_ascii=False)
    return hashlib.sha1(raw.encode()).hexdigest()[:12]


def cached_rows(convs: list[LabelledConversation], embedder: Embedder, cache: Path = CACHE, *,
                counterfactuals: bool = True) -> list[QuestionRows]:
    """Every question's rows, built for the conversations whose messages or labels changed and read back
    for the rest (``cache``/<source>/<conversation>.<key>.jsonl)."""
    todo = [lc for lc in convs if not _path(cache, lc).exists()]
    if todo:
        fresh: dict[str, list[QuestionRows]] = {}
        for qr in build(todo, embedder, counterfactuals=counterfactuals):
            fresh.setdefault(qr.conversation, []).append(qr)
        for lc in todo:
            path = _path(cache, lc)
            path.parent.mkdir(parents=True, exist_ok=True)
            for old in path.parent.glob(f"{safe_name(lc.conv.id)}.*.jsonl"):
                old.unlink()
            tmp = path.with_suffix(".partial")
            tmp.write_text("".join(qr.to_json() + "\n" for qr in fresh.get(lc.conv.id, [])), "utf-8")
            tmp.replace(path)
    out: list[QuestionRows] = []
    for lc in convs:
        sent = {m.msg_id: m.ts for m in lc.conv.messages}
        for qr in read_rows(_path(cache, lc)):
            for r in qr.rows:
                r.ts = sent.get(r.msg_id)
            out.append(qr)
    return out


def row_ages(qr: QuestionRows, read: int) -> list[str]:
    """Each row's age tag as the reply would give it: relative to the newest of the reranker's best ``read``
    rows (the ones the reply reads), so a gold turn added after them is not the yardstick."""
    from memory.encoder.inputs import age_tags

    shown = [r.ts for r in qr.rows if r.rank < read and r.ts is not None]
    return age_tags([r.ts for r in qr.rows], max(shown) if shown else None)


def _path(cache: Path, lc: LabelledConversation) -> Path:
    return cache / lc.source / f"{safe_name(lc.conv.id)}.{conversation_key(lc)}.jsonl"


def read_rows(path: Path) -> list[QuestionRows]:
    return [QuestionRows.from_json(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def started_with(folder: Path, train_q: list[QuestionRows], val_q: list[QuestionRows]
                 ) -> tuple[list[QuestionRows], list[QuestionRows]]:
    """The questions a run started with, whatever was labelled since: their ids are written to the run's folder
    when it starts, and a resumed run reads only those, in the same order (a batch moved into training while a run
    was paused waits for the next run). Refuses when one of them is no longer labelled."""
    path = folder / "questions.json"
    if not path.exists():
        path.write_text(json.dumps({"train": [_key(q) for q in train_q], "validation": [_key(q) for q in val_q]}))
        return train_q, val_q
    kept = json.loads(path.read_text())
    out = []
    for part, questions in (("train", train_q), ("validation", val_q)):
        wanted = set(kept[part])
        have = [q for q in questions if _key(q) in wanted]
        gone = wanted - {_key(q) for q in have}
        if gone:
            raise DatasetError(f"{len(gone)} of the run's {part} questions are no longer labelled "
                               f"(e.g. {sorted(gone)[:3]}); start a new run instead of resuming {folder.name}")
        out.append(have)
    return out[0], out[1]


def _key(q: QuestionRows) -> str:
    """A question's id across sources (a chat's own qa_pairs number their questions from 1 in every chat)."""
    return f"{q.source}/{q.conversation}/{q.qid}"
