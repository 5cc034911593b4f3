"""What ``chorus inspect`` tells Datasette: a description of every table and column, and canned queries.

The descriptions follow ``migrations/*.sql``; a test opens a freshly migrated store and
checks that every table and column it has is described here, so a new migration
cannot land without saying what it stores.
"""
from __future__ import annotations

import re
from typing import Any

DB_NAME = "chorus"

_TIME = "Unix time in seconds (UTC)."

# table -> (what the table is for, {column: what it holds})
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "scopes": ("One row per channel with memory (a Slack or Discord channel, a console channel, a DM). Memory "
               "never crosses scopes unless the operator links them in the config.", {
        "id": "Scope number used by every other table.",
        "platform": "console, discord or slack.",
        "workspace": "Slack team id, Discord guild id ('@me' for Discord DMs), or the console's workspace.",
        "channel": "Platform channel id (threads belong to their channel).",
        "name": "Channel name when it was first seen.",
        "is_dm": "1 for a direct-message conversation (its own scope).",
        "opted_out": "1 when an admin opted the channel out: nothing new is remembered there.",
        "created_at": "When the bot first saw the channel. " + _TIME,
    }),
    "messages": ("Track 1: every message verbatim, with speaker, time and position in the conversation.", {
        "id": "Store-wide message number; records point at it (record_sources).",
        "scope_id": "The channel it was said in (scopes.id).",
        "msg_id": "The platform's own message id (Slack ts, Discord snowflake).",
        "thread": "Thread id when said in a thread, else empty.",
        "author_id": "Platform user id of the speaker.",
        "author_name": "Display name of the speaker at the time.",
        "text": "The message as written (emptied when the author used forget-me).",
        "ts": "When it was said. " + _TIME,
        "reply_to": "Platform id of the message it answers, if any.",
        "session": "Conversation session number in this channel (a long idle gap starts a new one).",
        "turn": "Position of the message inside its session.",
        "edited_at": "When it was last edited on the platform, if ever. " + _TIME,
        "deleted": "1 when the message was deleted on the platform or forgotten.",
        "text_hash": "Hash of the text, to reuse embeddings of identical texts.",
        "embedded": "0 = waiting for its vector, 1 = in the vector index, 2 = never indexed (addressed to the bot).",
        "vec_seq": "Order in which its vector was written (lets the in-memory vector mirror load only new ones).",
        "bot_traffic": "1 for messages addressed to the bot (mentions, commands): kept, but never evidence or "
                       "writer input.",
        "analysed": "0 = waiting for the analysis pass, 1 = analysed (message_analysis), 2 = never (addressed to "
                    "the bot), 3 = the analysis failed on it (see the log; `chorus analyse --retry-failed`).",
    }),
    "message_analysis": ("What the analysis pass read in each message at ingest: its named entities, what it does "
                         "for the group, and the earlier message it changes, answers or confirms.", {
        "message_id": "The message (messages.id).",
        "scope_id": "Its channel (scopes.id).",
        "version": "The act and link models that wrote the row.",
        "entities": "JSON list of [text, label] pairs from spaCy's named-entity recogniser (DATE, TIME, MONEY, GPE, "
                    "PERSON, ...).",
        "has_reason": "1 when the message gives a reason (a because/since/due to clause).",
        "has_place": "1 when it names a place in a phrase (at the hall, by the river).",
        "chunks": "JSON list of the message's noun phrases (spaCy), which the act model reads.",
        "shape": "JSON list of marks on each sentence's main clause (verb tag, modal, subject); the act model "
                 "reads them.",
        "act": "What it does for the group: decision, plan, change, rule, task, question, news or chatter.",
        "act_score": "The act model's probability of that act.",
        "act_probs": "JSON list of the probability of each act, in the order above.",
        "owner": "Whom it binds: GROUP, the member who does a task, or the member a question is put to.",
        "topic": "A short phrase naming what it is about.",
        "link_kind": "changes, answers or confirms: how it points back at an earlier message.",
        "link_to": "The earlier message (messages.id).",
        "link_score": "The link model's probability of that link.",
        "analysed_at": "When the row was written. " + _TIME,
    }),
    "people": ("The roster of each channel: who has spoken there, under which names.", {
        "scope_id": "The channel (scopes.id).",
        "person_id": "The person's id in records (owner / source); usually the platform user id.",
        "display_name": "Latest display name.",
        "aliases": "JSON list of other names the person is known by.",
        "first_ts": "First message in this channel. " + _TIME,
        "last_ts": "Latest message in this channel. " + _TIME,
        "n_messages": "How many messages they have sent here.",
        "is_bot": "1 for bot accounts.",
    }),
    "scope_state": ("Per-channel counters used to number sessions and turns without scanning.", {
        "scope_id": "The channel (scopes.id).",
        "last_ts": "Time of the newest message. " + _TIME,
        "last_session": "Newest session number.",
        "last_turn": "Newest turn number in that session.",
        "vec_gen": "Bumped when a stored vector changes other than by appending (reloads the vector mirror).",
    }),
    "meta": ("Store-wide settings, such as which embedding model made the vectors.", {
        "key": "Setting name.", "value": "Setting value (text).",
    }),
    "_migrations": ("Schema migrations applied to this file, in order.", {
        "name": "Migration file name (NNNN_name).", "applied_at": "When it ran. " + _TIME,
    }),
    "records": ("Track 2: what the writer derived from the messages. Every record has an owner (whom it is "
                "about) and a source (who said it); revisions form chains and nothing is overwritten.", {
        "id": "Record number, shown to the model and in answers as E<id>.",
        "scope_id": "The channel whose messages it rests on (scopes.id).",
        "layer": "per_speaker_core (a self-report), per_speaker_profile (said about someone else), "
                 "group_interaction / group_insight (about the group), persona_insight (the bot's reading).",
        "utype": "fact, stance, observation, decision, relation or insight.",
        "owner": "Whom it is about: a person_id, GROUP, or PERSONA.",
        "source": "Who said it: the person_id of the supporting message's author.",
        "content": "The record's text (emptied when its source used forget-me).",
        "ts": "Time of the message it rests on. " + _TIME,
        "session": "Session of that message.",
        "turn": "Turn of that message.",
        "confidence": "Verifier's confidence, 0 to 1.",
        "status": "active, or retracted (its messages were deleted or forgotten).",
        "superseded_by": "The newer record that revised this one; empty for the current version (the head).",
        "prev_id": "The record this one revised, if it is a revision.",
        "chain_id": "First record of its update chain; all versions share it.",
        "writer_run_id": "The writer window that committed it (writer_runs.id).",
        "writer_model": "Model that proposed it.",
        "verification": "JSON: which checks it passed (grounding overlap, attribution).",
        "retracted_reason": "Why it was retracted.",
        "created_at": "When it was committed. " + _TIME,
    }),
    "record_sources": ("Provenance: the messages each record rests on.", {
        "record_id": "The record (records.id).", "message_id": "A message it rests on (messages.id).",
    }),
    "record_links": ("Links between records: old -> new revision ('update'), insight -> fact it rests on "
                     "('cites').", {
        "from_id": "The older record, or the insight.", "to_id": "The newer record, or the cited fact.",
        "kind": "update or cites.",
    }),
    "catchup_subscriptions": ("Who asked for a scheduled catch-up digest in which channel (/catchup subscribe).", {
        "scope_id": "The channel (scopes.id).",
        "person_id": "The member's platform id.",
        "display_name": "The member's name when they subscribed.",
        "created_at": "When they subscribed, Unix seconds (UTC).",
    }),
    "catchup_digests": ("One row per scheduled digest for one member of one channel: written as 'sending' before "
                        "the platform call and 'sent' after it, so a restart never loses or repeats one.", {
        "id": "Digest number (shown in the digest as 'digest #ID').",
        "scope_id": "The channel (scopes.id).",
        "person_id": "The member it is for.",
        "slot": "The scheduled run it belongs to (one digest per member and run).",
        "since_ts": "Start of the period it covers, Unix seconds (UTC).",
        "until_ts": "End of the period it covers, Unix seconds (UTC).",
        "status": "pending, sending, sent, skipped (nothing new), failed (will retry) or gave_up.",
        "attempts": "Delivery attempts so far.",
        "lines": "Lines the digest held.",
        "last_error": "Why the last attempt failed, if it did.",
        "created_at": "When the row was written, Unix seconds (UTC).",
        "updated_at": "When it last changed, Unix seconds (UTC).",
    }),
    "writer_runs": ("The writer's audit log: one row per window of messages it read, with what the model "
                    "proposed, what was accepted and what was rejected and why.", {
        "id": "Run number.",
        "scope_id": "The channel (scopes.id).",
        "kind": "window (a normal run) or retry (a quarantined window run again).",
        "first_message_id": "First message of the window (messages.id).",
        "last_message_id": "Last message of the window (messages.id).",
        "n_messages": "Messages in the window.",
        "model": "Model that proposed the actions.",
        "prompt_tokens": "Tokens the model read.",
        "completion_tokens": "Tokens the model wrote.",
        "gen_seconds": "Seconds spent generating.",
        "duration_s": "Seconds for the whole window (propose, verify, commit).",
        "raw_output": "The model's output as written.",
        "parsed": "1 when the output parsed as actions.",
        "accepted": "JSON list of committed records.",
        "rejected": "JSON list of rejected actions, each with the reason the verifier gave.",
        "status": "committed or failed.",
        "error": "Why the window failed, if it did.",
        "started_at": "When the window started. " + _TIME,
    }),
    "writer_state": ("The writer's cursor per channel: messages after the watermark are still waiting.", {
        "scope_id": "The channel (scopes.id).",
        "watermark": "Last message id the writer has finished with.",
        "failures": "Consecutive failed attempts on the current window.",
        "last_error": "Latest failure, if any.",
        "updated_at": "Last change. " + _TIME,
    }),
    "writer_quarantine": ("Windows that failed repeatedly and were set aside, so the writer could move on; "
                          "`chorus write --retry-quarantined ID` runs one again.", {
        "id": "Quarantine number.",
        "scope_id": "The channel (scopes.id).",
        "first_message_id": "First message of the window.",
        "last_message_id": "Last message of the window.",
        "failures": "How often it failed.",
        "last_error": "The last failure.",
        "created_at": "When it was set aside. " + _TIME,
        "released_at": "When a retry succeeded, if one did. " + _TIME,
    }),
    "user_optouts": ("Users who opted out in a workspace: none of their messages are remembered.", {
        "platform": "console, discord or slack.", "workspace": "Workspace id.", "user_id": "Platform user id.",
        "created_at": "When they opted out. " + _TIME,
    }),
    "workspace_state": ("Workspaces an admin paused (nothing new is remembered until resumed).", {
        "platform": "console, discord or slack.", "workspace": "Workspace id.", "paused": "1 while paused.",
        "updated_at": "Last change. " + _TIME,
    }),
    "backfill_cursors": ("History import progress per channel and thread, so an interrupted backfill resumes.", {
        "scope_id": "The channel (scopes.id).",
        "stream": "Empty for the channel itself, else a thread id.",
        "oldest_id": "Oldest platform message id imported.",
        "newest_id": "Newest platform message id imported.",
        "fetched": "Messages fetched so far.",
        "done": "1 when the history has been read to the end.",
        "updated_at": "Last change. " + _TIME,
    }),
    "processed_events": ("Platform event ids already handled (Slack re-delivers events it thinks were missed).", {
        "platform": "console, discord or slack.", "event_id": "The platform's event id.",
        "created_at": "When it was handled. " + _TIME,
    }),
    "messages_fts_s<id>": ("Full-text (BM25) index of one channel's message text (its id ends the name); "
                           "contentless, so it shows no text itself. One per channel, so a search and its "
                           "statistics read only the channels it may see.", {
        "text": "Indexed message text.", "author_name": "Indexed speaker name.",
    }),
    "records_fts_s<id>": ("Full-text index of one channel's record content; contentless.", {
        "content": "Indexed record text.",
    }),
    "message_vec": ("sqlite-vec index of message embeddings, partitioned by channel.", {
        "rowid": "The message (messages.id).", "scope_id": "Partition: the channel.",
        "embedding": "The message's vector (float32).",
    }),
    "record_vec": ("sqlite-vec index of record embeddings, partitioned by channel.", {
        "rowid": "The record (records.id).", "scope_id": "Partition: the channel.",
        "embedding": "The record's vector (float32).",
    }),
    "messages_vocab_s<id>": ("Per-term document counts of one channel's message index (search leaves out very "
                             "common terms; replies weigh rare words).", {
        "term": "A stemmed term.", "doc": "Messages of the channel containing it.",
        "cnt": "Occurrences in the channel's messages.",
    }),
}

