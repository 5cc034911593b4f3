"""Message vectors: what gets embedded, reusing stored vectors, and the embedding backlog.

Messages imported without vectors wait in the backlog (``embedded = 0``) until
``embed_pending`` works through them; the model always runs outside the write lock there.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from ..db import Connection, chunked, marks
from ..embeddings.base import Embedder, prefix
from ..errors import EmbeddingError
from .base import StoreBase
from .rows import IngestResult


def embed_text(author_name: str, text: str) -> str:
    """What gets embedded for a message: who said it and what (names matter to questions)."""
    return f"{author_name}: {text}"


def text_hash(text: str) -> str:
    """The key under which identical embedded text shares one vector."""
    return hashlib.blake2b(prefix(text).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class EmbeddingBacklog(StoreBase):
    """Computes message vectors (never twice for the same text) and embeds the backlog."""

    def _vectors_for(self, conn: Connection | None, texts: list[str], result: IngestResult) -> np.ndarray | None:
        """Vectors for texts, reusing stored ones for identical text (never embed twice).

        With ``conn=None`` the model runs without holding the store lock (the backlog path).
        """
        if self.embedder is None:
            return None
        embedder = self.embedder
        hashes = [text_hash(t) for t in texts]
        out = np.zeros((len(texts), self.vector_dim or embedder.dim), dtype=np.float32)
        known: dict[str, np.ndarray] = {}
        wanted = sorted(set(hashes))

        def lookup(conn: Connection) -> None:
            for chunk in chunked(wanted):
                for h, blob in conn.execute(
                        "SELECT m.text_hash, v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
                        f"WHERE m.embedded = 1 AND m.text_hash IN ({marks(chunk)}) GROUP BY m.text_hash", chunk):
                    known[h] = np.frombuffer(blob, dtype=np.float32)

        if conn is None:  # the caller holds no lock: look up under it briefly, run the model outside it
            with self.read() as c:
                lookup(c)
        else:
            lookup(conn)
        todo_idx: dict[str, list[int]] = {}
        for i, h in enumerate(hashes):
            if h in known:
                out[i] = known[h]
                result.reused_vectors += 1
            else:
                todo_idx.setdefault(h, []).append(i)
        if todo_idx:
            order = list(todo_idx)
            try:
                vecs = embedder.embed([prefix(texts[todo_idx[h][0]]) for h in order])
            except EmbeddingError:
                raise
            except Exception as exc:  # the model is third-party code: name it in the error
                raise EmbeddingError(f"embedding with {embedder.name} failed: {exc}") from exc
            for h, vec in zip(order, vecs):
                for i in todo_idx[h]:
                    out[i] = vec
            result.embedded += len(order)
            result.reused_vectors += sum(len(v) - 1 for v in todo_idx.values())
        return out

    def embed_pending(self, *, batch_size: int = 256, progress: Callable[[int], None] | None = None,
                      limit: int | None = None, scope_ids: Sequence[int] | None = None,
                      newest_first: bool = False) -> int:
        """Embed messages imported without vectors (the backlog); returns how many were done.

        ``scope_ids`` and ``newest_first`` pick what a question needs first: its scope's latest messages.
        """
        if self.embedder is None:
            raise EmbeddingError("no embedding model is configured, so the backlog cannot be embedded")
        done = 0
        while limit is None or done < limit:
            with self._embed_lock:
                n = self._embed_batch(batch_size if limit is None else min(batch_size, limit - done), scope_ids,
                                      newest_first)
            if n == 0:
                break
            done += n
            if progress:
                progress(n)
        return done

    def _embed_batch(self, batch_size: int, scope_ids: Sequence[int] | None = None, newest_first: bool = False) -> int:
        where: str = ""
        args: list[int] = []
        if scope_ids is not None:
            where, args = f" AND scope_id IN ({marks(scope_ids)})", [int(s) for s in scope_ids]
        order = "DESC" if newest_first else "ASC"
        with self.read() as conn:
            rows = conn.execute("SELECT id, scope_id, author_name || ': ' || text FROM messages "
                                f"WHERE embedded = 0 AND deleted = 0{where} ORDER BY id {order} LIMIT ?",
                                (*args, batch_size)).fetchall()
        if rows:
            result = IngestResult()
            # The model runs outside the write lock, so live messages are never stuck behind a batch.
            vecs = self._vectors_for(None, [text for _, _, text in rows], result)
            assert vecs is not None  # embed_pending checked the embedder
            with self.write() as conn:
                # A message edited or deleted meanwhile keeps its new state (it is picked up again if needed).
                current = dict(conn.execute(
                    f"SELECT id, author_name || ': ' || text FROM messages WHERE embedded = 0 AND deleted = 0 "
                    f"AND id IN ({marks(rows)})", [mid for mid, _, _ in rows]).fetchall())
                fresh = [(mid, sid, vec) for (mid, sid, text), vec in zip(rows, vecs) if current.get(mid) == text]
                for mid, sid, vec in fresh:
                    conn.execute("DELETE FROM message_vec WHERE rowid = ?", (mid,))
                    conn.execute("INSERT INTO message_vec(rowid, scope_id, embedding) VALUES (?,?,?)",
                                 (mid, sid, vec.tobytes()))
                seq = self._take_vec_seq(conn, len(fresh))
                conn.executemany("UPDATE messages SET embedded = 1, vec_seq = ? WHERE id = ?",
                                 [(seq + n, mid) for n, (mid, _, _) in enumerate(fresh)])
        return len(rows)

    def pending_embeddings(self, scope_ids: Sequence[int] | None = None) -> int:
        """How many live messages (of ``scope_ids``, or of the whole store) still wait for a vector."""
        sql, args = "SELECT count(*) FROM messages WHERE embedded = 0 AND deleted = 0", []
        if scope_ids is not None:
            sql += f" AND scope_id IN ({marks(scope_ids)})"
            args = [int(s) for s in scope_ids]
        with self.read() as conn:
            return conn.execute(sql, args).fetchone()[0]

    def reset_vectors(self, embedder: Embedder) -> None:
        """Drop every message and record vector so a different embedding model can re-index the store.

        One transaction: the store either keeps the old vectors or has none (all messages
        back in the embedding backlog, which `embed_pending` works through).
        """
        with self.write() as conn:
            conn.execute("DROP TABLE IF EXISTS message_vec")
            conn.execute("DROP TABLE IF EXISTS record_vec")
            conn.execute("DELETE FROM meta WHERE key = 'embedding'")
            conn.execute("UPDATE messages SET embedded = 0 WHERE bot_traffic = 0")
            conn.execute("UPDATE scope_state SET vec_gen = vec_gen + 1")
        self.embedder = embedder
        self._ensure_vector_table(embedder)
