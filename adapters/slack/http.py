"""The HTTP bridge for Slack's Events API: aiohttp in, Bolt's ``App.dispatch`` out.

Bolt verifies the signature and runs the listeners; ``dispatch`` blocks (acks run in
the request thread), so it runs in an executor and the event loop keeps serving.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt import App, BoltRequest

log = logging.getLogger(__name__)


async def serve_http(app: App, host: str = "0.0.0.0", port: int = 3000, path: str = "/slack/events") -> Any:
    """Serve the Events API and slash commands over HTTP; returns the aiohttp runner to clean up."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        raw = await request.text()
        req = BoltRequest(body=raw, query=request.query_string,
                          headers={k.lower(): v for k, v in request.headers.items()})
        resp = await asyncio.get_running_loop().run_in_executor(None, app.dispatch, req)
        headers = {k: v for k, v in resp.first_headers_without_set_cookie().items()
                   if k.lower() not in ("content-length",)}
        return web.Response(status=resp.status, body=resp.body.encode() if isinstance(resp.body, str)
                            else resp.body, headers=headers)

    web_app = web.Application()
    web_app.router.add_post(path, handle)
    runner = web.AppRunner(web_app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("slack HTTP mode listening on %s:%d%s", host, port, path)
    return runner
