"""``chorus bench analysis``: the analysis pass alone, messages/s with the linear act and link models and with
the encoder's heads over them, on the same messages in the same run.

The messages are the labelled training chats' (evaluation/data/train: real-looking group chat, so decisions,
changes and replies come at the rate they do in use; synthetic word salad would be nearly all chatter, which
the link cascade skips). Each chat is a channel. They are imported and embedded first (not timed; the bot
embeds before it analyses), into one store per system, and then each store's backlog is analysed in the bot's
batches (``--batch``), timed from the first batch to the last commit: spaCy's parse, the models and the
group-state writes, as `AnalysisPass.run` does them in the background. Each system first reads a few messages
in a store of their own, untimed, so loading spaCy and the models is not counted against either.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from bot.app import load_embedder_from
from bot.config import Settings
from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import linear_models, with_heads
from memory.datasets.socialmem import load_network
from memory.models import Message
from memory.records import Records
from memory.store import Store

from .common import save

WARM = 20  # messages each system reads before it is timed
CHATS = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "train"


def messages(n_chats: int) -> list[Message]:
    """The first ``n_chats`` training chats (by name), each in its own channel."""
    paths = sorted(CHATS.glob("*.json"))[:n_chats]
    if not paths:
        raise SystemExit(f"no chats in {CHATS}")
    out = []
    for path in paths:
        conv = load_network(path)
        out += [Message(m.platform, m.workspace, conv.id, m.msg_id, m.author_id, m.author_name, m.text, m.ts,
                        reply_to=m.reply_to) for m in conv.messages]
    return out


def one(name: str, models, msgs: list[Message], folder: Path, embedder, batch: int) -> dict:
    store = Store(folder / f"{name}.db", embedder=embedder, idle_gap_s=3600)
    try:
        with tqdm(total=len(msgs), desc=f"import and embed ({name})", unit="msg", file=sys.stderr) as bar:
            store.ingest(msgs, embed=True, progress=bar.update)
        analysis = AnalysisPass(store, Records(store), *models)
        with tqdm(total=len(msgs), desc=f"analyse ({name})", unit="msg", file=sys.stderr) as bar:
            started = time.perf_counter()
            done = analysis.run(batch_size=batch, progress=bar.update)
            seconds = time.perf_counter() - started
        return {"system": name, "acts": models[0].version, "links": models[1].version, "messages": done,
                "failed": store.failed_analysis(), "seconds": round(seconds, 1),
                "messages_per_s": round(done / seconds, 1) if seconds else None}
    finally:
        store.close()


def main(args: argparse.Namespace, settings: Settings) -> int:
    msgs = messages(int(args.chats))
    linear = linear_models()
    heads = with_heads(*linear, Path(args.encoder) if args.encoder else None)
    systems = {"linear": linear}
    if heads is None:
        print("the encoder has no analysis heads (the shipped one, or --encoder DIR): linear models only",
              file=sys.stderr)
    else:
        systems["encoder heads"] = heads
    embedder = load_embedder_from(settings)
    rows = []
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        for name, models in systems.items():
            one(f"warm-{name.replace(' ', '-')}", models, msgs[:WARM], Path(tmp), embedder, int(args.batch))
            rows.append(one(name.replace(" ", "-"), models, msgs, Path(tmp), embedder, int(args.batch)))
    report = {"chats": int(args.chats), "messages": len(msgs), "batch": int(args.batch), "systems": rows}
    path = save(args.out, "analysis", report)
    print("\n| system | acts | links | messages | seconds | messages/s | failed |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['acts']} | {r['links']} | {r['messages']:,} | {r['seconds']} | "
              f"{r['messages_per_s']} | {r['failed']} |")
    if len(rows) == 2 and rows[1]["messages_per_s"]:
        print(f"\nthe heads run at {rows[1]['messages_per_s'] / rows[0]['messages_per_s']:.2f}x the linear models' "
              f"speed; the load benchmark's rate is 100 messages/s")
    print(f"written to {path}")
    return 0

