"""The analysis pass: each message's entities, act, topic and link to an earlier act, stored at ingest."""
