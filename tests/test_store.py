"""Track 1 store: migrations, idempotent ingest, sessions, roster, edits, deletions, hostile text."""
from __future__ import annotations

import sqlite3 as std_sqlite3

import pytest

from memory import migrate
from memory.db import connect
from memory.errors import InputError, StoreError
from memory.models import Message, ScopeKey
from memory.store import Store
from tests.conftest import msg


def test_migrations_from_blank(tmp_path):
    conn = connect(tmp_path / "blank.db")
    ran = migrate.migrate(conn)
    assert ran == [m.key for m in migrate.available()]
    assert migrate.migrate(conn) == []  # already at latest
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"messages", "people", "scopes", "_migrations"} <= names
    assert not {"messages_fts", "records_fts", "messages_fts_vocab"} & names  # one index per scope since 0008
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    conn.close()


def test_failed_migration_rolls_back(tmp_path, monkeypatch):
    good = migrate.available()
    bad = migrate.Migration(9999, "broken", "CREATE TABLE half_done (x INTEGER);\nTHIS IS NOT SQL;")
    monkeypatch.setattr(migrate, "available", lambda: [*good, bad])
    conn = connect(tmp_path / "m.db")
    with pytest.raises(StoreError, match="9999_broken"):
        migrate.migrate(conn)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in names
    assert "9999_broken" not in migrate.applied(conn)
    conn.close()


def test_0008_moves_the_shared_index_into_one_table_per_scope(tmp_path):
    """A store written before 0008 keeps every live message and active record searchable, each in its
    own scope's table, and the rows of deleted messages and bot traffic stay out."""
    conn = connect(tmp_path / "old.db")
    before = [m for m in migrate.available() if m.number < 8]
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for mig in before:
        for statement in migrate.split_statements(mig.sql):
            conn.execute(statement)
        conn.execute("INSERT INTO _migrations VALUES (?, 0)", (mig.key,))
    for sid, channel in ((1, "a"), (2, "b")):
        conn.execute("INSERT INTO scopes(id, platform, workspace, channel, created_at) VALUES (?, 'p', 'w', ?, 0)",
                     (sid, channel))
    rows = [(1, 1, "m1", "the picnic is on Friday", 0, 0), (2, 2, "m2", "picnic in the other channel", 0, 0),
            (3, 1, "m3", "deleted picnic", 1, 0), (4, 1, "m4", "@chorus picnic?", 0, 1)]
    for mid, sid, msg_id, text, deleted, to_bot in rows:
        conn.execute("INSERT INTO messages(id, scope_id, msg_id, author_id, author_name, text, ts, session, turn, "
                     "text_hash, deleted, bot_traffic) VALUES (?,?,?,'u','Ann',?,0,1,1,'',?,?)",
                     (mid, sid, msg_id, text, deleted, to_bot))
        if not deleted and not to_bot:
            conn.execute("INSERT INTO messages_fts(rowid, text, author_name, scope_tag) VALUES (?,?,?,?)",
                         (mid, text, "Ann", f"s{sid}"))
    conn.execute("INSERT INTO records(id, scope_id, layer, utype, owner, source, content, ts, session, turn, "
                 "confidence, chain_id, writer_model, verification, created_at) VALUES (1, 2, 'per_speaker_profile', "
                 "'fact', 'u', 'u', 'likes picnics', 0, 1, 1, 1.0, 1, 'm', '{}', 0)")
    conn.execute("INSERT INTO records_fts(rowid, content, scope_tag) VALUES (1, 'likes picnics', 's2')")
    assert migrate.migrate(conn)[0] == "0008_scope_indexes"  # then any later ones
    assert [r[0] for r in conn.execute("SELECT rowid FROM messages_fts_s1 WHERE messages_fts_s1 MATCH 'picnic'")] == [1]
    assert [r[0] for r in conn.execute("SELECT rowid FROM messages_fts_s2 WHERE messages_fts_s2 MATCH 'picnic'")] == [2]
    assert [r[0] for r in conn.execute("SELECT rowid FROM records_fts_s2 WHERE records_fts_s2 MATCH 'picnic'")] == [1]
    assert conn.execute("SELECT doc FROM messages_vocab_s1 WHERE term = 'picnic'").fetchone()[0] == 1
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not {"messages_fts", "records_fts", "messages_fts_vocab", "records_fts_s1"} & names
    conn.close()


