-- chorus: rebuilds a referenced table
-- Group acts (issue 24): GROUP records of utype plan, norm and task beside decision. SQLite cannot change a
-- CHECK constraint in place, so the records table is rebuilt with the same columns, ids and indexes.
CREATE TABLE records_new (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    layer TEXT NOT NULL CHECK (layer IN ('per_speaker_core', 'per_speaker_profile', 'group_interaction',
                                         'group_insight', 'persona_insight')),
    utype TEXT NOT NULL CHECK (utype IN ('fact', 'stance', 'observation', 'decision', 'relation', 'insight',
                                         'plan', 'norm', 'task')),
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
INSERT INTO records_new SELECT id, scope_id, layer, utype, owner, source, content, ts, session, turn, confidence,
    status, superseded_by, prev_id, chain_id, writer_run_id, writer_model, verification, retracted_reason, created_at
    FROM records;
DROP TABLE records;
ALTER TABLE records_new RENAME TO records;
CREATE INDEX records_heads ON records (scope_id, owner, layer) WHERE superseded_by IS NULL AND status = 'active';
CREATE INDEX records_chain ON records (chain_id, id);
CREATE INDEX records_source ON records (scope_id, source);
