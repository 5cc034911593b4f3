"""FriendsQA: TV-script scenes turned into long multi-party episode histories.

Scenes ("s01_e23_c06") of one episode are joined in scene order into one
Conversation, because a single scene is too short to test long-term memory.
Utterance uids restart at 0 in every scene, so msg_ids carry the scene name.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..models import Message
from .base import Conversation, Question, dedupe, make_message, read_json, require, slug

PLATFORM = "friendsqa"
UTTERANCE_GAP_S = 20.0
SCENE_GAP_S = 3600.0
UTTERANCES_KEY = "utterances:"  # published with the colon
_SCENE_RE = re.compile(r"s(\d+)_e(\d+)_c(\d+)", re.I)
_WH = ("what", "who", "where", "why", "how", "when")
_WH_ALIASES = {"whom": "who", "whose": "who"}
# Synthetic clock: every episode starts on its own day, well apart from the others.
_EPOCH = datetime(1994, 9, 22, 20, 0, tzinfo=UTC)


def question_category(qid: str, question: str) -> str:
    """The question's wh-word: FriendsQA encodes it in the id ("..._Why_Paraphrased")."""
    for part in qid.split("_"):
        if part.lower() in _WH:
            return part.lower()
    for word in re.findall(r"[A-Za-z]+", question.lower()):
        word = _WH_ALIASES.get(word, word)
        if word in _WH:
            return word
    return "other"


def load_friendsqa(path: str | Path) -> list[Conversation]:
    """Load a FriendsQA split; one Conversation per episode, episodes in (season, episode) order."""
    path = Path(path)
    data = read_json(path)
    items = require(data, "data", str(path), list)
    scenes: list[tuple[tuple[int, int], str, int, int, dict, str]] = []
    for di, item in enumerate(items):
        where = f"{path} data[{di}]"
        title = str(require(item, "title", where))
        paragraphs = require(item, "paragraphs", where, list)
        m = _SCENE_RE.fullmatch(title.strip())
        if m:
            season, episode, scene = (int(g) for g in m.groups())
            episode_id = f"s{season:02d}_e{episode:02d}"
        else:  # an unnamed scene stands alone as its own episode
            season, episode, scene, episode_id = 10**6, di, di, title.strip() or f"scene-{di}"
        for pi, para in enumerate(paragraphs):
            scenes.append(((season, episode), episode_id, scene, pi, para, title))

    episodes: dict[str, list] = {}
    order: dict[str, tuple[int, int]] = {}
    for key, episode_id, scene, pi, para, title in scenes:
        episodes.setdefault(episode_id, []).append((scene, pi, para, title))
        order[episode_id] = key
    convs = []
    for episode_id in sorted(episodes, key=lambda e: (order[e], e)):
        parts = sorted(episodes[episode_id], key=lambda s: (s[0], s[1]))
        convs.append(_episode(episode_id, order[episode_id], parts, path))
    return convs


def _episode(episode_id: str, key: tuple[int, int], parts: list, path: Path) -> Conversation:
    season, episode = key
    base = _EPOCH + timedelta(days=7 * ((season - 1) * 30 + episode)) if season < 10**6 else _EPOCH
    ts = base.timestamp()
    messages: list[Message] = []
    questions: list[Question] = []
    dropped = 0
    speakers: list[str] = []
    multi_part = {title for _, pi, _, title in parts if pi > 0}
    for scene_no, pi, para, title in parts:
        where = f"{path} scene {title}" + (f" paragraph {pi}" if title in multi_part else "")
        utterances = require(para, UTTERANCES_KEY, where, list)
        qas = para.get("qas") or [] if isinstance(para, dict) else []
        prefix = f"{title}_p{pi}" if title in multi_part else title
        uid_map: dict[str, str] = {}
        for ui, utt in enumerate(utterances):
            uwhere = f"{where} utterance {ui}"
            uid = require(utt, "uid", uwhere)
            names = require(utt, "speakers", uwhere)
            names = [str(n) for n in (names if isinstance(names, list) else [names]) if str(n).strip()]
            author = " & ".join(names) or "unknown"
            speakers.extend(names)
            msg_id = _msg_id(prefix, uid)
            uid_map[str(uid)] = msg_id
            messages.append(make_message(
                uwhere, platform=PLATFORM, workspace="", channel=episode_id, msg_id=msg_id,
                author_id=slug(author), author_name=author, text=str(require(utt, "utterance", uwhere) or ""),
                ts=ts, session_hint=scene_no, extra={"scene": title, "uid": uid, "speakers": names}))
            ts += UTTERANCE_GAP_S
        ts += SCENE_GAP_S - UTTERANCE_GAP_S
        for qi, qa in enumerate(qas):
            q, d = _question(qa, qi, title, uid_map, f"{where} qas[{qi}]")
            questions.append(q)
            dropped += d
    if len({m.msg_id for m in messages}) != len(messages):
        raise DatasetError(f"{path}: episode {episode_id} has duplicate utterance uids within a scene")
    return Conversation(id=episode_id, messages=messages, questions=questions,
                        speakers=dedupe(speakers), dropped_evidence=dropped)


def _msg_id(prefix: str, uid: object) -> str:
    text = str(uid).strip()
    if text.startswith(prefix):
        return text
    return f"{prefix}_u{int(text):03d}" if text.isdigit() else f"{prefix}_u{text}"


def _question(qa: dict[str, Any], qi: int, title: str, uid_map: dict[str, str], where: str) -> tuple[Question, int]:
    text = str(require(qa, "question", where))
    qid = str(qa.get("id") or f"{title}_q{qi}")
    answers = require(qa, "answers", where, list)
    evidence: list[str] = []
    dropped = 0
    for answer in answers:
        if not isinstance(answer, dict) or answer.get("utterance_id") is None:
            dropped += 1
            continue
        msg_id = uid_map.get(str(answer["utterance_id"]))
        if msg_id is None:
            dropped += 1
        else:
            evidence.append(msg_id)
    first = answers[0] if answers and isinstance(answers[0], dict) else {}
    extra = {
        "scene": title,
        "is_speaker": bool(first.get("is_speaker", False)),
        "answers": [a.get("answer_text") for a in answers if isinstance(a, dict)],
        "paraphrased": "paraphrased" in qid.lower(),
    }
    answer_text = first.get("answer_text")
    return Question(id=qid, question=text, answer=None if answer_text is None else str(answer_text),
                    category=question_category(qid, text), evidence=dedupe(evidence),
                    adversarial=False, extra=extra), dropped
