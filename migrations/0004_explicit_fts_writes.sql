-- Message FTS rows are now written by the store itself, in bulk, in the same transaction
-- as the message (one write path); row-by-row triggers cost most of the bulk import time.
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_update;
DROP TRIGGER messages_fts_delete;
