-- Messages addressed to the bot (mentions, commands) stay in Track 1 for the record, but are never
-- search results, evidence or writer input: they get no FTS5 row and no vector (embedded = 2).
ALTER TABLE messages ADD COLUMN bot_traffic INTEGER NOT NULL DEFAULT 0;