def test_python_migration_failure_rolls_back(tmp_path, monkeypatch):
    good = migrate.available()
    bad = migrate.Migration(9998, "py_broken", "def upgrade(conn):\n    conn.execute('CREATE TABLE half (x)')\n"
                            "    raise ValueError('boom')\n", "py")
    monkeypatch.setattr(migrate, "available", lambda: [*good, bad])
    conn = connect(tmp_path / "p.db")
    with pytest.raises(ValueError, match="boom"):
        migrate.migrate(conn)
    assert "half" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "9998_py_broken" not in migrate.applied(conn)
    conn.close()


def test_newer_store_refused(tmp_path):
    conn = connect(tmp_path / "n.db")
    migrate.migrate(conn)
    conn.execute("INSERT INTO _migrations VALUES ('9000_future', 0)")
    with pytest.raises(StoreError, match="newer Chorus"):
        migrate.migrate(conn)
    conn.close()


def test_same_message_twice_stored_once(store):
    m = msg(1, "hello there")
    assert store.ingest([m]).inserted == 1
    r = store.ingest([m, m])
    assert (r.inserted, r.duplicates) == (0, 2)
    assert store.count_messages() == 1
    # The same id in another channel is a different message.
    assert store.ingest([msg(1, "hello there", channel="other")]).inserted == 1


def test_sessions_split_on_idle_gap(tmp_path):
    s = Store(tmp_path / "s.db", idle_gap_s=1800)
    base = 1_700_000_000
    times = [0, 60, 120, 120 + 1801, 120 + 1900, 10_000]
    s.ingest([msg(i, f"m{i}", ts=base + t) for i, t in enumerate(times)])
    got = [(m.session, m.turn) for m in s.recent(s.scopes()[0].id, 10)]
    assert got == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1)]
    # Continues across calls (cursor persisted).
    s.ingest([msg(99, "later", ts=base + 10_030)])
    assert s.recent(s.scopes()[0].id, 1)[0].session == 3 and s.recent(s.scopes()[0].id, 1)[0].turn == 2
    s.close()


def test_roster_names_and_aliases(store):
    store.ingest([msg(1, "hi", author="Alice"), msg(2, "yo", author="Bob"), msg(3, "again", author="Alice")])
    sid = store.scopes()[0].id
    roster = {p.person_id: p for p in store.roster(sid)}
    assert roster["alice"].n_messages == 2 and roster["bob"].display_name == "Bob"
    store.add_alias(sid, "bob", "Bobby")
    assert store.roster(sid)[1].names() == ["Bob", "Bobby"]
    with pytest.raises(InputError):
        store.add_alias(sid, "nobody", "x")


def fts_ids(store: Store) -> set[int]:
    from memory.store import scopeindex

    with store.read() as conn:
        return {r for s in store.scopes() for r in scopeindex.rowids(conn, scopeindex.MESSAGES, s.id)}


def test_fts_follows_insert_edit_delete(store):
    store.ingest([msg(1, "pancakes for breakfast"), msg(2, "waffles are better")])
    key = ScopeKey("console", "w", "general")
    sid = store.scope_id(key)
    from memory.search import Searcher

    s = Searcher(store)
    assert [h.message.msg_id for h in s.search([sid], "pancakes", mode="bm25")] == ["1"]
    assert store.edit(key, "1", "crepes for breakfast")
    assert s.search([sid], "pancakes", mode="bm25") == []
    assert [h.message.msg_id for h in s.search([sid], "crepes", mode="bm25")] == ["1"]
    assert store.find(key, "1").edited
    assert store.delete(key, "2")
    assert s.search([sid], "waffles", mode="bm25") == []
    assert fts_ids(store) == {store.find(key, "1").id}
    # A re-delivered deleted message stays deleted (tombstone).
    assert store.ingest([msg(2, "waffles are better")]).inserted == 0
    assert not store.edit(key, "404", "unknown")


