"""Labelled reader questions from every source, on the conversations the loaders build.

The answer model learns which message answers a question, the exact words that answer it, and when
no message does. Its labels come from three sources, each read here into one shape (`Labelled`):

- ``chats``: our long written training chats (evaluation/data/train), their own ``qa_pairs`` and the
  reader questions labelled on them (evaluation/data/questions/<chat>.jsonl, evaluation/data/LABELLING.md);
- ``friendsqa``: FriendsQA dev's answerable questions (answer spans inside utterances, or the speaker) and
  the near misses written for its episodes (../shared/data/friendsqa-nearmiss);
- ``socialmem``: SocialMemBench dev's own questions (evidence turns, no spans) and the questions written
  for its networks (../shared/data/socialmembench-qa).

LoCoMo is never read here: it is evaluation only. Neither are the blind sets.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from memory.datasets import Conversation, load_dataset
from memory.datasets.base import data_dir
from memory.errors import DatasetError

from .labels_check import check_questions

HERE = Path(__file__).resolve().parent
CHATS_DIR = HERE / "data" / "train"
QUESTIONS_DIR = HERE / "data" / "questions"
SOURCES = ("chats", "friendsqa", "socialmem")


@dataclass
class Labelled:
    """One question with what answers it, what must not count against it, and what it is about."""

    id: str
    question: str
    kind: str  # answerable, near_miss, off_topic
    category: str
    source: str  # chats, friendsqa, socialmem
    gold: dict[str, list[str]] = field(default_factory=dict)  # msg_id -> answer spans ("" when none is known)
    ignore: set[str] = field(default_factory=set)  # neither an answer nor a counter-example (stale, supporting)
    topic: list[str] = field(default_factory=list)  # hard negatives: a near miss's topic turns, an answer's decoys
    author_span: bool = False  # the answer is who said the message
    each: bool = False  # "what did each of us say": every member's on-topic turns are the positives

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


@dataclass
class LabelledConversation:
    conv: Conversation
    questions: list[Labelled]
    source: str


def load(sources: Iterable[str] = SOURCES, *, chats_dir: Path = CHATS_DIR,
         questions_dir: Path = QUESTIONS_DIR) -> list[LabelledConversation]:
    """Every labelled conversation of ``sources``, in a stable order."""
    out: list[LabelledConversation] = []
    for source in sources:
        if source == "chats":
            out += _chats(chats_dir, questions_dir)
        elif source == "friendsqa":
            out += _friendsqa()
        elif source == "socialmem":
            out += _socialmem()
        else:
            raise DatasetError(f"unknown label source {source!r}; choose from {', '.join(SOURCES)}")
    return out


# ---- our written chats ----------------------------------------------------------------------------

def _chats(chats_dir: Path, questions_dir: Path) -> list[LabelledConversation]:
    """The written chats that have reader questions (a chat joins the reader's data once it is labelled for it,
    so every run of one training round reads the same chats, whatever is being written meanwhile)."""
    out = []
    names = sorted(p.stem for p in questions_dir.glob("*.jsonl"))
    for conv in (c for name in names for c in load_dataset("socialmem", chats_dir / f"{name}.json")):
        raw = json.loads((chats_dir / f"{conv.id}.json").read_text("utf-8"))
        qs = [_from_qa_pair(item, "chats") for item in raw.get("qa_pairs", [])]
        path = questions_dir / f"{conv.id}.jsonl"
        if path.exists():  # always, for the chats listed above
            lines = path.read_text("utf-8").splitlines()
            problems, _ = check_questions(lines, raw, conv.id)
            if problems:
                raise DatasetError(f"{path}: {len(problems)} problem(s), first: {problems[0]} "
                                   "(python3 evaluation/labels_check.py names them all)")
            by_turn = {t["turn"]: t for s in raw["sessions"] for t in s["turns"]}
            qs += [_from_line(json.loads(line), by_turn, "chats") for line in lines if line.strip()]
        out.append(LabelledConversation(conv, qs, "chats"))
    return out


def _from_qa_pair(item: dict, source: str) -> Labelled:
    """A chat file's own question: its primary anchors answer it, supporting anchors are neither."""
    category = str(item.get("category", ""))
    anchors = item.get("evidence_anchors") or []
    qid, text = str(item["id"]), str(item["question"])
    if category == "unanswerable":
        return Labelled(qid, text, "near_miss", category, source)
    per_member = item.get("per_member")
    if isinstance(per_member, dict) and category in ("each", "absent"):
        turns = [t for ids in per_member.values() for t in (ids or [])]
        return Labelled(qid, text, "answerable", category, source, gold={t: [""] for t in turns},
                        ignore={a["turn_id"] for a in anchors} - set(turns), each=True)
    span = str(item.get("answer_span") or "")
    gold: dict[str, list[str]] = {}
    ignore: set[str] = set()
    for a in anchors:
        tid = a.get("turn_id")
        if a.get("relevance") == "primary":
            gold[tid] = [span if span and span in str(a.get("message_excerpt", "")) else ""]
        else:
            ignore.add(tid)
    return Labelled(qid, text, "answerable", category, source, gold=gold, ignore=ignore - set(gold))