# Index internals nobody needs to browse (shadow tables of FTS5 and sqlite-vec).
HIDDEN_SUFFIXES = ("_chunks", "_rowids", "_info", "_vector_chunks00", "_data", "_idx", "_docsize", "_config")

_SCOPE = "s.platform || ':' || s.workspace || ':' || s.channel"
_STATE = ("CASE WHEN r.status = 'retracted' THEN 'retracted: ' || coalesce(r.retracted_reason, '') "
          "WHEN r.superseded_by IS NOT NULL THEN 'superseded by E' || r.superseded_by ELSE 'current' END")
# The messages a record rests on, as JSON for the source_messages cell renderer.
_SOURCES = ("(SELECT json_group_array(json_object('id', m.id, 'author', m.author_name, "
            "'at', datetime(m.ts, 'unixepoch'), 'text', m.text, 'deleted', m.deleted) ORDER BY m.id) "
            "FROM record_sources rs JOIN messages m ON m.id = rs.message_id WHERE rs.record_id = r.id)")
_RECORD_JOINS = ("FROM records r JOIN scopes s ON s.id = r.scope_id "
                 "LEFT JOIN people po ON po.scope_id = r.scope_id AND po.person_id = r.owner "
                 "LEFT JOIN people ps ON ps.scope_id = r.scope_id AND ps.person_id = r.source ")
