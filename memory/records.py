"""Track 2: derived records, their provenance, update chains and indexes.

Nothing here is ever overwritten: an UPDATE appends a node and links old -> new;
a record resting only on deleted messages is retracted, not erased (forget-me
erases its text). Heads are the active nodes nobody supersedes.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import ftsquery
from .db import Connection, chunked, marks, select_into
from .embeddings.base import Embedder
from .models import GROUP  # noqa: F401  (records are imported with their GROUP owner)
from .store import Store, scopeindex

PERSON_LAYERS = ("per_speaker_core", "per_speaker_profile")
GROUP_LAYERS = ("group_interaction", "group_insight")
WRITER_LAYERS = PERSON_LAYERS + GROUP_LAYERS
INSIGHT_LAYER = "persona_insight"
LAYERS = WRITER_LAYERS + (INSIGHT_LAYER,)
WRITER_UTYPES = ("fact", "stance", "observation", "decision", "relation", "plan", "norm", "task")
GROUP_ACT_UTYPES = ("decision", "plan", "norm", "task")  # what a GROUP record of the group's own acts is
UTYPES = WRITER_UTYPES + ("insight",)
PERSONA = "PERSONA"

RECORD_COLUMNS = ("id, scope_id, layer, utype, owner, source, content, ts, session, turn, confidence, status, "
                  "superseded_by, prev_id, chain_id, writer_model, verification, created_at")


@dataclass
class Record:
    id: int
    scope_id: int
    layer: str
    utype: str
    owner: str
    source: str
    content: str
    ts: float
    session: int | None
    turn: int | None
    confidence: float
    status: str
    superseded_by: int | None
    prev_id: int | None
    chain_id: int
    writer_model: str
    verification: dict
    created_at: float
    sources: list[int] = field(default_factory=list)

    @property
    def entry_id(self) -> str:
        return f"E{self.id}"


def _select(conn: Connection, sql: str, args: Sequence = ()) -> list[Record]:
    """Records of a query selecting ``RECORD_COLUMNS``, by column name (verification is stored as JSON)."""
    return select_into(conn, Record, sql, args, convert={"verification": lambda v: json.loads(v or "{}")})


def parse_entry_id(text: str) -> int | None:
    text = str(text).strip()
    if text[:1] in ("E", "e"):
        text = text[1:]
    return int(text) if text.isdigit() and len(text) < 12 else None


@dataclass
class NewRecord:
    """A verified record ready to commit; the system fills every coordinate."""

    scope_id: int
    layer: str
    utype: str
    owner: str
    source: str
    content: str
    ts: float
    session: int | None
    turn: int | None
    confidence: float
    message_ids: list[int]
    verification: dict
    updates: int | None = None  # id of the head this node supersedes
    cites: list[int] = field(default_factory=list)  # fact record ids an insight rests on


class Records:
    """Track 2 reads and the in-transaction writes the writer and privacy operations use."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.vector_dim: int | None = None
        if store.embedder is not None:
            self.ensure_vectors(store.embedder)

    def ensure_vectors(self, embedder: Embedder) -> None:
        with self.store.write() as conn:
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS record_vec USING vec0(scope_id integer partition key, "
                         f"embedding float[{int(embedder.dim)}] distance_metric=cosine)")
        self.vector_dim = int(embedder.dim)

    def embed_missing(self, *, batch_size: int = 256, progress=None) -> int:
        """Give every active record without a vector one (after `Store.reset_vectors`); returns how many."""
        embedder = self.store.embedder
        if embedder is None or not self.vector_dim:
            return 0
        done = 0
        while True:
            with self.store.read() as conn:
                rows = conn.execute("SELECT id, scope_id, content FROM records WHERE status = 'active' AND id NOT IN "
                                    "(SELECT rowid FROM record_vec) ORDER BY id LIMIT ?", (batch_size,)).fetchall()
            if not rows:
                return done
            vecs = embedder.embed([content for _, _, content in rows])  # outside the write lock, like the backlog
            with self.store.write() as conn:
                for (rid, sid, _), vec in zip(rows, vecs):
                    conn.execute("DELETE FROM record_vec WHERE rowid = ?", (rid,))
                    conn.execute("INSERT INTO record_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                                 (rid, sid, np.asarray(vec, dtype=np.float32).tobytes()))
            done += len(rows)
            if progress:
                progress(len(rows))

    # ------------------------------------------------------------------ reads
    def get(self, ids: Sequence[int], *, with_sources: bool = False) -> list[Record]:
        if not ids:
            return []
        out: dict[int, Record] = {}
        with self.store.read() as conn:
            for chunk in chunked(ids):
                for rec in _select(conn, f"SELECT {RECORD_COLUMNS} FROM records WHERE id IN ({marks(chunk)})", chunk):
                    out[rec.id] = rec
                if with_sources:
                    for rid, mid in conn.execute(
                            f"SELECT record_id, message_id FROM record_sources WHERE record_id IN ({marks(chunk)}) "
                            "ORDER BY message_id", chunk):
                        out[rid].sources.append(mid)
        return [out[i] for i in ids if i in out]

    def heads(self, scope_ids: Sequence[int], *, owners: Sequence[str] | None = None,
              layers: Sequence[str] | None = None, limit: int = 10_000) -> list[Record]:
        """Current active nodes, newest first, optionally for some owners or layers."""
        if not scope_ids:
            return []
        sql = (f"SELECT {RECORD_COLUMNS} FROM records WHERE superseded_by IS NULL AND status = 'active' "
               f"AND scope_id IN ({marks(scope_ids)})")
        args: list = list(scope_ids)
        if owners is not None:
            sql += f" AND owner IN ({marks(owners)})"
            args += list(owners)
        if layers is not None:
            sql += f" AND layer IN ({marks(layers)})"
            args += list(layers)
        sql += " ORDER BY ts DESC, id DESC LIMIT ?"
        args.append(limit)
        with self.store.read() as conn:
            return _select(conn, sql, args)

    def chain(self, record_id: int) -> list[Record]:
        """Every node of a record's update chain, oldest first (retracted nodes included)."""
        with self.store.read() as conn:
            row = conn.execute("SELECT chain_id FROM records WHERE id = ?", (record_id,)).fetchone()
            if row is None:
                return []
            return _select(conn, f"SELECT {RECORD_COLUMNS} FROM records WHERE chain_id = ? ORDER BY id", (row[0],))

    def cited_facts(self, insight_id: int) -> list[Record]:
        with self.store.read() as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT to_id FROM record_links WHERE from_id = ? AND kind = 'cites' ORDER BY to_id", (insight_id,))]
        return self.get(ids, with_sources=True)

    def search(self, scope_ids: Sequence[int], text: str, *, owners: Sequence[str] | None = None,
               limit: int = 20, heads_only: bool = True, query_vec=None,
               lexical_only: bool = False) -> list[tuple[Record, float]]:
        """Records matching ``text`` (BM25 + vectors fused), restricted to scopes and owners in SQL.

        ``lexical_only`` skips the vectors (the question could not be embedded).
        """
        if not scope_ids:
            return []
        from .search import rrf

        lexical: list[int] = []
        query = ftsquery.match_any(text)
        owner_sql, owner_args = "", []
        if owners is not None:
            owner_sql = f" AND r.owner IN ({marks(owners)})"
            owner_args = list(owners)
        head_sql = " AND r.superseded_by IS NULL" if heads_only else ""
        with self.store.read() as conn:
            tables = scopeindex.indexed_scopes(conn, scopeindex.RECORDS, scope_ids) if query else []
            if tables:  # each scope's own table, so BM25 reads only the visible scopes' statistics
                arms = " UNION ALL ".join(
                    f"SELECT f.rowid AS id, bm25({t}) AS score FROM {t} f JOIN records r ON r.id = f.rowid "
                    f"WHERE {t} MATCH ? AND r.status = 'active'{head_sql}{owner_sql}"
                    for t in (scopeindex.RECORDS.table(s) for s in tables))
                lexical = [r[0] for r in conn.execute(
                    f"SELECT id FROM ({arms}) ORDER BY score, id LIMIT ?",
                    [*(a for _ in tables for a in (query, *owner_args)), limit * 3])]
        dense: list[int] = []
        embedder = self.store.embedder
        if embedder is not None and self.vector_dim and text.strip() and not lexical_only:
            vec = query_vec if query_vec is not None else embedder.embed([text])[0]
            with self.store.read() as conn:
                for sid in scope_ids:
                    cands = [r[0] for r in conn.execute(
                        "SELECT rowid FROM record_vec WHERE embedding MATCH ? AND k = ? AND scope_id = ?",
                        (vec.tobytes(), limit * 3, int(sid)))]
                    if cands:
                        keep = {r[0] for r in conn.execute(
                            f"SELECT id FROM records r WHERE id IN ({marks(cands)}) AND status = 'active'{head_sql}"
                            f"{owner_sql}", [*cands, *owner_args])}
                        dense.extend(c for c in cands if c in keep)
        fused = rrf(lexical, dense)[:limit]
        recs = {r.id: r for r in self.get([f.id for f in fused], with_sources=True)}
        return [(recs[f.id], f.score) for f in fused if f.id in recs]

    def count(self, scope_id: int | None = None, *, heads_only: bool = False) -> int:
        sql = "SELECT count(*) FROM records WHERE status = 'active'"
        args: list = []
        if heads_only:
            sql += " AND superseded_by IS NULL"
        if scope_id is not None:
            sql += " AND scope_id = ?"
            args.append(scope_id)
        with self.store.read() as conn:
            return conn.execute(sql, args).fetchone()[0]

    # ------------------------------------------------------------------ writes (inside a transaction)
    def insert(self, conn: Connection, rec: NewRecord, *, run_id: int | None, model: str,
               vector: np.ndarray | None) -> int:
        now = time.time()
        cur = conn.execute(
            "INSERT INTO records(scope_id, layer, utype, owner, source, content, ts, session, turn, confidence, "
            "chain_id, prev_id, writer_run_id, writer_model, verification, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?,?,?,?)",
            (rec.scope_id, rec.layer, rec.utype, rec.owner, rec.source, rec.content, rec.ts, rec.session, rec.turn,
             rec.confidence, rec.updates, run_id, model, json.dumps(rec.verification), now))
        rid = int(cur.lastrowid)
        chain_id = rid
        if rec.updates is not None:
            chain_id = conn.execute("SELECT chain_id FROM records WHERE id = ?", (rec.updates,)).fetchone()[0]
            conn.execute("UPDATE records SET superseded_by = ? WHERE id = ?", (rid, rec.updates))
            conn.execute("INSERT INTO record_links(from_id, to_id, kind) VALUES (?,?, 'update')", (rec.updates, rid))
        conn.execute("UPDATE records SET chain_id = ? WHERE id = ?", (chain_id, rid))
        conn.executemany("INSERT OR IGNORE INTO record_sources(record_id, message_id) VALUES (?,?)",
                         [(rid, m) for m in rec.message_ids])
        conn.executemany("INSERT OR IGNORE INTO record_links(from_id, to_id, kind) VALUES (?,?, 'cites')",
                         [(rid, c) for c in rec.cites])
        scopeindex.insert(conn, scopeindex.RECORDS, [(rec.scope_id, rid, rec.content)])
        if vector is not None and self.vector_dim:
            conn.execute("INSERT INTO record_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                         (rid, rec.scope_id, np.asarray(vector, dtype=np.float32).tobytes()))
        return rid

    def retract(self, conn: Connection, ids: Sequence[int], reason: str, *, erase: bool = False) -> int:
        """Mark records retracted and drop them from the indexes; ``erase`` also wipes their text."""
        n = 0
        for rid in ids:
            row = conn.execute("SELECT status, prev_id, superseded_by, scope_id FROM records WHERE id = ?",
                               (rid,)).fetchone()
            if row is None:
                continue
            status, prev_id, superseded_by, scope_id = row
            if status == "active":
                n += 1
            conn.execute("UPDATE records SET status = 'retracted', retracted_reason = ? WHERE id = ?", (reason, rid))
            if erase:
                conn.execute("UPDATE records SET content = '' WHERE id = ?", (rid,))
            scopeindex.delete(conn, scopeindex.RECORDS, [(scope_id, rid)])
            if self.vector_dim or conn.execute("SELECT 1 FROM sqlite_master WHERE name='record_vec'").fetchone():
                conn.execute("DELETE FROM record_vec WHERE rowid = ?", (rid,))
            # A retracted head hands the chain back to its predecessor, which is current again.
            if status == "active" and superseded_by is None and prev_id is not None:
                conn.execute("UPDATE records SET superseded_by = NULL WHERE id = ? AND status = 'active'", (prev_id,))
        return n

    def records_resting_on(self, conn: Connection, message_ids: Sequence[int]) -> dict[int, list[int]]:
        """Active record id -> all its source message ids, for records citing any of ``message_ids``."""
        out: dict[int, list[int]] = {}
        for chunk in chunked(message_ids):
            for rid, in conn.execute(
                    f"SELECT DISTINCT rs.record_id FROM record_sources rs JOIN records r ON r.id = rs.record_id "
                    f"WHERE rs.message_id IN ({marks(chunk)}) AND r.status = 'active'", chunk).fetchall():
                out[rid] = [m for (m,) in conn.execute(
                    "SELECT message_id FROM record_sources WHERE record_id = ?", (rid,))]
        return out