def _from_line(item: dict, by_turn: dict[str, dict], source: str) -> Labelled:
    """A reader-question line (LABELLING.md, Part A)."""
    qid, text, kind, category = str(item["id"]), str(item["question"]), str(item["kind"]), str(item["category"])
    if kind == "answerable" and category == "each":
        turns = [t for ids in item["per_member"].values() for t in ids]
        return Labelled(qid, text, kind, category, source, gold={t: [""] for t in turns}, each=True)
    if kind == "answerable":
        span = str(item["span"])
        gold = {item["turn"]: [span]}
        for t in item.get("also") or []:
            gold[t] = [span if not item.get("span_is_author") and span in by_turn[t]["content"] else ""]
        decoys = [t for t in item.get("decoys") or [] if t not in gold]
        return Labelled(qid, text, kind, category, source, gold=gold,
                        ignore=set(item.get("stale") or []) - set(decoys), topic=decoys,
                        author_span=bool(item.get("span_is_author")))
    return Labelled(qid, text, kind, category, source, topic=list(item.get("topic_turns") or []))


# ---- FriendsQA ------------------------------------------------------------------------------------

def _friendsqa() -> list[LabelledConversation]:
    path = data_dir() / "friendsqa" / "friendsqa_dev.json"
    convs = load_dataset("friendsqa", path)
    raw = json.loads(path.read_text("utf-8"))
    by_scene_uid: dict[tuple[str, int], str] = {}
    for conv in convs:
        for m in conv.messages:
            by_scene_uid.setdefault((str(m.extra.get("scene")), int(m.extra.get("uid", -1))), m.msg_id)
    speakers = {m.msg_id: m.author_name for c in convs for m in c.messages}
    labelled: dict[str, list[Labelled]] = {}
    episode_of = {m.msg_id: c.id for c in convs for m in c.messages}
    for scene in raw["data"]:
        title = scene["title"]
        for para in scene["paragraphs"]:
            for qa in para["qas"]:
                gold: dict[str, list[str]] = {}
                author = False
                for a in qa["answers"]:
                    mid = by_scene_uid.get((title, int(a["utterance_id"])))
                    if mid is None:
                        continue
                    if a.get("is_speaker"):
                        author = True
                        gold.setdefault(mid, []).append(speakers[mid])
                    else:
                        gold.setdefault(mid, []).append(str(a["answer_text"]))
                if not gold:
                    continue
                conv_id = episode_of[next(iter(gold))]
                labelled.setdefault(conv_id, []).append(Labelled(
                    str(qa["id"]), str(qa["question"]), "answerable", _fq_category(str(qa["id"])), "friendsqa",
                    gold=gold, author_span=author))
    folder = data_dir() / "friendsqa-nearmiss"
    for part in sorted(folder.glob("part_*.jsonl")):
        for n, line in enumerate(part.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            item = json.loads(line)
            scene = str(item["scene"])
            topic = [by_scene_uid[(scene, int(u))] for u in item.get("topic_uids") or [] if (scene, int(u)) in
                     by_scene_uid]
            anchor = by_scene_uid.get((scene, 0))
            if anchor is None:
                raise DatasetError(f"{part}:{n}: scene {scene!r} is not in FriendsQA dev")
            labelled.setdefault(episode_of[anchor], []).append(Labelled(
                f"{part.stem}:{n}", str(item["question"]), str(item["kind"]), "near_miss", "friendsqa", topic=topic))
    return [LabelledConversation(c, labelled.get(c.id, []), "friendsqa") for c in convs]


def _fq_category(qid: str) -> str:
    """FriendsQA's question ids end with their wh-word ("s01_e23_c06_Who")."""
    tail = qid.rsplit("_", 1)[-1].lower()
    return tail.split("paraphrased")[0] or "what"


# ---- SocialMemBench -------------------------------------------------------------------------------

def _socialmem() -> list[LabelledConversation]:
    folder = data_dir() / "socialmembench"
    convs = load_dataset("socialmem", folder)
    by_id = {c.id: c for c in convs}
    labelled: dict[str, list[Labelled]] = {c.id: [] for c in convs}
    for conv in convs:
        for q in conv.questions:
            anchors = q.extra.get("evidence_anchors") or []
            primary = [a.get("turn_id") for a in anchors if a.get("relevance") == "primary"] or q.evidence[:1]
            gold = {t: [""] for t in primary if t in conv.msg_ids}
            if gold:
                labelled[conv.id].append(Labelled(q.id, q.question, "answerable", q.category, "socialmem",
                                                  gold=gold, ignore=set(q.evidence) - set(gold)))
    for part in sorted((data_dir() / "socialmembench-qa").glob("part_*.jsonl")):
        for n, line in enumerate(part.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            item = json.loads(line)
            conv_id = str(item["network"]).removeprefix("social_")
            if conv_id not in by_id:
                raise DatasetError(f"{part}:{n}: network {item['network']!r} is not in SocialMemBench dev")
            kind = str(item["kind"])
            qid = f"{part.stem}:{n}"
            if kind == "answerable":
                labelled[conv_id].append(Labelled(qid, str(item["question"]), kind, "what", "socialmem",
                                                  gold={str(item["turn"]): [str(item["span"])]}))
            else:
                labelled[conv_id].append(Labelled(qid, str(item["question"]), kind, "near_miss", "socialmem",
                                                  topic=[str(t) for t in item.get("topic_turns") or []]))
    return [LabelledConversation(c, labelled[c.id], "socialmem") for c in convs]


def locomo() -> list[LabelledConversation]:
    """LoCoMo's questions as reader labels, for held-out scoring only (CC BY-NC: never trained on): the
    evidence turns answer (no spans: its answers are written, not quoted); category 5 (adversarial) questions
    are unanswerable."""
    out = []
    for conv in load_dataset("locomo"):
        qs = []
        for q in conv.questions:
            if q.adversarial:
                qs.append(Labelled(q.id, q.question, "near_miss", "adversarial", "locomo"))
            elif q.evidence:
                qs.append(Labelled(q.id, q.question, "answerable", str(q.category), "locomo",
                                   gold={e: [""] for e in q.evidence}))
        out.append(LabelledConversation(conv, qs, "locomo"))
    return out


def counts(convs: list[LabelledConversation]) -> dict[str, dict[str, int]]:
    """Questions per source and kind (the docs' data table)."""
    out: dict[str, dict[str, int]] = {}
    for lc in convs:
        row = out.setdefault(lc.source, {})
        for q in lc.questions:
            row[q.kind] = row.get(q.kind, 0) + 1
            if q.answerable and any(s for spans in q.gold.values() for s in spans):
                row["with span"] = row.get("with span", 0) + 1
    return out
