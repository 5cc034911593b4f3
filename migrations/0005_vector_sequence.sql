-- Order in which vectors were written, so the in-memory vector mirror can load new vectors
-- (fresh messages and the embedding backlog alike) incrementally instead of reloading the scope.
ALTER TABLE messages ADD COLUMN vec_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_scope_vec_seq ON messages (scope_id, vec_seq) WHERE embedded = 1;
INSERT OR IGNORE INTO meta (key, value) VALUES ('vec_seq', '0');
