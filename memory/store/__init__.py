"""Track 1: the one write path into the SQLite store.

Adapters, imports and scheduled jobs all write through ``Store``. Every write runs
in one ``BEGIN IMMEDIATE`` transaction under one lock, so a failed step leaves the
file as it was. Messages are stored whole; their FTS5 row (and the vector, when the
embedder runs inline) is written by the store in the same transaction. Messages
addressed to the bot are stored but never indexed.

``Store`` is composed of one class per concept, each in its own module:

- ``base``: the connection, ``write``/``read``, meta, the vector table (``StoreBase``);
- ``scopes``: scope ids by key and the scope list;
- ``analysis``: each message's stored analysis (entities, act, link) and the analysis backlog;
- ``backlog``: what gets embedded, vector reuse, the embedding backlog;
- ``ingest``: appending messages (sessions, turns, FTS5 rows, roster counts);
- ``reads`` and ``edits``: reading messages back, editing and deleting them;
- ``roster``: who has spoken in a scope;
- ``scopeindex``: one FTS5 table per scope, and the text statistics read over a list of scopes;
- ``platform_state``: handled platform event ids and history-import cursors;
- ``rows``: the dataclasses the store returns, mapped from rows by column name.
"""
from __future__ import annotations

from .analysis import AnalysisRows
from .backlog import EmbeddingBacklog, embed_text, text_hash
from .base import DEFAULT_IDLE_GAP_S, StoreBase, explain_db_error
from .edits import Edits
from .ingest import MAX_TEXT_CHARS, Ingest
from .platform_state import Cursor, PlatformState
from .reads import Reads
from .roster import Roster
from .rows import MESSAGE_COLUMNS, IngestResult, Person, Scope, select_messages
from .scopeindex import ScopeStats, TermStats
from .scopes import Scopes


class Store(Ingest, Edits, Roster, ScopeStats, PlatformState, AnalysisRows):
    """The Chorus store: one SQLite file in WAL mode, written through one lock."""


__all__ = [
    "DEFAULT_IDLE_GAP_S", "MAX_TEXT_CHARS", "MESSAGE_COLUMNS", "AnalysisRows", "Cursor", "Edits",
    "EmbeddingBacklog", "Ingest",
    "IngestResult", "Person", "PlatformState", "Reads", "Roster", "Scope", "ScopeStats", "Scopes", "Store",
    "StoreBase", "TermStats",
    "embed_text", "explain_db_error", "select_messages", "text_hash",
]
