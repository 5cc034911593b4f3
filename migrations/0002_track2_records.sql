-- Track 2: derived records with provenance and update chains, the writer's audit log and cursors.
CREATE TABLE writer_runs (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    kind TEXT NOT NULL DEFAULT 'window',
    first_message_id INTEGER,
    last_message_id INTEGER,
    n_messages INTEGER NOT NULL DEFAULT 0,
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    gen_seconds REAL NOT NULL DEFAULT 0,
    duration_s REAL NOT NULL DEFAULT 0,
    raw_output TEXT NOT NULL DEFAULT '',
    parsed INTEGER NOT NULL DEFAULT 0,
    accepted TEXT NOT NULL DEFAULT '[]',
    rejected TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL CHECK (status IN ('committed', 'failed')),
    error TEXT,
    started_at REAL NOT NULL
);
CREATE INDEX writer_runs_scope ON writer_runs (scope_id, id);

CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    layer TEXT NOT NULL CHECK (layer IN ('per_speaker_core', 'per_speaker_profile', 'group_interaction',
                                         'group_insight', 'persona_insight')),
    utype TEXT NOT NULL CHECK (utype IN ('fact', 'stance', 'observation', 'decision', 'relation', 'insight')),
    owner TEXT NOT NULL,
    source TEXT NOT NULL,
    content TEXT NOT NULL,
    ts REAL NOT NULL,
    session INTEGER,
    turn INTEGER,
    confidence REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retracted')),
    superseded_by INTEGER REFERENCES records(id),
    prev_id INTEGER REFERENCES records(id),
    chain_id INTEGER NOT NULL,
    writer_run_id INTEGER REFERENCES writer_runs(id),
    writer_model TEXT NOT NULL,
    verification TEXT NOT NULL,
    retracted_reason TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX records_heads ON records (scope_id, owner, layer) WHERE superseded_by IS NULL AND status = 'active';
CREATE INDEX records_chain ON records (chain_id, id);
CREATE INDEX records_source ON records (scope_id, source);

CREATE TABLE record_sources (
    record_id INTEGER NOT NULL REFERENCES records(id),
    message_id INTEGER NOT NULL REFERENCES messages(id),
    PRIMARY KEY (record_id, message_id)
);
CREATE INDEX record_sources_message ON record_sources (message_id);

-- Insight -> fact it rests on ('cites'), and old -> new revision ('update').
CREATE TABLE record_links (
    from_id INTEGER NOT NULL REFERENCES records(id),
    to_id INTEGER NOT NULL REFERENCES records(id),
    kind TEXT NOT NULL CHECK (kind IN ('cites', 'update')),
    PRIMARY KEY (from_id, to_id, kind)
);
CREATE INDEX record_links_to ON record_links (to_id);

CREATE VIRTUAL TABLE records_fts USING fts5 (
    content, scope_tag,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- The writer's cursor per scope: the last message id it has finished with.
CREATE TABLE writer_state (
    scope_id INTEGER PRIMARY KEY REFERENCES scopes(id),
    watermark INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at REAL NOT NULL
);

CREATE TABLE writer_quarantine (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    first_message_id INTEGER NOT NULL,
    last_message_id INTEGER NOT NULL,
    failures INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    created_at REAL NOT NULL,
    released_at REAL
);
