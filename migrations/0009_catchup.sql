-- Catch-up digests: who asked for a scheduled digest in which channel, and every scheduled digest's fate.
CREATE TABLE catchup_subscriptions (
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    person_id TEXT NOT NULL,
    display_name TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    PRIMARY KEY (scope_id, person_id)
);

-- One row per (channel, member, scheduled run). 'sending' is written before the platform call and 'sent'
-- after it, so a restart finds a digest whose send may have happened and checks before sending again.
CREATE TABLE catchup_digests (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    person_id TEXT NOT NULL,
    slot TEXT NOT NULL,
    since_ts REAL NOT NULL,
    until_ts REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'skipped', 'failed', 'gave_up')),
    attempts INTEGER NOT NULL DEFAULT 0,
    lines INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (scope_id, person_id, slot)
);
CREATE INDEX catchup_digests_open ON catchup_digests (status) WHERE status IN ('pending', 'sending', 'failed');
CREATE INDEX catchup_digests_member ON catchup_digests (scope_id, person_id, until_ts);
