"""``chorus bench event``: the live event path of the chat adapters.

1. Ingest latency of one platform event, end to end through the adapter's translation
   (Slack event dict / Discord gateway payload -> discord.py Message -> ``Message``),
   the privacy gate and the store write with its embedding (target: p95 <= 20 ms).
2. Time to acknowledge a slash command while a slow model call is in progress
   (target: < 3 s): Slack through the real Bolt app with a signed request, Discord
   through the adapter's defer logic.

The platform libraries are imported inside the functions that use them, so the other
benches run without the ``[platforms]`` extra; everything runs in process or on loopback.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from . import synthetic
from .common import percentiles, save

SECRET = "bench-signing-secret"


class _LoopbackSlack:
    """Just enough Web API on 127.0.0.1 for the Bolt app and response_url answers."""

    def __init__(self) -> None:
        self.responses = 0

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                method = self.path.rsplit("/", 1)[-1]
                args = dict(parse_qsl(raw.decode(errors="replace")))
                if method == "auth.test":
                    data: dict = {"ok": True, "url": "https://bench.slack.com/", "user_id": "U0BOT", "team_id": "T0"}
                elif method == "conversations.info":
                    data = {"ok": True, "channel": {"id": args.get("channel"), "name": "bench"}}
                elif method == "users.info":
                    data = {"ok": True, "user": {"id": args.get("user"), "name": "bench", "is_admin": False}}
                else:
                    outer.responses += 1
                    data = {"ok": True}
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _slow_llm(seconds: float, n: int) -> Any:
    from memory.llm.fake import ScriptedLLM

    def slow(prompt: str) -> str:
        time.sleep(seconds)
        return "A slow answer [1]."
    return ScriptedLLM([slow] * n)


def _signed(body: str) -> dict[str, str]:
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(SECRET.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": ts, "x-slack-signature": sig}


def _slack_adapter(actions: Any, api: _LoopbackSlack) -> Any:
    from slack_sdk import WebClient

    from adapters.slack import SlackAdapter

    return SlackAdapter(actions, WebClient(token="xoxb-bench", base_url=f"{api.base}/api/"), signing_secret=SECRET,
                        backfill_on_join=False)


def _slack_ingest(actions: Any, events: list, n: int) -> list[float]:
    """Signed Events API payloads through the real Bolt app: verification, dedupe, translation, gate, store."""
    from slack_bolt import BoltRequest

    api = _LoopbackSlack()
    adapter = _slack_adapter(actions, api)
    lat = []
    try:
        for i, m in enumerate(events[:n]):
            event = {"type": "message", "channel": f"C{sum(m.channel.encode()) % 8:04d}", "channel_type": "channel",
                     "user": f"U{sum(m.author_id.encode()) % 40:04d}", "text": m.text,
                     "ts": f"{1_717_000_000 + i}.{i:06d}"}
            body = json.dumps({"type": "event_callback", "team_id": "T0BENCH", "event_id": f"EvBENCH{i:06d}",
                               "event": event})
            req = BoltRequest(body=body, headers={**_signed(body), "content-type": "application/json"})
            t = time.perf_counter()
            resp = adapter.app.dispatch(req)
            lat.append(time.perf_counter() - t)
            assert resp.status == 200, resp.body
    finally:
        adapter.close()
        api.close()
    return lat


def _embed_only(embedder: Any, events: list, n: int) -> list[float]:
    lat = []
    for m in events[:n]:
        t = time.perf_counter()
        embedder.embed([m.text])
        lat.append(time.perf_counter() - t)
    return lat


def _discord_ingest(actions: Any, events: list, n: int, first_id: int = 333333333333333333) -> list[float]:
    import discord

    from adapters.discord import to_model

    client = discord.Client(intents=discord.Intents.default())
    state = client._connection
    state.parse_guild_create({
        "id": "111111111111111111", "name": "bench", "owner_id": "1", "roles": [], "emojis": [], "stickers": [],
        "features": [], "member_count": 1, "unavailable": False,
        "channels": [{"id": "222222222222222222", "type": 0, "name": "general", "position": 0,
                      "permission_overwrites": []}]})
    channel = state._get_guild(111111111111111111).get_channel(222222222222222222)
    lat = []
    for i, m in enumerate(events[:n]):
        payload = {"id": str(first_id + i), "channel_id": "222222222222222222",
                   "guild_id": "111111111111111111", "content": m.text, "type": 0, "tts": False,
                   "author": {"id": str(444444444444444444 + hash(m.author_id) % 40), "username": m.author_name,
                              "discriminator": "0", "avatar": None},
                   "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(1_717_000_000 + i)),
                   "edited_timestamp": None, "mention_everyone": False, "mentions": [], "mention_roles": [],
                   "attachments": [], "embeds": [], "pinned": False}
        t = time.perf_counter()
        msg = to_model(discord.Message(state=state, channel=channel, data=payload))
        actions.remember(msg)
        lat.append(time.perf_counter() - t)
    return lat


def _slack_ack(bot: Any, model_s: float, n: int) -> list[float]:
    from slack_bolt import BoltRequest

    from bot.actions import Actions

    api = _LoopbackSlack()
    adapter = _slack_adapter(Actions(bot), api)

    def command(text: str) -> float:
        body = urlencode({"team_id": "T0BENCH", "channel_id": "C0000", "channel_name": "general", "user_id": "U0001",
                          "command": "/chorus", "text": text, "response_url": f"{api.base}/response"})
        req = BoltRequest(body=body, headers={**_signed(body), "content-type": "application/x-www-form-urlencoded"})
        t = time.perf_counter()
        resp = adapter.app.dispatch(req)
        assert resp.status == 200, resp.body
        return time.perf_counter() - t

    try:
        command("ask what did we decide about the trip?")  # occupies the model
        time.sleep(0.2)
        return [command("ask and what about lunch?" if i % 2 else "status") for i in range(n)]
    finally:
        adapter.close()
        api.close()


def _discord_ack(bot: Any, model_s: float, n: int) -> list[float]:
    from adapters.discord import DiscordAdapter
    from bot.actions import Actions

    class Response:
        def __init__(self) -> None:
            self.at: float | None = None

        async def defer(self, **kw: Any) -> None:
            self.at = self.at or time.perf_counter()

        async def send_message(self, *a: Any, **kw: Any) -> None:
            self.at = self.at or time.perf_counter()

    class Followup:
        async def send(self, *a: Any, **kw: Any) -> None:
            pass

    class Interaction:  # the attributes run_command reads from a discord.Interaction
        def __init__(self) -> None:
            self.response, self.followup = Response(), Followup()
            self.channel, self.channel_id, self.guild_id = None, 222222222222222222, 111111111111111111
            self.permissions = type("P", (), {"manage_guild": False, "administrator": False})()
            self.user = type("U", (), {"id": 444444444444444444, "display_name": "bench"})()

    async def go() -> list[float]:
        adapter = DiscordAdapter(Actions(bot), backfill_on_join=False)
        out = []
        try:
            for _ in range(n):
                inter = Interaction()
                t = time.perf_counter()
                task = asyncio.create_task(adapter.run_command(inter, "ask", lambda inv: adapter.actions.ask(
                    inv, "what did we decide about the trip?"), slow=True))
                while inter.response.at is None:
                    await asyncio.sleep(0.005)
                out.append(inter.response.at - t)
                await task
        finally:
            await adapter.close()
            adapter.fast.shutdown(wait=True)
            adapter.slow.shutdown(wait=True)
        return out
    return asyncio.run(go())


def main(args: argparse.Namespace, settings: object) -> int:
    from bot.actions import Actions
    from bot.app import Bot, load_embedder_from
    from memory.store import Store

    n = int(getattr(args, "events", 300))
    model_s = float(getattr(args, "model_seconds", 5.0))
    n_acks = int(getattr(args, "acks", 10))
    out = getattr(args, "out", "out/bench")
    embedder = load_embedder_from(settings)  # type: ignore[arg-type]
    embedder.embed(["warm up the model"])
    events = list(synthetic.history(4 * n + 50, seed=11, platform="bench"))
    slack_events, discord_events = events[:n], events[n:2 * n]
    extra_events, deferred_events = events[2 * n:3 * n], events[3 * n:4 * n]
    results: dict = {"events": n, "embedder": embedder.name, "model_seconds": model_s}
    with tempfile.TemporaryDirectory(prefix="chorus-bench-event-") as tmp:
        store = Store(Path(tmp) / "bench.db", embedder=embedder)
        bot = Bot(settings, store=store, llm=_slow_llm(model_s, 4 * n_acks + 4), load_models=False)  # type: ignore
        actions = Actions(bot)
        store.ingest(events[4 * n:], embed=True)  # a little history so searches find something
        print(f"ingesting {n} Slack events and {n} Discord events one at a time...", file=sys.stderr)
        results["slack_event_ingest"] = percentiles(_slack_ingest(actions, slack_events, n))
        results["discord_event_ingest"] = percentiles(_discord_ingest(actions, discord_events, n))
        # Baselines on the same machine: the embedding alone, and the whole path with the vector
        # written later by the backlog (Bot.remember through the door, as live events go).
        results["baseline_embed_only"] = percentiles(_embed_only(embedder, extra_events, n))
        deferred = Actions(Bot(settings, store=store, load_models=False))  # type: ignore[arg-type]
        results["discord_event_ingest_embedding_deferred"] = percentiles(
            _discord_ingest(deferred, deferred_events, n, first_id=555555555555555555))
        print(f"acknowledging commands while the model takes {model_s:.0f} s per answer...", file=sys.stderr)
        results["slack_command_ack"] = percentiles(_slack_ack(bot, model_s, n_acks))
        results["discord_command_ack"] = percentiles(_discord_ack(bot, model_s, max(2, n_acks // 5)))
        store.close()
    results["targets"] = {"event_ingest_p95_ms": 20.0, "command_ack_ms": 3000.0}
    results["met"] = {
        "event_ingest": max(results["slack_event_ingest"]["p95_ms"], results["discord_event_ingest"]["p95_ms"]) <= 20,
        "command_ack": max(results["slack_command_ack"]["p95_ms"], results["discord_command_ack"]["p95_ms"]) < 3000}
    path = save(out, "event", results)
    print(json.dumps(results, indent=2))
    print(f"written to {path}", file=sys.stderr)
    return 0
