"""``chorus inspect``: the store in Datasette, read-only, on 127.0.0.1 by default.

Why Datasette: everything the bot knows is in one SQLite file, and Datasette already
browses, filters, facets and queries such a file safely. We add what only Chorus knows:
what each table and column means, canned queries (a person's memory, a record's update
chain, a topic's timeline, writer rejections, the writer's backlog, per-channel status),
cells that put records beside the messages they rest on, and an optional operator token.

The file is checked first (missing, not SQLite, locked, made by a newer or older Chorus)
so a bad store is one clear line, not a server that fails on its first page.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from memory.errors import ChorusError, StoreError

from .inspect_metadata import DB_NAME, build_metadata

TEMPLATES = Path(__file__).with_name("inspect_templates")
COOKIE = "chorus_inspect"
LOCK_TIMEOUT_S = 2.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def check_store(path: Path, *, timeout_s: float = LOCK_TIMEOUT_S) -> set[str]:
    """Open the file read-only and return its table names, or raise one clear ``StoreError``."""
    from memory import migrate
    from memory.db import sqlite3

    if not path.exists():
        raise StoreError(f"no store at {path} (start the bot or run `chorus ingest` to create one)")
    if not path.is_file():
        raise StoreError(f"{path} is not a file")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {path} read-only: {exc}") from exc
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if "_migrations" not in names:
            raise StoreError(f"{path} is an SQLite file but not a Chorus store (it has no _migrations table)")
        done = {r[0] for r in conn.execute("SELECT name FROM _migrations")}
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreError(f"the store {path} is locked by another process ({exc}); "
                             "try again when it lets go") from exc
        raise StoreError(f"cannot read the store {path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a readable SQLite store ({exc}); it may be corrupt") from exc
    finally:
        conn.close()
    unknown, pending = migrate.newer_and_pending(done)
    if unknown:
        raise migrate.newer_store_error(unknown)
    if pending:
        raise StoreError(f"the store {path} lacks migrations {[m.key for m in pending]}; run `chorus migrate` "
                         "first (the inspector never writes)")
    return names


class TokenGate:
    """ASGI wrapper: every request needs the operator token (``?token=``, then a cookie, or a Bearer header)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], token: str) -> None:
        self.app = app
        self.token = token
        self.cookie_value = hashlib.sha256(("chorus-inspect:" + token).encode()).hexdigest()

    def _has_token(self, scope: Scope) -> bool:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip(), self.token):
            return True
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value, self.cookie_value):
                return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._has_token(scope):
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = (query.pop("token", [""]) or [""])[0]
        if given and hmac.compare_digest(given, self.token):
            rest = urlencode(query, doseq=True)
            location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
            await _respond(send, 302, b"", [(b"location", location.encode("latin-1")),
                                            (b"set-cookie", f"{COOKIE}={self.cookie_value}; Path=/; HttpOnly; "
                                                            "SameSite=Strict".encode())])
            return
        await _respond(send, 401, b"chorus inspect: this view needs the operator token "
                                  b"(open the address `chorus inspect` printed, with ?token=...)\n", [])


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")] + headers})
    await send({"type": "http.response.body", "body": body})


def build_app(path: Path, *, token: str | None = None) -> Any:
    """The ASGI app serving ``path`` read-only (checked first; ``StoreError`` if it cannot be served)."""
    tables = check_store(path)
    try:
        import sqlite_vec
        from datasette.app import Datasette
        from datasette.database import Database
        from datasette.plugins import pm
    except ImportError as exc:
        raise ChorusError("`chorus inspect` needs Datasette: pip install 'chorus[inspect]' "
                          "(scripts/setup.sh installs it)") from exc
    from . import inspect_plugin

    if not pm.is_registered(inspect_plugin):
        pm.register(inspect_plugin, name="chorus-inspect")
    ds = Datasette(metadata=build_metadata(str(path), tables), template_dir=str(TEMPLATES),
                   sqlite_extensions=[sqlite_vec.loadable_path()],
                   settings={"suggest_facets": False, "allow_download": False, "sql_time_limit_ms": 3000,
                             "default_page_size": 50})
    ds.add_database(Database(ds, path=str(path.resolve()), is_mutable=True), name=DB_NAME)
    app = ds.app()
    return TokenGate(app, token) if token else app


def serve(path: Path, *, host: str = "127.0.0.1", port: int = 8001, token_env: str | None = None) -> int:
    """Run the inspector until interrupted; prints the address to open."""
    token = None
    if token_env:
        token = os.environ.get(token_env, "")
        if not token:
            raise ChorusError(f"--token-env {token_env}: that environment variable is empty or unset")
    app = build_app(path, token=token)
    import uvicorn

    shown = "localhost" if host in ("127.0.0.1", "::1") else host
    print(f"chorus inspect: {path} read-only at http://{shown}:{port}/{DB_NAME}"
          + ("?token=<the token in $" + token_env + ">" if token else ""), flush=True)
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(f"chorus inspect: listening on {host}, reachable from other machines", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="off")
    return 0
