"""One FTS5 index per scope (see memory/store/scopeindex.py): BM25 statistics, document counts and the
vocabulary a reply reads then come only from the scopes it may see.

Moves every live message's and active record's index row out of the shared ``messages_fts`` /
``records_fts`` tables into ``messages_fts_s<id>`` / ``records_fts_s<id>`` (plus an fts5vocab view of
each), then drops the shared tables and ``messages_fts_vocab``. The DDL is written out here, not
imported, so this released migration never changes with the code.
"""

TOKENIZE = "porter unicode61 remove_diacritics 2"


def _create(conn, prefix: str, columns: str, sid: int) -> str:
    table = f"{prefix}_fts_s{sid}"
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5 ({columns}, content = '', contentless_delete = 1, "
                 f"tokenize = '{TOKENIZE}')")
    conn.execute(f"CREATE VIRTUAL TABLE {prefix}_vocab_s{sid} USING fts5vocab({table}, 'row')")
    return table


def upgrade(conn) -> None:
    for (sid,) in conn.execute("SELECT DISTINCT scope_id FROM messages WHERE deleted = 0 AND bot_traffic = 0 "
                               "ORDER BY scope_id").fetchall():
        table = _create(conn, "messages", "text, author_name", int(sid))
        conn.execute(f"INSERT INTO {table} (rowid, text, author_name) SELECT id, text, author_name FROM messages "
                     "WHERE scope_id = ? AND deleted = 0 AND bot_traffic = 0 ORDER BY id", (sid,))
    for (sid,) in conn.execute("SELECT DISTINCT scope_id FROM records WHERE status = 'active' "
                               "ORDER BY scope_id").fetchall():
        table = _create(conn, "records", "content", int(sid))
        conn.execute(f"INSERT INTO {table} (rowid, content) SELECT id, content FROM records "
                     "WHERE scope_id = ? AND status = 'active' ORDER BY id", (sid,))
    conn.execute("DROP TABLE messages_fts_vocab")
    conn.execute("DROP TABLE messages_fts")
    conn.execute("DROP TABLE records_fts")