_SCOPE_FILTER = "(:scope = '' OR " + _SCOPE + " = :scope OR s.channel = :scope OR s.name = :scope)"
_IS_OWNER = "(lower(r.owner) = lower(:person) OR lower(po.display_name) = lower(:person))"
_IS_SOURCE = "(lower(r.source) = lower(:person) OR lower(ps.display_name) = lower(:person))"
# Why a record is on a person's page: about them in their own words, about them in someone else's, a group
# record they voiced, or their words about someone else (the owner column names whom).
_WHY = ("CASE WHEN " + _IS_OWNER + " AND " + _IS_SOURCE + " THEN 'about them' "
        "WHEN " + _IS_OWNER + " THEN 'about them, said by ' || coalesce(ps.display_name, r.source) "
        "WHEN r.owner = 'GROUP' THEN 'voiced by them' "
        "ELSE 'said by them about ' || coalesce(po.display_name, r.owner) END")
_WHY_RANK = ("CASE WHEN " + _IS_OWNER + " AND " + _IS_SOURCE + " THEN 0 WHEN " + _IS_OWNER + " THEN 1 "
             "WHEN r.owner = 'GROUP' THEN 2 ELSE 3 END")

QUERIES: dict[str, dict[str, str]] = {
    "person": {
        "title": "What the bot remembers about a person",
        "description": "Records about a person (owner), what they said about others, and group records they "
                       "voiced (source), current versions first, each beside the messages it rests on; then their "
                       "messages the writer has not read yet (before the writer runs, that is all there is). "
                       "Person: a display name or id. Scope: empty for every channel, or "
                       "platform:workspace:channel, a channel id or name.",
        "sql": ("SELECT record, state, why, content, source_messages, layer, utype, owner, source, said_at, scope "
                "FROM (SELECT r.id AS record, " + _STATE + " AS state, " + _WHY + " AS why, r.content, "
                + _SOURCES + " AS source_messages, r.layer, r.utype, coalesce(po.display_name, r.owner) AS owner, "
                "coalesce(ps.display_name, r.source) AS source, datetime(r.ts, 'unixepoch') AS said_at, "
                + _SCOPE + " AS scope, (r.status = 'active' AND r.superseded_by IS NULL) AS is_current, "
                + _WHY_RANK + " AS why_rank, r.ts AS ts, r.id AS n "
                + _RECORD_JOINS +
                "WHERE " + _SCOPE_FILTER + " AND (" + _IS_OWNER + " OR " + _IS_SOURCE + ") "
                "UNION ALL "
                "SELECT NULL, 'not yet read by the writer', 'their message', m.text, "
                "json_array(json_object('id', m.id, 'author', m.author_name, 'at', datetime(m.ts, 'unixepoch'), "
                "'text', m.text, 'deleted', m.deleted)), NULL, NULL, NULL, m.author_name, "
                "datetime(m.ts, 'unixepoch'), " + _SCOPE + ", 0, 9, m.ts, m.id "
                "FROM messages m JOIN scopes s ON s.id = m.scope_id "
                "LEFT JOIN writer_state ws ON ws.scope_id = m.scope_id "
                "LEFT JOIN people pm ON pm.scope_id = m.scope_id AND pm.person_id = m.author_id "
                "WHERE " + _SCOPE_FILTER + " AND m.deleted = 0 AND m.bot_traffic = 0 "
                "AND m.id > coalesce(ws.watermark, 0) AND (lower(m.author_id) = lower(:person) "
                "OR lower(pm.display_name) = lower(:person))) "
                "ORDER BY is_current DESC, why_rank, layer, ts, n LIMIT 1000"),
    },
    "record_chain": {
        "title": "A record's update chain",
        "description": "Every version of a record, oldest first: what it said, what replaced it, and the messages "
                       "each version rests on. Record: E12 or 12 (any version of the chain).",
        "sql": ("SELECT row_number() OVER (ORDER BY r.id) AS version, r.id AS record, " + _STATE + " AS state, "
                "r.content, " + _SOURCES + " AS source_messages, datetime(r.ts, 'unixepoch') AS said_at, "
                "coalesce(po.display_name, r.owner) AS owner, coalesce(ps.display_name, r.source) AS source, "
                "r.layer, r.writer_run_id AS writer_run " + _RECORD_JOINS +
                "WHERE r.chain_id = (SELECT chain_id FROM records WHERE id = "
                "CAST(ltrim(upper(trim(:record)), 'E') AS INTEGER)) ORDER BY r.id"),
    },
    "topic_timeline": {
        "title": "A topic's timeline",
        "description": "Records whose text mentions a word or phrase, in the order things were said, with their "
                       "state and chain (old versions included). Scope as in 'person'.",
        "sql": ("SELECT datetime(r.ts, 'unixepoch') AS said_at, r.id AS record, r.chain_id AS chain, "
                + _STATE + " AS state, r.content, " + _SOURCES + " AS source_messages, "
                "coalesce(po.display_name, r.owner) AS owner, r.layer " + _RECORD_JOINS +
                "WHERE " + _SCOPE_FILTER + " AND r.content LIKE '%' || :topic || '%' ORDER BY r.ts, r.id"),
    },
    "writer_rejections": {
        "title": "What the writer rejected, and why",
        "description": "One row per rejected action of each writer window, newest window first, with the "
                       "verifier's reason and the window's messages. Run: a writer_runs id, or empty for all. "
                       "Scope as in 'person'.",
        "sql": ("SELECT w.id AS writer_run, " + _SCOPE + " AS scope, datetime(w.started_at, 'unixepoch') AS "
                "started, w.model, json_extract(j.value, '$.reason') AS reason, "
                "json_extract(j.value, '$.action') AS action, json_object('scope_id', w.scope_id, 'first', "
                "w.first_message_id, 'last', w.last_message_id) AS window_messages "
                "FROM writer_runs w JOIN scopes s ON s.id = w.scope_id, json_each(w.rejected) j "
                "WHERE " + _SCOPE_FILTER + " AND (:run = '' OR w.id = CAST(:run AS INTEGER)) "
                "ORDER BY w.id DESC, j.key LIMIT 1000"),
    },
    "waiting_for_writer": {
        "title": "Messages waiting for the writer",
        "description": "Messages after each channel's writer watermark (not yet read by the writer), oldest first, "
                       "and windows set aside in quarantine. Scope as in 'person'.",
        "sql": ("SELECT m.id AS message, " + _SCOPE + " AS scope, datetime(m.ts, 'unixepoch') AS said_at, "
                "m.author_name AS author, m.text, CASE WHEN m.bot_traffic = 1 THEN 'addressed to the bot (skipped)' "
                "WHEN EXISTS (SELECT 1 FROM writer_quarantine q WHERE q.scope_id = m.scope_id AND q.released_at "
                "IS NULL AND m.id BETWEEN q.first_message_id AND q.last_message_id) THEN 'quarantined window' "
                "ELSE 'waiting' END AS state FROM messages m JOIN scopes s ON s.id = m.scope_id "
                "LEFT JOIN writer_state ws ON ws.scope_id = m.scope_id "
                "WHERE " + _SCOPE_FILTER + " AND m.deleted = 0 AND (m.id > coalesce(ws.watermark, 0) OR EXISTS "
                "(SELECT 1 FROM writer_quarantine q WHERE q.scope_id = m.scope_id AND q.released_at IS NULL AND "
                "m.id BETWEEN q.first_message_id AND q.last_message_id)) ORDER BY m.id LIMIT 1000"),
    },
    "channel_status": {
        "title": "Per-channel status",
        "description": "Each channel: messages, people, current and total records, writer watermark and backlog, "
                       "the latest writer window, failures and quarantined windows.",
        "sql": ("SELECT s.id AS scope_id, " + _SCOPE + " AS scope, s.name, s.is_dm, s.opted_out, "
                "(SELECT count(*) FROM messages m WHERE m.scope_id = s.id AND m.deleted = 0) AS messages, "
                "(SELECT count(*) FROM people p WHERE p.scope_id = s.id) AS people, "
                "(SELECT count(*) FROM records r WHERE r.scope_id = s.id AND r.status = 'active' AND "
                "r.superseded_by IS NULL) AS current_records, "
                "(SELECT count(*) FROM records r WHERE r.scope_id = s.id) AS all_records, "
                "coalesce(ws.watermark, 0) AS watermark, "
                "(SELECT count(*) FROM messages m WHERE m.scope_id = s.id AND m.deleted = 0 AND "
                "m.id > coalesce(ws.watermark, 0)) AS waiting, "
                "(SELECT datetime(max(w.started_at), 'unixepoch') FROM writer_runs w WHERE w.scope_id = s.id) "
                "AS last_window, "
                "(SELECT w.status FROM writer_runs w WHERE w.scope_id = s.id ORDER BY w.id DESC LIMIT 1) "
                "AS last_window_status, coalesce(ws.failures, 0) AS failures, ws.last_error, "
                "(SELECT count(*) FROM writer_quarantine q WHERE q.scope_id = s.id AND q.released_at IS NULL) "
                "AS quarantined FROM scopes s LEFT JOIN writer_state ws ON ws.scope_id = s.id ORDER BY s.id"),
    },
}

