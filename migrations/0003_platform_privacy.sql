-- Platform adapters and privacy: user opt-outs, workspace pause, backfill cursors, event dedupe.
-- Channel opt-in/out is the existing scopes.opted_out column (set when a channel is first seen,
-- from [scopes].default_opt_in, and changed by admins).

-- A user who opted out: none of their messages in this workspace are remembered.
CREATE TABLE user_optouts (
    platform TEXT NOT NULL,
    workspace TEXT NOT NULL,
    user_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (platform, workspace, user_id)
);

-- An admin paused memory for a whole workspace (nothing new is remembered until resumed).
CREATE TABLE workspace_state (
    platform TEXT NOT NULL,
    workspace TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (platform, workspace)
);

-- History import progress per scope and stream ('' = the channel itself, else a thread id),
-- so an interrupted backfill resumes where it stopped.
CREATE TABLE backfill_cursors (
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    stream TEXT NOT NULL DEFAULT '',
    oldest_id TEXT,
    newest_id TEXT,
    fetched INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope_id, stream)
);

-- Platform event ids already handled (Slack re-delivers events it thinks were missed).
CREATE TABLE processed_events (
    platform TEXT NOT NULL,
    event_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (platform, event_id)
);
CREATE INDEX processed_events_created ON processed_events (created_at);
