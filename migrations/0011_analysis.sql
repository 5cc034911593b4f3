-- The analysis pass (issue 29): what each message does for the group, stored with it at ingest.
-- A background backlog fills it (analysed = 0 waits; 1 done; 2 never: bot traffic; 3 the pass failed on it,
-- logged), like the vectors.
ALTER TABLE messages ADD COLUMN analysed INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET analysed = 2 WHERE bot_traffic = 1;
CREATE INDEX messages_unanalysed ON messages (scope_id, id) WHERE analysed = 0 AND deleted = 0;

CREATE TABLE message_analysis (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id),
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    version TEXT NOT NULL,           -- the models that wrote the row
    entities TEXT NOT NULL,          -- spaCy's named entities, JSON [[text, label], ...]
    has_reason INTEGER NOT NULL,
    has_place INTEGER NOT NULL,
    chunks TEXT NOT NULL DEFAULT '[]',  -- noun phrases, JSON (what a topic is named from)
    shape TEXT NOT NULL DEFAULT '[]',   -- marks of each sentence's main clause, JSON (read by the act model)
    act TEXT NOT NULL,               -- decision, plan, change, rule, task, question, news or chatter
    act_score REAL NOT NULL,
    act_probs TEXT NOT NULL,         -- JSON, one probability per act kind
    owner TEXT,                      -- GROUP, the member a task or a question binds, or NULL
    topic TEXT NOT NULL DEFAULT '',
    link_kind TEXT,                  -- changes, answers or confirms
    link_to INTEGER REFERENCES messages(id),
    link_score REAL,
    analysed_at REAL NOT NULL
);
CREATE INDEX message_analysis_acts ON message_analysis (scope_id, act, message_id);
CREATE INDEX message_analysis_links ON message_analysis (link_to) WHERE link_to IS NOT NULL;
