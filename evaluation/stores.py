"""One fresh store per evaluation conversation, filled through the normal ingest path.

Every evaluator (retrieval, replies, the LODO sweeps) walks conversations the same way:
a store file per conversation (in ``store_dir`` when the caller keeps them, else a
temporary folder), its messages ingested and read by the analysis pass with the shipped
models (their entities, acts and the group state, as the bot stores them at ingest),
questions asked an hour after the last message.
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import shipped_models
from memory.datasets import Conversation
from memory.embeddings.base import Embedder
from memory.records import Records
from memory.records_sync import attach
from memory.store import Store


def safe_name(text: str) -> str:
    """A file name for a conversation id."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)[:80] or "conversation"


@dataclass
class ConversationStore:
    conv: Conversation
    store: Store
    scope_ids: list[int]
    asked_at: float  # an hour after the conversation's last message


def conversation_stores(conversations: Iterable[Conversation], embedder: Embedder | None, *,
                        store_dir: str | Path | None = None, prefix: str = "chorus-eval-", analyse: bool = True
                        ) -> Iterator[ConversationStore]:
    """Each conversation in its own ingested (and, with ``analyse``, analysed) store, closed when the caller
    moves on (or stops)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        folder = Path(store_dir) if store_dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for conv in conversations:
            store = Store(folder / f"{safe_name(conv.id)}.db", embedder=embedder, idle_gap_s=3600)
            try:
                store.ingest(conv.messages, embed=embedder is not None)
                if analyse and store.pending_analysis():
                    records = Records(store)
                    attach(store, records)
                    AnalysisPass(store, records, *shipped_models()).run()
                yield ConversationStore(conv, store, [s.id for s in store.scopes()],
                                        max(m.ts for m in conv.messages) + 3600)
            finally:
                store.close()
