"""The Slack adapter through the real Bolt ``App`` with request verification on.

Event and slash-command payloads are signed with the signing secret and dispatched
to the app (and, once, POSTed to the adapter's own HTTP-mode server on loopback).
Every Web API call and ``response_url`` answer goes to a mock Slack API server on
127.0.0.1 (the pattern bolt-python's own tests use), which records what was posted.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from slack_bolt import BoltRequest
from slack_sdk import WebClient

from adapters.slack import SlackAdapter, parse_link
from bot.actions import Actions
from bot.app import Bot
from bot.config import Settings
from bot.replies import Reply
from memory.llm.fake import ScriptedLLM
from memory.models import ScopeKey
from memory.store import Store

SECRET = "test-signing-secret"
TEAM, GENERAL = "T0TEST", "C0GENERAL"
USERS = {
    "U0ALICE": {"id": "U0ALICE", "name": "alice", "real_name": "Alice Liddell", "is_admin": False,
                "profile": {"display_name": "alice", "real_name": "Alice Liddell"}},
    "U0BOB": {"id": "U0BOB", "name": "bob", "real_name": "Bob", "is_admin": True,
              "profile": {"display_name": "", "real_name": "Bob Admin"}},
}


class MockSlackAPI:
    """A loopback Slack Web API: canned answers, and a record of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.history: dict[str, list[dict]] = {}
        self.replies: dict[str, list[dict]] = {}
        self.rate_limit_once: set[str] = set()
        self.lock = threading.Lock()
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, body = mock.route(self.path, self.headers.get("Content-Type") or "", raw)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def of(self, method: str) -> list[dict]:
        with self.lock:
            return [b for m, b in self.calls if m == method]

    def route(self, path: str, ctype: str, raw: bytes) -> tuple[int, dict, bytes]:
        if path.startswith("/upload/"):
            with self.lock:
                self.calls.append(("upload", {"data": raw}))
            return 200, {"Content-Type": "text/plain"}, b"OK"
        args = json.loads(raw or b"{}") if "json" in ctype else dict(parse_qsl(raw.decode()))
        name = path.rsplit("/", 1)[-1]
        with self.lock:
            self.calls.append((name if path.startswith("/api/") else "respond", args))
        if name in self.rate_limit_once:
            self.rate_limit_once.discard(name)
            limited = b'{"ok": false, "error": "ratelimited"}'
            return 429, {"Content-Type": "application/json", "Retry-After": "7"}, limited
        data = self.answer(name, args) if path.startswith("/api/") else {"ok": True}
        return 200, {"Content-Type": "application/json"}, json.dumps(data).encode()

    def answer(self, method: str, args: dict) -> dict:
        if method == "auth.test":
            return {"ok": True, "url": "https://chorus-test.slack.com/", "team": "Test", "user": "chorus",
                    "team_id": TEAM, "user_id": "U0BOT", "bot_id": "B0BOT"}
        if method == "users.info":
            return {"ok": True, "user": USERS.get(args["user"], {"id": args["user"], "name": args["user"]})}
        if method == "conversations.info":
            return {"ok": True, "channel": {"id": args["channel"], "name": "general"}}
        if method == "chat.postMessage":
            return {"ok": True, "channel": args["channel"], "ts": f"{time.time():.6f}"}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{time.time():.6f}"}
        if method == "conversations.open":
            return {"ok": True, "channel": {"id": "D0" + args["users"][2:]}}
        if method == "files.getUploadURLExternal":
            return {"ok": True, "upload_url": f"{self.base}/upload/F0FILE", "file_id": "F0FILE"}
        if method == "files.completeUploadExternal":
            return {"ok": True, "files": [{"id": "F0FILE", "title": "export"}]}
        if method == "conversations.history":
            items = sorted(self.history.get(args["channel"], []), key=lambda m: float(m["ts"]))
            after = float(args.get("oldest") or 0)
            limit = int(args.get("limit") or 100)
            page = [m for m in items if float(m["ts"]) > after][:limit]
            more = len([m for m in items if float(m["ts"]) > after]) > limit
            return {"ok": True, "messages": list(reversed(page)), "has_more": more}
        if method == "conversations.replies":
            return {"ok": True, "messages": self.replies.get(args["ts"], []), "has_more": False}
        if method == "conversations.list":
            return {"ok": True, "channels": [{"id": GENERAL, "name": "general", "is_member": True}]}
        return {"ok": False, "error": "unknown_method"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def signed(body: str, ts: int | None = None) -> dict[str, str]:
    ts = ts or int(time.time())
    sig = "v0=" + hmac.new(SECRET.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": str(ts), "x-slack-signature": sig}


def until(cond: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


class Harness:
    def __init__(self, tmp_path: Path, llm: Any = None, analysis_models: Any = None) -> None:
        self.api = MockSlackAPI()
        self.store = Store(tmp_path / "chorus.db")
        self.bot = Bot(Settings(), store=self.store, llm=llm, load_models=False, analysis_models=analysis_models)
        self.actions = Actions(self.bot)
        self.client = WebClient(token="xoxb-test-token", base_url=f"{self.api.base}/api/")
        self.sleeps: list[float] = []
        self.adapter = SlackAdapter(self.actions, self.client, signing_secret=SECRET, backfill_on_join=False,
                                    sleep=self.sleeps.append, history_interval_s=0.0)
        self._n = 0

    def close(self) -> None:
        self.adapter.close()
        self.api.close()
        self.store.close()

    def count(self, channel: str = GENERAL) -> int:
        sid = self.store.scope_id(ScopeKey("slack", TEAM, channel))
        return self.store.count_messages(sid) if sid is not None else 0

    def event(self, event: dict, *, event_id: str | None = None, retry: int = 0) -> Any:
        self._n += 1
        body = json.dumps({"token": "legacy", "team_id": TEAM, "api_app_id": "A0APP", "type": "event_callback",
                           "event_id": event_id or f"Ev{self._n:06d}", "event_time": int(time.time()),
                           "event": event, "authorizations": [{"team_id": TEAM, "user_id": "U0BOT", "is_bot": True}]})
        headers = signed(body)
        if retry:
            headers.update({"x-slack-retry-num": str(retry), "x-slack-retry-reason": "http_timeout"})
        return self.adapter.app.dispatch(BoltRequest(body=body, headers=headers))

    def message(self, ts: str, text: str, user: str = "U0ALICE", channel: str = GENERAL, **extra: Any) -> Any:
        return self.event({"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
                           "channel_type": "im" if channel.startswith("D") else "channel", "team": TEAM, **extra})

    def command(self, text: str, user: str = "U0ALICE", channel: str = GENERAL) -> tuple[Any, str, float]:
        self._n += 1
        url = f"{self.api.base}/response/{self._n}"
        body = urlencode({"token": "legacy", "team_id": TEAM, "team_domain": "chorus-test", "channel_id": channel,
                          "channel_name": "directmessage" if channel.startswith("D") else "general",
                          "user_id": user, "user_name": USERS.get(user, {}).get("name", user), "command": "/chorus",
                          "text": text, "response_url": url, "trigger_id": f"trig{self._n}", "api_app_id": "A0APP"})
        started = time.monotonic()
        resp = self.adapter.app.dispatch(BoltRequest(body=body, headers={
            **signed(body), "content-type": "application/x-www-form-urlencoded"}))
        return resp, f"/response/{self._n}", time.monotonic() - started

    def responses(self, text_contains: str = "") -> list[dict]:
        return [b for b in self.api.of("respond") if text_contains in b.get("text", "")]


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    yield harness
    harness.close()


# ---------------------------------------------------------------------- tests
def test_request_verification_rejects_unsigned_or_forged_requests(h):
    body = json.dumps({"type": "event_callback", "team_id": TEAM, "event_id": "Ev1",
                       "event": {"type": "message", "channel": GENERAL, "user": "U0ALICE", "text": "hi", "ts": "1.1"}})
    assert h.adapter.app.dispatch(BoltRequest(body=body, headers={})).status == 401
    forged = signed(body)
    forged["x-slack-signature"] = "v0=" + "0" * 64
    assert h.adapter.app.dispatch(BoltRequest(body=body, headers=forged)).status == 401
    stale = signed(body, ts=int(time.time()) - 3600)
    assert h.adapter.app.dispatch(BoltRequest(body=body, headers=stale)).status == 401
    assert h.count() == 0


def test_messages_threads_dms_names_and_markup(h):
    assert h.message("1717000001.000100", "rehearsal moved to Thursday, ask <@U0BOB>").status == 200
    h.message("1717000002.000200", "I'll bring the amp", user="U0BOB", thread_ts="1717000001.000100")
    h.message("1717000003.000300", "a private note", channel="D0ALICE")
    h.message("1717000004.000400", "beep", user="", bot_id="B0DICE", subtype="bot_message")
    h.message("1717000005.000500", "", subtype="channel_join")
    assert h.count() == 2 and h.count("D0ALICE") == 1
    key = ScopeKey("slack", TEAM, GENERAL)
    first = h.store.find(key, "1717000001.000100")
    assert first.author_name == "alice" and first.text.endswith("ask @Bob Admin")
    reply = h.store.find(key, "1717000002.000200")
    assert reply.thread == "1717000001.000100" and reply.author_name == "Bob Admin"
    assert next(s for s in h.store.scopes() if s.channel == "D0ALICE").is_dm
    assert next(s for s in h.store.scopes() if s.channel == GENERAL).name == "general"
    assert len(h.api.of("users.info")) == 2  # names are cached


def test_retries_are_deduplicated_by_event_id(h):
    h.message("1717000010.000100", "first delivery", event_id="EvSAME")
    h.event({"type": "app_mention", "channel": GENERAL, "user": "U0ALICE", "text": "<@U0BOT> first delivery?",
             "ts": "1717000011.000100"}, event_id="EvMENTION")
    h.event({"type": "app_mention", "channel": GENERAL, "user": "U0ALICE", "text": "<@U0BOT> first delivery?",
             "ts": "1717000011.000100"}, event_id="EvMENTION", retry=1)
    until(lambda: h.api.of("chat.postMessage"))
    time.sleep(0.5)
    assert len(h.api.of("chat.postMessage")) == 1  # the retried mention was answered once
    with h.store.read() as conn:
        assert conn.execute("SELECT count(*) FROM processed_events").fetchone()[0] == 2


def test_mention_is_answered_in_thread_with_links(h):
    h.message("1717000020.000100", "the end-of-season dinner is pizza by the river")
    resp = h.event({"type": "app_mention", "channel": GENERAL, "user": "U0BOB", "team": TEAM,
                    "text": "<@U0BOT> where is the end-of-season dinner?", "ts": "1717000021.000100"})
    assert resp.status == 200
    post = until(lambda: h.api.of("chat.postMessage"))[0]
    assert post["channel"] == GENERAL and post["thread_ts"] == "1717000021.000100"
    assert "pizza by the river" in post["text"]
    assert "<https://chorus-test.slack.com/archives/C0GENERAL/p1717000020000100|[1]>" in post["text"]
    assert h.count() == 2  # the question itself is remembered too
    question = h.store.find(ScopeKey("slack", TEAM, GENERAL), "1717000021.000100")
    assert question.to_bot  # ...as bot traffic: never evidence, search result or writer input
    again = h.bot.ask(ScopeKey("slack", TEAM, GENERAL), "where is the end-of-season dinner?")
    assert [c.msg_id for c in again.citations] == ["1717000020.000100"]


def test_edits_and_deletions_reach_memory(h):
    key = ScopeKey("slack", TEAM, GENERAL)
    h.message("1717000030.000100", "rehersal on Fridya")
    h.message("1717000031.000100", "dinner at the river")
    h.event({"type": "message", "subtype": "message_changed", "channel": GENERAL, "ts": "1717000032.000000",
             "message": {"type": "message", "user": "U0ALICE", "text": "rehearsal on Friday",
                         "ts": "1717000030.000100", "edited": {"user": "U0ALICE", "ts": "1717000032.000000"}},
             "previous_message": {"type": "message", "user": "U0ALICE", "text": "rehersal on Fridya",
                                  "ts": "1717000030.000100"}})
    assert h.store.find(key, "1717000030.000100").text == "rehearsal on Friday"
    assert h.bot.whosaid(key, "rehersal on Fridya").citations == []
    h.event({"type": "message", "subtype": "message_deleted", "channel": GENERAL, "ts": "1717000033.000000",
             "deleted_ts": "1717000031.000100", "previous_message": {"type": "message", "user": "U0ALICE",
                                                                    "text": "dinner at the river",
                                                                    "ts": "1717000031.000100"}})
    assert h.store.find(key, "1717000031.000100") is None and h.count() == 1


def test_slash_commands_ack_at_once_and_answer_through_respond(h):
    h.message("1717000040.000100", "the end-of-season dinner is pizza by the river")
    h.bot.profile = lambda key, person: Reply(f"profile of {person}")  # type: ignore[attr-defined]
    h.bot.timeline = lambda key, topic: Reply(f"timeline of {topic}")  # type: ignore[attr-defined]
    resp, url, _ = h.command("ask where is the dinner?")
    assert resp.status == 200 and resp.body == ""
    answer = until(lambda: h.responses("pizza by the river"))[0]
    assert answer["response_type"] == "in_channel"
    h.command("whosaid pizza by the river")
    assert until(lambda: h.responses("said it first"))
    h.command("profile @alice")
    assert until(lambda: h.responses("profile of alice"))
    h.command("timeline dinner")
    assert until(lambda: h.responses("timeline of dinner"))
    h.command("status")
    status = until(lambda: h.responses("Messages remembered: 1"))[0]
    assert status["response_type"] == "ephemeral"
    h.command("help")
    assert until(lambda: h.responses("forget me"))


def test_admin_commands_check_slack_admin_flag(h):
    h.command("pause")  # alice is not an admin
    assert until(lambda: h.responses("Only workspace admins"))[0]["response_type"] == "ephemeral"
    h.command("pause", user="U0BOB")
    until(lambda: h.responses("Paused"))
    h.message("1717000050.000100", "said while paused")
    assert h.count() == 0
    h.command("resume", user="U0BOB")
    until(lambda: h.responses("Resumed"))
    h.command("channel out", user="U0BOB")
    until(lambda: h.responses("opted out"))
    h.message("1717000051.000100", "said in an opted-out channel")
    assert h.count() == 0
    h.command("channel in", user="U0BOB")
    until(lambda: h.responses("opted in"))
    h.message("1717000052.000100", "remembered again")
    assert h.count() == 1


def test_forget_me_confirmation_and_private_export(h):
    h.message("1717000060.000100", "alice plans a surprise party")
    h.message("1717000061.000100", "bob brings the cake", user="U0BOB")
    h.command("export")
    until(lambda: h.api.of("files.completeUploadExternal"))
    assert h.api.of("conversations.open")[0]["users"] == "U0ALICE"
    done = h.api.of("files.completeUploadExternal")[0]
    assert done["channel_id"] == "D0ALICE"  # the file goes to Alice's own DM, nowhere else
    data = json.loads(h.api.of("upload")[0]["data"])
    assert [m["text"] for m in data["messages"]] == ["alice plans a surprise party"]
    assert until(lambda: h.responses("direct message"))[0]["response_type"] == "ephemeral"

    h.command("forget me")
    ask = until(lambda: h.responses("To confirm"))[0]
    code = ask["text"].split("`forget me ")[1].split("`")[0]
    assert h.count() == 2
    h.command("forget me wrong")
    until(lambda: h.responses("did not match"))
    assert h.count() == 2
    fresh = until(lambda: [r for r in h.responses("To confirm") if "did not match" in r["text"]])[0]
    code = fresh["text"].split("`forget me ")[1].split("`")[0]
    h.command(f"forget me {code}")
    until(lambda: h.responses("Forgot 1 message"))
    assert h.count() == 1


def test_forget_message_by_link(h):
    h.message("1717000070.000100", "bob's message", user="U0BOB")
    link = "https://chorus-test.slack.com/archives/C0GENERAL/p1717000070000100"
    assert parse_link(link) == (GENERAL, "1717000070.000100")
    h.command(f"forget message {link}")  # alice: not hers, not an admin
    until(lambda: h.responses("only make me forget your own"))
    h.command(f"forget {link}", user="U0BOB")
    until(lambda: h.responses("Forgotten"))
    assert h.count() == 0


def test_ack_is_immediate_while_a_slow_model_call_runs(tmp_path):
    def slow(prompt: str) -> str:
        time.sleep(3.0)
        return "Pizza by the river [1]."
    harness = Harness(tmp_path, llm=ScriptedLLM([slow] * 10))
    try:
        harness.message("1717000080.000100", "the dinner is pizza by the river")
        first, _, _ = harness.command("ask where is the dinner?")
        time.sleep(0.2)  # the model is now busy with the first question
        resp, _, ack_s = harness.command("ask where is the dinner again?")
        assert first.status == 200 and resp.status == 200
        assert ack_s < 2.5, f"ack took {ack_s:.2f} s"  # before the busy 3-second model call is done
        until(lambda: len(harness.api.of("respond")) == 2, timeout=30)  # both answered once the model is done
    finally:
        harness.close()


def test_http_mode_server_on_loopback(h):
    async def go() -> None:
        runner = await h.adapter.start_http("127.0.0.1", 0)
        try:
            port = runner.addresses[0][1]
            body = json.dumps({"type": "event_callback", "team_id": TEAM, "event_id": "EvHTTP1",
                               "event": {"type": "message", "channel": GENERAL, "user": "U0ALICE",
                                         "text": "over plain HTTP", "ts": "1717000090.000100"}})

            def post(headers: dict) -> int:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                             headers={"Content-Type": "application/json", **headers})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        return r.status
                except urllib.error.HTTPError as exc:
                    return exc.code
            assert await asyncio.to_thread(post, {}) == 401
            assert await asyncio.to_thread(post, signed(body)) == 200
        finally:
            await runner.cleanup()
    asyncio.run(go())
    assert h.count() == 1


def test_backfill_honours_retry_after_and_fetches_threads(h):
    h.api.history[GENERAL] = [
        {"type": "message", "user": "U0ALICE", "text": f"old message {i}", "ts": f"17000000{i:02d}.000100",
         **({"thread_ts": "1700000001.000100", "reply_count": 1} if i == 1 else {})} for i in range(1, 6)]
    h.api.replies["1700000001.000100"] = [
        {"type": "message", "user": "U0ALICE", "text": "old message 1", "ts": "1700000001.000100",
         "thread_ts": "1700000001.000100"},
        {"type": "message", "user": "U0BOB", "text": "a reply in the thread", "ts": "1700000001.500000",
         "thread_ts": "1700000001.000100"}]
    h.api.rate_limit_once.add("conversations.history")
    result = h.adapter.backfill(TEAM, h.adapter.list_channels())
    assert 7.0 in h.sleeps  # waited as long as Retry-After said
    assert result.imported == 6 and h.count() == 6
    key = ScopeKey("slack", TEAM, GENERAL)
    assert h.store.find(key, "1700000001.500000").thread == "1700000001.000100"
    assert [m.msg_id for m in h.store.recent(h.store.scope_id(key), 10)][0] == "1700000001.000100"


def test_chorus_run_serves_until_sigterm_and_never_logs_a_token(tmp_path, monkeypatch, caplog):
    import argparse
    import functools
    import logging
    import os
    import signal
    import socket

    import slack_sdk

    from bot import platform_cli

    api = MockSlackAPI()
    monkeypatch.setattr(slack_sdk, "WebClient", functools.partial(WebClient, base_url=f"{api.base}/api/"))
    token = "xoxb-1234-very-secret-token"
    monkeypatch.setenv("SLACK_BOT_TOKEN", token)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings.model_validate({"store": {"path": str(tmp_path / "chorus.db")}, "writer": {"enabled": False},
                                        "slack": {"enabled": True, "mode": "http", "port": port}})
    caplog.set_level(logging.INFO)
    body = json.dumps({"type": "event_callback", "team_id": TEAM, "event_id": "EvRUN1",
                       "event": {"type": "message", "channel": GENERAL, "user": "U0ALICE",
                                 "text": "served by chorus run", "ts": "1717000100.000100"}})
    statuses: list[int] = []

    def client() -> None:  # another "process": talks to the server, then stops it like systemd would
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not statuses:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                             headers={"Content-Type": "application/json", **signed(body)})
                with urllib.request.urlopen(req, timeout=5) as r:
                    statuses.append(r.status)
            except OSError:
                time.sleep(0.05)
        logging.getLogger("chorus.test").info("a library printing the token %s by mistake", token)
        os.kill(os.getpid(), signal.SIGTERM)

    helper = threading.Thread(target=client)
    helper.start()
    try:
        assert platform_cli.run_cmd(argparse.Namespace(), settings) == 0  # returns instead of dying on SIGTERM
        helper.join(10)
        assert statuses == [200]
        with Store(tmp_path / "chorus.db") as store:
            sid = store.scope_id(ScopeKey("slack", TEAM, GENERAL))
            assert sid is not None and store.count_messages(sid) == 1
        assert token not in caplog.text and "[redacted]" in caplog.text
        assert "slack HTTP mode listening" in caplog.text and "stopped cleanly" in caplog.text
    finally:
        api.close()


def test_backfill_command_imports_the_channel_only_when_an_admin_asks(h):
    """History import is an explicit admin act: `/chorus backfill DAYS` says what it stores, then imports
    that channel's recent history (older messages skipped) in the background."""
    h.api.history[GENERAL] = [{"type": "message", "user": "U0ALICE", "text": f"old message {i}",
                               "ts": f"{int(time.time()) - 86400 * (10 - i)}.000100"} for i in range(1, 6)]
    h.command("backfill")  # alice is not an admin
    assert until(lambda: h.responses("Only workspace admins"))
    assert h.count() == 0
    h.command("backfill 7", user="U0BOB")
    reply = until(lambda: h.responses("Importing the history"))[0]
    assert "older messages are skipped" in reply["text"] and reply["response_type"] == "ephemeral"
    assert until(lambda: h.count() == 2)  # 9, 8 and 7 days ago are older than the limit
