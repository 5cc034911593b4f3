-- Per-term document counts of the message index, so search can leave out terms so common that
-- scoring every message containing them costs time without changing the ranking.
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, 'row');
