"""Check labelled training data against its chat: reader questions (JSONL) and whole labelled chats.

Standard library only, so a labelling helper can run it with plain ``python3`` before any install
(evaluation/data/LABELLING.md). The trainer calls the same functions, so a file that passes here is a
file the trainer can read.

    python3 evaluation/labels_check.py evaluation/data/questions/band.jsonl [--chat-file PATH]
    python3 evaluation/labels_check.py --chat evaluation/data/train/band.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

TRAIN_DIR = Path(__file__).resolve().parent / "data" / "train"
KINDS = ("answerable", "near_miss", "off_topic")
CATEGORIES = ("who", "when", "where", "amount", "what", "why", "yesno", "current", "earlier", "decided",
              "opinion", "each")
ACTS = ("decision", "plan", "change", "rule", "task", "question", "news", "chatter")
STATE_ACTS = ("decision", "plan", "change", "rule", "task")
LINKS = ("changes", "answers", "confirms")


def turns_of(chat: dict) -> list[dict]:
    """Every turn of a chat file, in order."""
    return [t for s in chat.get("sessions", []) for t in s.get("turns", [])]


def check_questions(lines: list[str], chat: dict, stem: str) -> tuple[list[str], Counter]:
    """Problems found in a reader-question file (one message per problem) and its counts."""
    turns = turns_of(chat)
    by_id = {t["turn"]: t for t in turns}
    speaker_of = {t["turn"]: t["speaker_id"] for t in turns}
    speakers = {s["id"] for s in chat.get("speakers", [])} or {t["speaker_id"] for t in turns}
    problems: list[str] = []
    counts: Counter = Counter()
    seen_ids: set[str] = set()
    seen_q: set[str] = set()
    existing = {str(q.get("question", "")).strip().casefold() for q in chat.get("qa_pairs", [])}
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"line {n}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg}, column {exc.colno})")
            continue
        if not isinstance(item, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        qid = str(item.get("id", ""))
        where = f"line {n} ({qid or 'no id'})"
        if not qid.startswith(f"{stem}_r"):
            problems.append(f"{where}: id should look like {stem}_r001")
        if qid in seen_ids:
            problems.append(f"{where}: id repeated")
        seen_ids.add(qid)
        text = str(item.get("question", "")).strip()
        if len(text) < 6:
            problems.append(f"{where}: question missing or too short")
        key = text.casefold()
        if key in seen_q or key in existing:
            problems.append(f"{where}: question repeats an earlier one")
        seen_q.add(key)
        kind = item.get("kind")
        cat = item.get("category")
        if kind not in KINDS:
            problems.append(f"{where}: kind must be one of {', '.join(KINDS)}")
            continue
        if cat not in CATEGORIES:
            problems.append(f"{where}: category must be one of {', '.join(CATEGORIES)}")
        counts[kind] += 1
        counts[f"category {cat}"] += 1
        if kind == "answerable" and cat == "each":
            per = item.get("per_member")
            if not isinstance(per, dict) or not per:
                problems.append(f"{where}: an each question needs per_member")
                continue
            problems += [f"{where}: per_member names {m!r}, not a speaker id" for m in per if m not in speakers]
            problems += _per_member_turns(where, per, speaker_of)
            missing = speakers - set(per)
            if missing:
                problems.append(f"{where}: per_member leaves out {', '.join(sorted(missing))}")
            if not any(per.values()):
                problems.append(f"{where}: per_member lists no turn at all")
        elif kind == "answerable":
            turn = item.get("turn")
            span = item.get("span")
            if turn not in by_id:
                problems.append(f"{where}: turn {turn!r} is not in the chat")
                continue
            if not isinstance(span, str) or not span.strip():
                problems.append(f"{where}: span missing")
            elif item.get("span_is_author"):
                if span != by_id[turn]["speaker"]:
                    problems.append(f"{where}: span_is_author, but span {span!r} is not the speaker "
                                    f"{by_id[turn]['speaker']!r}")
            elif span not in by_id[turn]["content"]:
                problems.append(f"{where}: span {span!r} is not an exact part of turn {turn}")
            elif len(span) > 0.9 * len(by_id[turn]["content"]) and len(span) > 60:
                problems.append(f"{where}: span is nearly the whole message; give the answer only")
            for f in ("also", "stale", "decoys"):
                ids = item.get(f, [])
                if not isinstance(ids, list):
                    problems.append(f"{where}: {f} should be a list")
                    continue
                for t in ids:
                    if t not in by_id:
                        problems.append(f"{where}: {f} turn {t!r} is not in the chat")
                    elif t == turn:
                        problems.append(f"{where}: {f} repeats the answering turn")
            clash = set(item.get("decoys") or []) & set(item.get("also") or [])
            if clash:
                problems.append(f"{where}: decoys and also share {', '.join(sorted(clash))}: "
                                "a turn answers or it does not")
        elif kind == "near_miss":
            topic = item.get("topic_turns")
            if not isinstance(topic, list) or not topic:
                problems.append(f"{where}: topic_turns missing")
            else:
                for t in topic:
                    if t not in by_id:
                        problems.append(f"{where}: topic turn {t!r} is not in the chat")
            tempting = item.get("tempting")
            if tempting and isinstance(topic, list) and all(t in by_id for t in topic) \
                    and not any(tempting in by_id[t]["content"] for t in topic):
                problems.append(f"{where}: tempting {tempting!r} is not an exact part of a topic turn")
            if not str(item.get("why", "")).strip():
                problems.append(f"{where}: why missing")
        elif not str(item.get("why", "")).strip():
            problems.append(f"{where}: why missing")
    return problems, counts


def check_chat(chat: dict, stem: str) -> tuple[list[str], Counter]:
    """Problems found in a whole labelled chat (acts, links, qa_pairs, catch-up) and its counts."""
    problems: list[str] = []
    counts: Counter = Counter()
    turns = turns_of(chat)
    order = {t.get("turn"): i for i, t in enumerate(turns)}
    speakers = {s.get("id") for s in chat.get("speakers", [])}
    if len(order) != len(turns):
        problems.append("turn ids repeat")
    for key in ("schema", "scenario", "register", "speakers", "sessions", "qa_pairs", "catchup", "meta"):
        if key not in chat:
            problems.append(f"missing top-level key {key!r}")
    prev_ts = ""
    for i, t in enumerate(turns):
        tid = t.get("turn", f"#{i}")
        if not str(tid).startswith(f"{stem}_s"):
            problems.append(f"{tid}: turn id should start with {stem}_s")
        if t.get("speaker_id") not in speakers:
            problems.append(f"{tid}: speaker_id {t.get('speaker_id')!r} is not in speakers")
        ts = str(t.get("ts", ""))
        if ts < prev_ts:
            problems.append(f"{tid}: ts goes back in time")
        prev_ts = ts
        if t.get("reply_to") is not None and order.get(t["reply_to"], i) >= i:
            problems.append(f"{tid}: reply_to must name an earlier turn")
        act = t.get("act")
        if not isinstance(act, dict):
            problems.append(f"{tid}: act missing")
            continue
        kind = act.get("kind")
        if kind not in ACTS:
            problems.append(f"{tid}: act kind {kind!r} unknown")
            continue
        counts[kind] += 1
        for k in (k for k in LINKS if act.get(k)):
            target = act[k]
            if order.get(target, i) >= i:
                problems.append(f"{tid}: {k} must name an earlier turn, not {target!r}")
            counts[f"link {k}"] += 1
            if k == "changes" and target in order and turns[order[target]]["act"].get("kind") not in STATE_ACTS:
                problems.append(f"{tid}: changes {target}, which is not a state act")
        if kind == "change" and not act.get("changes"):
            problems.append(f"{tid}: a change needs the turn it changes")
        if kind != "chatter" and not act.get("topic"):
            problems.append(f"{tid}: {kind} needs a topic")
        if kind in ("decision", "plan", "rule", "task", "question", "change") and not act.get("owner"):
            problems.append(f"{tid}: {kind} needs an owner")
    contents = {t.get("turn"): t.get("content", "") for t in turns}
    speaker_of = {t.get("turn"): t.get("speaker_id") for t in turns}
    for q in chat.get("qa_pairs", []):
        qid = q.get("id", "?")
        anchors = q.get("evidence_anchors") or []
        if q.get("category") == "unanswerable":
            counts["qa unanswerable"] += 1
            continue
        counts["qa"] += 1
        primary = [a for a in anchors if a.get("relevance") == "primary"]
        for a in anchors:
            if a.get("turn_id") not in contents:
                problems.append(f"{qid}: anchor {a.get('turn_id')!r} is not in the chat")
        per = q.get("per_member")
        if q.get("category") == "each" and not isinstance(per, dict):
            problems.append(f"{qid}: an each question needs per_member: speaker id -> turn ids")
        if isinstance(per, dict):
            problems += _per_member_turns(qid, per, speaker_of)
        span = q.get("answer_span")
        if q.get("category") not in ("each", "absent") and primary and span \
                and span not in contents.get(primary[0].get("turn_id"), ""):
            problems.append(f"{qid}: answer_span is not an exact part of the primary anchor")
    for item in (chat.get("catchup") or {}).get("gold", []):
        for t in item.get("turn_ids", []) + ([item["changes_turn_id"]] if item.get("changes_turn_id") else []):
            if t not in contents:
                problems.append(f"catchup: turn {t!r} is not in the chat")
    counts["turns"] = len(turns)
    return problems, counts


def _per_member_turns(where: str, per: dict, speaker_of: dict) -> list[str]:
    """Problems with an each-member question's turns: each member's a list of turns in the chat, by that member."""
    problems = []
    for member, ids in per.items():
        if not isinstance(ids, list):
            problems.append(f"{where}: per_member[{member!r}] should be a list of turn ids")
            continue
        for t in ids:
            if t not in speaker_of:
                problems.append(f"{where}: per_member turn {t!r} is not in the chat")
            elif speaker_of[t] != member:
                problems.append(f"{where}: per_member turn {t} is by {speaker_of[t]}, not {member}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("questions", nargs="?", help="a reader-question JSONL file")
    ap.add_argument("--chat-file", help="the chat it labels (default evaluation/data/train/<name>.json)")
    ap.add_argument("--chat", help="check a whole labelled chat file instead")
    args = ap.parse_args(argv)
    if args.chat:
        path = Path(args.chat)
        problems, counts = check_chat(json.loads(path.read_text("utf-8")), path.stem)
    elif args.questions:
        path = Path(args.questions)
        chat_path = Path(args.chat_file) if args.chat_file else TRAIN_DIR / f"{path.stem}.json"
        chat = json.loads(chat_path.read_text("utf-8"))
        problems, counts = check_questions(path.read_text("utf-8").splitlines(), chat, path.stem)
    else:
        ap.error("give a questions file or --chat FILE")
    for p in problems:
        print(p)
    print(("OK" if not problems else f"{len(problems)} problem(s)") + ": " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