NOTICE = ("This is the operator's read-only view of their own Chorus memory file. Every channel is its own "
          "scope: the bot never answers one channel from another's memory, but this view shows them all.")


_PER_SCOPE = re.compile(r"^(messages_fts|records_fts|messages_vocab|records_vocab)_s\d+$")


def describe(name: str) -> tuple[str, dict[str, str]] | None:
    """A table's description, per-channel index tables (``messages_fts_s12``) included."""
    if name in TABLES:
        return TABLES[name]
    match = _PER_SCOPE.match(name)
    if match and match.group(1) == "records_vocab":
        return ("Per-term document counts of one channel's record index.", TABLES["messages_vocab_s<id>"][1])
    return TABLES.get(f"{match.group(1)}_s<id>") if match else None


def build_metadata(path_label: str, tables_present: set[str]) -> dict[str, Any]:
    """Datasette metadata for the store at ``path_label`` holding ``tables_present``."""
    tables: dict[str, Any] = {}
    for name in sorted(tables_present):
        entry = describe(name)
        if entry is not None:
            text, columns = entry
            tables[name] = {"description": text, "columns": columns}
        elif name.endswith(HIDDEN_SUFFIXES) or name.startswith("sqlite_"):
            tables[name] = {"hidden": True}
    return {
        "title": "Chorus memory inspector",
        "description": f"{NOTICE} File: {path_label}. Nothing can be changed from here.",
        "databases": {DB_NAME: {
            "description": "What the bot remembers (records), from which messages, how it changed, and what its "
                           "writer rejected. Start with the canned queries below.",
            "tables": tables,
            "queries": {name: {**q, "hide_sql": True} for name, q in QUERIES.items()},
        }},
    }