def test_vectors_follow_insert_edit_delete_and_reuse(vstore):
    key = ScopeKey("console", "w", "general")
    r = vstore.ingest([msg(1, "the cat sat on the mat"), msg(2, "the cat sat on the mat"), msg(3, "dogs bark")])
    assert r.embedded == 2 and r.reused_vectors == 1  # identical text embedded once
    r2 = vstore.ingest([msg(4, "dogs bark")])
    assert r2.embedded == 0 and r2.reused_vectors == 1
    with vstore.read() as conn:
        n_vec = conn.execute("SELECT count(*) FROM message_vec").fetchone()[0]
    assert n_vec == 4
    vstore.delete(key, "3")
    vstore.edit(key, "1", "a parrot talks")
    with vstore.read() as conn:
        rows = dict(conn.execute("SELECT m.msg_id, count(v.rowid) FROM messages m LEFT JOIN message_vec v "
                                 "ON v.rowid = m.id GROUP BY m.id").fetchall())
    assert rows == {"1": 1, "2": 1, "3": 0, "4": 1}
    from memory.search import Searcher

    hits = Searcher(vstore).search([vstore.scope_id(key)], "a bird that speaks", k=1, mode="dense")
    assert hits[0].message.msg_id == "1"


def test_bulk_then_embed_backlog(tmp_path, embedder):
    s = Store(tmp_path / "b.db", embedder=embedder)
    s.ingest([msg(i, f"message number {i}") for i in range(50)], embed=False)
    assert s.pending_embeddings() == 50
    assert s.embed_pending(batch_size=16) == 50
    assert s.pending_embeddings() == 0
    s.close()


@pytest.mark.parametrize("text", [
    "emoji 🎉🔥 and ünïcödé, 中文, العربية",
    "control \x01\x02\x1b[31m chars\r\n\t",
    "nul\x00byte",
    "'; DROP TABLE messages; --",
    "",
])
def test_hostile_text_round_trips(store, text):
    store.ingest([msg(1, text)])
    got = store.recent(store.scopes()[0].id, 1)[0].text
    assert got == text.replace("\x00", "")
    assert store.count_messages() == 1


def test_huge_message_stored_whole_and_embedded_from_prefix(vstore):
    text = ("word " * 20_000)[:100_000]
    assert len(text) == 100_000
    r = vstore.ingest([msg(1, text)])
    assert r.inserted == 1 and r.embedded == 1
    assert vstore.recent(vstore.scopes()[0].id, 1)[0].text == text


def test_bad_input_rejected_with_reason_and_nothing_stored(store):
    with pytest.raises(InputError, match="message id"):
        Message("console", "w", "c", "", "a", "A", "x", 1.0)
    with pytest.raises(InputError, match="timestamp"):
        Message("console", "w", "c", "1", "a", "A", "x", "soon")  # type: ignore[arg-type]
    good = msg(1, "fine")
    too_big = msg(2, "x" * 1_000_001)
    with pytest.raises(InputError, match="limit"):
        store.ingest([good, too_big])
    assert store.count_messages() == 0  # the whole batch was refused, nothing half-stored


def test_failed_write_leaves_store_unchanged(store, monkeypatch):
    store.ingest([msg(1, "before")])

    def boom(*a, **k):
        raise RuntimeError("disk exploded")

    monkeypatch.setattr(store, "_append", boom)
    with pytest.raises(RuntimeError):
        store.ingest([msg(2, "after")])
    assert store.count_messages() == 1
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM scope_state").fetchone()[0] == 1


def test_stdlib_sqlite_cannot_load_extensions_but_store_does(tmp_path):
    # Why pysqlite3 is needed here: the interpreter's sqlite3 may lack extension loading.
    s = Store(tmp_path / "x.db")
    assert s.conn.execute("select vec_version()").fetchone()[0].startswith("v")
    s.close()
    assert std_sqlite3 is not None


def test_vector_mirror_picks_up_backlog_without_reloading(vstore):
    from memory.search import Searcher

    vstore.ingest([msg(1, "we should repaint the garage blue")])
    s = Searcher(vstore)
    sid = vstore.scopes()[0].id
    assert s.search([sid], "paint colour for the garage", mode="dense")[0].message.msg_id == "1"
    vstore.ingest([msg(2, "my parrot learned to whistle a tune")], embed=False)
    with vstore.read() as conn:
        gen_before = conn.execute("SELECT vec_gen FROM scope_state").fetchone()[0]
    vstore.embed_pending()
    with vstore.read() as conn:
        assert conn.execute("SELECT vec_gen FROM scope_state").fetchone()[0] == gen_before  # no full reload
    assert s.search([sid], "a bird that sings", mode="dense")[0].message.msg_id == "2"
    mirror = s.vectors._mirrors[sid]
    assert sorted(mirror.ids.tolist()) == [1, 2]
