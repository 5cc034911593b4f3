"""Datasette hooks for ``chorus inspect``: read-only connections and cells that link records to messages.

Registered once into Datasette's plugin manager by ``bot.inspect``; every hook acts
only on the Chorus database, so other Datasette use in the same process is untouched.
Every value that reaches HTML goes through ``markupsafe.escape``: message text is
whatever chat members wrote, and this page must not run it.
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from datasette import hookimpl
from markupsafe import Markup, escape

from .inspect_metadata import DB_NAME

# Canned-query columns whose cells become links (column -> (path under the database, query parameter)).
_RECORD_LINKS = {"record": "record_chain", "chain": "record_chain"}
_ROW_LINKS = {"message": "messages", "writer_run": "writer_runs"}


@hookimpl
def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
    """Connections are opened read-only (mode=ro); query_only refuses writes on any connection as well."""
    if database == DB_NAME:
        conn.execute("PRAGMA query_only = 1")


def _db_path(datasette: Any, tail: str) -> str:
    return datasette.urls.database(DB_NAME) + "/" + tail


def _sources_html(datasette: Any, value: str) -> Markup:
    """The messages a record rests on, quoted with author, time and a link to each message row."""
    try:
        sources = json.loads(value)
    except (TypeError, ValueError):
        return Markup(escape(value))
    items = []
    for m in sources if isinstance(sources, list) else []:
        if not isinstance(m, dict):
            continue
        href = _db_path(datasette, f"messages/{int(m.get('id') or 0)}")
        text = "(deleted)" if m.get("deleted") else m.get("text", "")
        items.append(Markup('<li><a href="{}">#{}</a> <strong>{}</strong> <span class="chorus-at">{}</span>'
                            '<blockquote>{}</blockquote></li>').format(
            href, m.get("id"), m.get("author", ""), m.get("at", ""), text))
    if not items:
        return Markup('<em>no source messages</em>')
    return Markup('<ul class="chorus-sources">') + Markup("").join(items) + Markup("</ul>")


def _window_html(datasette: Any, value: str) -> Markup | None:
    try:
        w = json.loads(value)
        scope, first, last = int(w["scope_id"]), int(w["first"]), int(w["last"])
    except (TypeError, ValueError, KeyError):
        return None
    query = urlencode({"scope_id": scope, "id__gte": first, "id__lte": last, "_sort": "id"})
    return Markup('<a href="{}">messages {}&ndash;{}</a>').format(_db_path(datasette, f"messages?{query}"), first,
                                                                  last)


@hookimpl
def render_cell(row: Any, value: Any, column: str, table: str | None, database: str, datasette: Any) -> Any:
    """Links and quoted sources in the canned queries' result columns (None: Datasette's own rendering)."""
    if database != DB_NAME or value is None:
        return None
    if column == "source_messages" and table is None:
        return _sources_html(datasette, value)
    if column == "window_messages" and table is None:
        return _window_html(datasette, value)
    if table is None and column in _RECORD_LINKS and isinstance(value, int):
        href = _db_path(datasette, _RECORD_LINKS[column] + "?" + urlencode({"record": value}))
        return Markup('<a href="{}">E{}</a>').format(href, value)
    if table is None and column in _ROW_LINKS and isinstance(value, int):
        return Markup('<a href="{}">{}</a>').format(_db_path(datasette, f"{_ROW_LINKS[column]}/{value}"), value)
    return None

