"""`chorus reindex`: switching the embedding model re-embeds messages and records, and resumes."""
from __future__ import annotations

from pathlib import Path

from bot.cli import main
from memory.embeddings.minilm import MiniLMEmbedder
from memory.models import Message
from memory.records import NewRecord, Records
from memory.search import Searcher
from memory.store import Store
from tests._fakes import HashEmbedder

LINES = ["I booked the cabin by the lake for June", "my knee hurts after the marathon",
         "we agreed to split the rent by room size", "I am learning to play the cello"]


def _old_store(path: Path) -> None:
    store = Store(path, embedder=HashEmbedder(dim=64))
    store.ingest([Message("console", "local", "general", str(i), f"u{i}", f"p{i}", t, 1000.0 + i)
                  for i, t in enumerate(LINES)])
    records = Records(store)
    sid = store.scopes()[0].id
    with store.write() as conn:
        for i in range(2):
            records.insert(conn, NewRecord(sid, "per_speaker_core", "fact", f"u{i}", f"u{i}", LINES[i], 1000.0 + i,
                                           1, i + 1, 0.9, [i + 1], {}), run_id=None, model="test",
                           vector=store.embedder.embed([LINES[i]])[0])
    store.close()


def _counts(path: Path) -> tuple[int, int]:
    store = Store(path)
    try:
        with store.read() as conn:
            has_records = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'record_vec'").fetchone()
            return (conn.execute("SELECT count(*) FROM message_vec").fetchone()[0],
                    conn.execute("SELECT count(*) FROM record_vec").fetchone()[0] if has_records else 0)
    finally:
        store.close()


def _config(tmp_path: Path, db: Path) -> Path:
    cfg = tmp_path / "chorus.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[embeddings]\nbackend = "minilm"\n')
    return cfg


def test_reindex_moves_a_store_to_the_configured_model(tmp_path: Path, embedder: MiniLMEmbedder, capsys) -> None:
    db = tmp_path / "c.db"
    _old_store(db)
    cfg = _config(tmp_path, db)
    # The configured model differs from the stored vectors: the bot refuses and names the fix.
    assert main(["--config", str(cfg), "ask", "--scope", "console:local:general", "cello?"]) == 1
    assert "chorus reindex" in capsys.readouterr().err
    assert main(["--config", str(cfg), "reindex"]) == 0
    assert "embedded 4 messages and 2 records with all-MiniLM-L6-v2" in capsys.readouterr().out
    assert _counts(db) == (4, 2)
    store = Store(db, embedder=embedder)  # opens: the store now records the configured model
    hits = Searcher(store).search([store.scopes()[0].id], "which instrument?", k=1, mode="dense")
    assert hits[0].message.text == LINES[3]
    found = Records(store).search([store.scopes()[0].id], "knee pain", limit=1)
    assert found and found[0][0].content == LINES[1]
    store.close()
    # Running it again has nothing to do.
    assert main(["--config", str(cfg), "reindex"]) == 0
    assert "embedded 0 messages and 0 records" in capsys.readouterr().out


def test_an_interrupted_reindex_resumes(tmp_path: Path, embedder: MiniLMEmbedder, capsys) -> None:
    db = tmp_path / "c.db"
    _old_store(db)
    store = Store(db)
    store.reset_vectors(embedder)  # what reindex does first, in one transaction
    store.embed_pending(limit=1)  # ... then it was stopped
    store.close()
    assert _counts(db) == (1, 0)
    assert main(["--config", str(_config(tmp_path, db)), "reindex"]) == 0
    assert "embedded 3 messages and 2 records" in capsys.readouterr().out
    assert _counts(db) == (4, 2)
