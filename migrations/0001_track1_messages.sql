-- Track 1: scopes, verbatim messages, roster, full-text index.
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE scopes (
    id INTEGER PRIMARY KEY,
    platform TEXT NOT NULL,
    workspace TEXT NOT NULL,
    channel TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    is_dm INTEGER NOT NULL DEFAULT 0,
    opted_out INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    UNIQUE (platform, workspace, channel)
);

CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    msg_id TEXT NOT NULL,
    thread TEXT NOT NULL DEFAULT '',
    author_id TEXT NOT NULL,
    author_name TEXT NOT NULL,
    text TEXT NOT NULL,
    ts REAL NOT NULL,
    reply_to TEXT,
    session INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    edited_at REAL,
    deleted INTEGER NOT NULL DEFAULT 0,
    text_hash TEXT NOT NULL,
    embedded INTEGER NOT NULL DEFAULT 0,
    UNIQUE (scope_id, msg_id)
);
CREATE INDEX messages_scope_ts ON messages (scope_id, ts);
CREATE INDEX messages_scope_session_turn ON messages (scope_id, session, turn);
CREATE INDEX messages_author ON messages (author_id);
CREATE INDEX messages_hash ON messages (text_hash) WHERE embedded = 1;
CREATE INDEX messages_scope_embedded ON messages (scope_id, id) WHERE embedded = 1;
CREATE INDEX messages_unembedded ON messages (id) WHERE embedded = 0 AND deleted = 0;

-- Per-scope cursor used to number sessions and turns without scanning.
CREATE TABLE scope_state (
    scope_id INTEGER PRIMARY KEY REFERENCES scopes(id),
    last_ts REAL NOT NULL,
    last_session INTEGER NOT NULL,
    last_turn INTEGER NOT NULL,
    -- Bumped whenever a stored vector of this scope changes other than by appending.
    vec_gen INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE people (
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    person_id TEXT NOT NULL,
    display_name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    first_ts REAL NOT NULL,
    last_ts REAL NOT NULL,
    n_messages INTEGER NOT NULL DEFAULT 0,
    is_bot INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_id, person_id)
);

-- Contentless FTS5 index; scope_tag ('s<scope id>') keeps every query inside its scope in the index itself.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    text, author_name, scope_tag,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.deleted = 0 BEGIN
    INSERT INTO messages_fts (rowid, text, author_name, scope_tag)
    VALUES (new.id, new.text, new.author_name, 's' || new.scope_id);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, author_name, deleted ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    INSERT INTO messages_fts (rowid, text, author_name, scope_tag)
    SELECT new.id, new.text, new.author_name, 's' || new.scope_id WHERE new.deleted = 0;
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
END;
