"""The Discord adapter driven by real discord.py objects.

Gateway payloads (recorded shapes of GUILD_CREATE, MESSAGE_CREATE, MESSAGE_UPDATE,
MESSAGE_DELETE, INTERACTION_CREATE) are fed to the real ``ConnectionState`` parsers,
so discord.py builds its own Message / Thread / Interaction objects and dispatches
them to our client exactly as the gateway would. Every REST call discord.py makes
(login, replies, interaction callbacks, follow-ups) goes to a mock Discord API on
127.0.0.1, which records what was posted.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import discord
import pytest
from aiohttp import web

from adapters.discord import DiscordAdapter, parse_link
from bot.actions import Actions
from bot.app import Bot
from bot.config import Settings
from bot.replies import Reply
from memory.models import ScopeKey
from memory.store import Store

GUILD_ID, GENERAL, THREAD, DM_CHANNEL = "100", "200", "300", "400"
BOT_USER = {"id": "900000000000000900", "username": "chorus", "discriminator": "0", "avatar": None, "bot": True,
            "global_name": "Chorus"}
ALICE = {"id": "100000000000000001", "username": "alice", "discriminator": "0", "avatar": None, "global_name": "Alice"}
BOB = {"id": "100000000000000002", "username": "bob", "discriminator": "0", "avatar": None, "global_name": "Bob"}
OTHER_BOT = {"id": "100000000000000003", "username": "dice", "discriminator": "0", "avatar": None, "bot": True,
             "global_name": None}
ADMIN_PERMS, PLAIN_PERMS = str(1 << 5 | 1 << 10 | 1 << 11), str(1 << 10 | 1 << 11)  # manage_guild | view | send
T0 = 1_717_000_000


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


def member(user: dict) -> dict:
    return {"user": user, "roles": [], "joined_at": iso(T0 - 86400), "deaf": False, "mute": False, "flags": 0}


GUILD_CREATE = {
    "id": GUILD_ID, "name": "Band", "owner_id": "1", "icon": None, "afk_timeout": 300, "verification_level": 0,
    "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0,
    "premium_tier": 0, "preferred_locale": "en-US", "features": [], "emojis": [], "stickers": [],
    "member_count": 3, "large": False, "unavailable": False, "joined_at": iso(T0 - 86400),
    "roles": [{"id": GUILD_ID, "name": "@everyone", "permissions": "68608", "position": 0, "color": 0,
               "hoist": False, "managed": False, "mentionable": False, "flags": 0}],
    "channels": [{"id": GENERAL, "type": 0, "name": "general", "position": 0, "permission_overwrites": [],
                  "guild_id": GUILD_ID, "nsfw": False, "topic": None, "last_message_id": None}],
    "threads": [{"id": THREAD, "type": 11, "name": "setlist", "parent_id": GENERAL, "guild_id": GUILD_ID,
                 "owner_id": "1", "message_count": 1, "member_count": 2, "rate_limit_per_user": 0,
                 "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                     "archive_timestamp": iso(T0), "locked": False}}],
    "members": [member(BOT_USER)], "voice_states": [], "presences": [],
}


def message_payload(mid: int | str, content: str, *, author: dict = ALICE, channel: str = GENERAL,
                    guild: str | None = GUILD_ID, ts: float | None = None, mentions: tuple[dict, ...] = (),
                    attachments: tuple[str, ...] = (), reply_to: str | None = None) -> dict:
    data: dict[str, Any] = {
        "id": str(mid), "channel_id": channel, "author": author, "content": content,
        "timestamp": iso(ts if ts is not None else T0 + int(mid) % 100000), "edited_timestamp": None,
        "tts": False, "mention_everyone": False, "mentions": list(mentions), "mention_roles": [],
        "attachments": [{"id": f"{mid}{i}", "filename": f, "size": 10, "url": "https://cdn/x",
                         "proxy_url": "https://cdn/x"} for i, f in enumerate(attachments)],
        "embeds": [], "pinned": False, "type": 19 if reply_to else 0, "flags": 0, "components": []}
    if guild:
        data["guild_id"] = guild
        data["member"] = {k: v for k, v in member(author).items() if k != "user"}
    if reply_to:
        data["message_reference"] = {"message_id": reply_to, "channel_id": channel, "guild_id": guild}
    return data


def jr(data: Any, status: int = 200) -> web.Response:
    """JSON with the exact content type discord.py checks for."""
    return web.Response(body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json"})


class MockDiscordAPI:
    """A loopback Discord REST API that records every request discord.py sends."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.history: dict[str, list[dict]] = {}
        self._next_id = 10_000
        self.runner: web.AppRunner | None = None
        self.base = ""

    def posted(self, kind: str) -> list[dict]:
        return [body for k, _, body in self.calls if k == kind]

    async def _body(self, request: web.Request) -> dict:
        if request.content_type.startswith("multipart/"):
            out: dict = {"files": {}}
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    out.update(json.loads(await part.text()))
                else:
                    out["files"][part.filename] = await part.read()
            return out
        text = await request.text()
        return json.loads(text) if text else {}

    def _message(self, channel: str, body: dict) -> dict:
        self._next_id += 1
        return message_payload(self._next_id, body.get("content") or "", author=BOT_USER, channel=channel)

    async def handle(self, request: web.Request) -> web.Response:
        path, method = request.path.split("/api/v10", 1)[1], request.method
        body = await self._body(request) if method in ("POST", "PATCH", "PUT") else {}
        parts = path.strip("/").split("/")
        if path == "/users/@me":
            return jr(BOT_USER)
        if path == "/oauth2/applications/@me":
            return jr({"id": "901", "name": "Chorus", "description": "", "icon": None,
                                      "bot_public": True, "bot_require_code_grant": False, "owner": ALICE,
                                      "verify_key": "00", "flags": 0})
        if path == "/users/@me/channels" and method == "POST":  # opening a DM
            self.calls.append(("dm_open", path, body))
            user = next((u for u in (ALICE, BOB) if u["id"] == str(body.get("recipient_id"))), ALICE)
            return jr({"id": DM_CHANNEL, "type": 1, "recipients": [user], "last_message_id": None})
        if parts[0] == "interactions":
            self.calls.append(("callback", path, body))
            return jr({"interaction": {"id": parts[1], "type": 2}})
        if parts[0] == "webhooks":
            self.calls.append(("followup", path, body))
            return jr(self._message(GENERAL, body))
        if parts[0] == "channels" and parts[-1] == "typing":
            return web.Response(status=204)
        if parts[0] == "channels" and parts[-1] == "messages" and method == "POST":
            self.calls.append(("message", path, {**body, "channel": parts[1]}))
            return jr(self._message(parts[1], body))
        if parts[0] == "channels" and parts[-1] == "messages" and method == "GET":
            items = sorted(self.history.get(parts[1], []), key=lambda m: int(m["id"]))
            after = int(request.query.get("after", "0"))
            limit = int(request.query.get("limit", "50"))
            page = [m for m in items if int(m["id"]) > after][:limit]
            self.calls.append(("history", path, dict(request.query)))
            return jr(list(reversed(page)))
        if parts[0] == "channels" and "archived" in parts:
            return jr({"threads": [], "members": [], "has_more": False})
        self.calls.append(("unhandled", f"{method} {path}", body))
        return jr({"message": "Unknown", "code": 0}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}/api/v10"

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()


async def until(cond: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


class Harness:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, analysis_models: Any = None,
                 **adapter_kw: Any) -> None:
        self.tmp_path, self.monkeypatch, self.adapter_kw = tmp_path, monkeypatch, adapter_kw
        self.analysis_models = analysis_models
        self._seq = 0

    async def __aenter__(self) -> Harness:
        self.api = MockDiscordAPI()
        await self.api.start()
        self.monkeypatch.setattr(discord.http.Route, "BASE", self.api.base)
        self.store = Store(self.tmp_path / "chorus.db")
        self.bot = Bot(Settings(), store=self.store, load_models=False, analysis_models=self.analysis_models)
        self.actions = Actions(self.bot)
        self.adapter = DiscordAdapter(self.actions, **{"backfill_on_join": False, **self.adapter_kw})
        await self.adapter.client.login("discord-test-token")
        self.state = self.adapter.client._connection
        self.state.parse_guild_create(GUILD_CREATE)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert [c for c in self.api.calls if c[0] == "unhandled"] == []  # every REST call was understood
        await self.adapter.close()
        self.adapter.fast.shutdown(wait=True)
        self.adapter.slow.shutdown(wait=True)
        await self.api.stop()
        self.store.close()

    def count(self, channel: str = GENERAL, workspace: str = GUILD_ID) -> int:
        sid = self.store.scope_id(ScopeKey("discord", workspace, channel))
        return self.store.count_messages(sid) if sid is not None else 0

    async def say(self, mid: int, content: str, **kw: Any) -> None:
        self.state.parse_message_create(message_payload(mid, content, **kw))

    async def command(self, name: str, options: list[dict] | None = None, *, user: dict = ALICE,
                      perms: str = PLAIN_PERMS, channel: dict | None = None) -> str:
        self._seq += 1
        token = f"itok-{self._seq}"
        ch = channel or {"id": GENERAL, "type": 0, "name": "general", "guild_id": GUILD_ID}
        data: dict[str, Any] = {
            "id": str(5000 + self._seq), "application_id": "901", "type": 2, "token": token, "version": 1,
            "channel_id": ch["id"], "channel": ch, "locale": "en-US", "entitlements": [],
            "app_permissions": PLAIN_PERMS, "authorizing_integration_owners": {}, "attachment_size_limit": 10 << 20,
            "data": {"id": str(7000 + self._seq), "name": name, "type": 1, "options": options or []}}
        if ch.get("guild_id"):
            data.update(guild_id=GUILD_ID, guild_locale="en-US", context=0,
                        member={**member(user), "permissions": perms})
        else:
            data.update(user=user, context=1)
        self.state.parse_interaction_create(data)
        return token

    def answers(self, token: str) -> list[dict]:
        """Everything sent back for one interaction: the callback and any follow-ups."""
        return [b for k, p, b in self.api.calls if k in ("callback", "followup") and f"/{token}" in p]

    @staticmethod
    def text_of(body: dict) -> str:
        return (body.get("data") or body).get("content") or ""

    @staticmethod
    def ephemeral(body: dict) -> bool:
        return bool((body.get("data") or body).get("flags", 0) & 64)


def opt(name: str, value: Any, type_: int = 3) -> dict:
    return {"name": name, "type": type_, "value": value}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------- tests
def test_guild_thread_and_dm_messages_land_in_the_right_scopes(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(1001, "rehearsal moved to Thursday at 8pm in studio B")
            await h.say(1002, "I'll bring the new bass amp", author=BOB, channel=THREAD,
                        attachments=("amp.jpg",), reply_to="1001")
            await h.say(1003, "psst, my password hint is marmalade", channel=DM_CHANNEL, guild=None)
            await h.say(1004, "beep boop rolled a 6", author=OTHER_BOT)
            await h.say(1005, "", attachments=())  # nothing to keep
            await until(lambda: h.count() == 2 and h.count(DM_CHANNEL, "@me") == 1)
            await asyncio.sleep(0.2)
            assert h.count() == 2  # the other bot's message and the empty one were not kept
            thread_msg = h.store.find(ScopeKey("discord", GUILD_ID, GENERAL), "1002")
            assert thread_msg.thread == THREAD and thread_msg.reply_to == "1001"
            assert thread_msg.author_name == "Bob" and "[attachment: amp.jpg]" in thread_msg.text
            dm = next(s for s in h.store.scopes() if s.workspace == "@me")
            assert dm.is_dm and dm.channel == DM_CHANNEL
            # A question asked in the guild never sees the DM scope.
            reply = h.actions.bot.ask(ScopeKey("discord", GUILD_ID, GENERAL), "password hint marmalade")
            assert "marmalade" not in reply.text
    run(go())


def test_own_messages_are_ignored_and_other_bots_are_configurable(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch, ignore_other_bots=False) as h:
            await h.say(1101, "I am the bot talking", author=BOT_USER)
            await h.say(1102, "rolled a 6", author=OTHER_BOT)
            await until(lambda: h.count() == 1)
            await asyncio.sleep(0.2)
            assert h.store.find(ScopeKey("discord", GUILD_ID, GENERAL), "1101") is None
    run(go())


def test_mention_gets_an_answer_in_the_thread_with_source_links(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(1201, "the band rehearsal moved to Thursday at 8pm in studio B", channel=THREAD)
            await h.say(1202, f"<@{BOT_USER['id']}> when is the band rehearsal?", author=BOB, channel=THREAD,
                        mentions=(BOT_USER,))
            sent = await until(lambda: h.api.posted("message"))
            body = sent[0]
            assert body["channel"] == THREAD  # answered where it was asked
            assert str(body["message_reference"]["message_id"]) == "1202"
            assert "rehearsal moved to Thursday" in body["content"]
            assert f"https://discord.com/channels/{GUILD_ID}/{THREAD}/1201" in body["content"]
            assert "1202" not in body["content"].split("Sources:")[1]  # the question is not its own source
            assert h.store.find(ScopeKey("discord", GUILD_ID, GENERAL), "1202").to_bot  # kept, as bot traffic
    run(go())


def test_long_replies_are_split_at_2000_characters(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            h.bot.ask = lambda key, q, asked_in=None: Reply(("word " * 900).strip())  # type: ignore[method-assign]
            await h.say(1301, f"<@{BOT_USER['id']}> tell me everything", mentions=(BOT_USER,))
            sent = await until(lambda: len(h.api.posted("message")) >= 3 and h.api.posted("message"))
            assert all(len(b["content"]) <= 2000 for b in sent)
            assert sum(len(b["content"].split()) for b in sent) == 900
    run(go())


def test_edit_and_delete_events_reach_memory(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            key = ScopeKey("discord", GUILD_ID, GENERAL)
            await h.say(1401, "dinner at the pizza place by the river")
            await h.say(1402, "typo: rehersal on Fridya", channel=THREAD)
            await h.say(1403, "bulk one")
            await h.say(1404, "bulk two")
            await until(lambda: h.count() == 4)
            edit = message_payload(1402, "rehearsal on Friday", channel=THREAD)
            edit["edited_timestamp"] = iso(T0 + 5000)
            h.state.parse_message_update(edit)
            await until(lambda: h.store.find(key, "1402").text == "rehearsal on Friday")
            assert h.store.find(key, "1402").edited
            assert h.bot.whosaid(key, "rehersal on Fridya").citations == []
            h.state.parse_message_delete({"id": "1401", "channel_id": GENERAL, "guild_id": GUILD_ID})
            await until(lambda: h.store.find(key, "1401") is None)
            h.state.parse_message_delete_bulk({"ids": ["1403", "1404"], "channel_id": GENERAL, "guild_id": GUILD_ID})
            await until(lambda: h.count() == 1)
            assert h.bot.whosaid(key, "pizza place by the river").citations == []
            # Deleting a thread forgets what was said in it.
            h.state.parse_thread_delete({"id": THREAD, "guild_id": GUILD_ID, "parent_id": GENERAL, "type": 11})
            await until(lambda: h.count() == 0)
    run(go())


def test_app_commands_answer_through_the_interaction(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(1501, "the end-of-season dinner is pizza by the river")
            await until(lambda: h.count() == 1)
            h.bot.profile = lambda key, person: Reply(f"profile of {person} in {key.channel}")  # type: ignore
            h.bot.timeline = lambda key, topic: Reply(f"timeline of {topic}")  # type: ignore

            t = await h.command("ask", [opt("question", "where is the end-of-season dinner?")])
            ans = await until(lambda: h.answers(t))
            assert "pizza by the river" in h.text_of(ans[0]) and not h.ephemeral(ans[0])

            t = await h.command("whosaid", [opt("phrase", "pizza by the river")])
            assert h.text_of((await until(lambda: h.answers(t)))[0]).startswith("Alice said it first")

            t = await h.command("profile", [opt("person", "@alice")])
            assert h.text_of((await until(lambda: h.answers(t)))[0]) == f"profile of alice in {GENERAL}"

            t = await h.command("timeline", [opt("topic", "dinner")])
            assert h.text_of((await until(lambda: h.answers(t)))[0]) == "timeline of dinner"

            t = await h.command("status")
            ans = (await until(lambda: h.answers(t)))[0]
            assert "Messages remembered: 1" in h.text_of(ans) and h.ephemeral(ans)
    run(go())


def test_admin_commands_check_platform_permissions(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            t = await h.command("pause")  # a plain member
            ans = (await until(lambda: h.answers(t)))[0]
            assert "Only workspace admins" in h.text_of(ans) and h.ephemeral(ans)
            t = await h.command("pause", perms=ADMIN_PERMS)
            assert "Paused" in h.text_of((await until(lambda: h.answers(t)))[0])
            await h.say(1601, "said while paused")
            await asyncio.sleep(0.3)
            assert h.count() == 0
            t = await h.command("resume", perms=ADMIN_PERMS)
            await until(lambda: h.answers(t))
            t = await h.command("channel", [opt("mode", "out")], perms=ADMIN_PERMS)
            assert "opted out" in h.text_of((await until(lambda: h.answers(t)))[0])
            await h.say(1602, "said in an opted-out channel")
            await h.say(1603, "said in its thread", channel=THREAD)
            await asyncio.sleep(0.3)
            assert h.count() == 0
            t = await h.command("channel", [opt("mode", "in")], perms=ADMIN_PERMS)
            await until(lambda: h.answers(t))
            await h.say(1604, "remembered again")
            await until(lambda: h.count() == 1)
    run(go())


def test_forget_me_needs_confirmation_and_export_is_private(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(1701, "alice's secret plan: surprise party on Friday")
            await h.say(1702, "bob agrees to bring the cake", author=BOB)
            await h.say(1703, "alice in a DM", channel=DM_CHANNEL, guild=None)
            await until(lambda: h.count() == 2 and h.count(DM_CHANNEL, "@me") == 1)

            t = await h.command("export")
            ans = (await until(lambda: h.answers(t)))[0]
            assert h.ephemeral(ans)
            (name, blob), = ans["files"].items()
            data = json.loads(blob)
            assert name.endswith(".json") and data["user_id"] == ALICE["id"]
            assert sorted(m["msg_id"] for m in data["messages"]) == ["1701", "1703"]  # only Alice's

            t = await h.command("forget", [opt("what", "me")])
            ans = (await until(lambda: h.answers(t)))[0]
            assert h.ephemeral(ans) and "confirm" in h.text_of(ans)
            assert h.count() == 2  # nothing forgotten yet
            code = h.text_of(ans).split("confirm:")[1].split("`")[0]
            t = await h.command("forget", [opt("what", "me"), opt("confirm", code)])
            ans = (await until(lambda: h.answers(t)))[0]
            assert "Forgot 2 message(s)" in h.text_of(ans)
            assert h.count() == 1 and h.count(DM_CHANNEL, "@me") == 0
            assert h.store.find(ScopeKey("discord", GUILD_ID, GENERAL), "1702") is not None
    run(go())


def test_forget_message_by_link_only_for_author_or_admin(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(1801, "bob's message in the thread", author=BOB, channel=THREAD)
            await until(lambda: h.count() == 1)
            link = f"https://discord.com/channels/{GUILD_ID}/{THREAD}/1801"
            assert parse_link(link) == (THREAD, "1801")
            t = await h.command("forget", [opt("what", "message"), opt("link", link)])  # Alice: not hers
            assert "only make me forget your own" in h.text_of((await until(lambda: h.answers(t)))[0])
            t = await h.command("forget", [opt("what", "message"), opt("link", link)], user=BOB)
            assert "Forgotten" in h.text_of((await until(lambda: h.answers(t)))[0])
            assert h.count() == 0
    run(go())


def test_slow_work_is_deferred_within_three_seconds(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch, defer_after_s=0.2) as h:
            def slow_ask(key, q, asked_in=None):
                time.sleep(1.5)
                return Reply("slow answer")
            h.bot.ask = slow_ask  # type: ignore[method-assign]
            started = time.monotonic()
            t = await h.command("ask", [opt("question", "anything?")])
            first = (await until(lambda: h.answers(t)))[0]
            acked = time.monotonic() - started
            assert first["type"] == 5 and acked < 1.0  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, well inside 3 s
            done = await until(lambda: len(h.answers(t)) >= 2 and h.answers(t))
            assert h.text_of(done[1]) == "slow answer"
            # While that model call runs, messages are still ingested at once.
            await h.say(1901, "ingested while the model is busy")
            await until(lambda: h.count() == 1, timeout=1.0)
    run(go())


def test_commands_in_a_dm_use_the_private_scope(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            await h.say(2001, "my locker code is 4711", channel=DM_CHANNEL, guild=None)
            await h.say(2002, "the locker code for the band room is 1234")
            await until(lambda: h.count(DM_CHANNEL, "@me") == 1 and h.count() == 1)
            dm = {"id": DM_CHANNEL, "type": 1, "recipients": [ALICE]}
            t = await h.command("ask", [opt("question", "what is the locker code?")], channel=dm)
            text = h.text_of((await until(lambda: h.answers(t)))[0])
            assert "4711" in text and "1234" not in text
            assert f"https://discord.com/channels/@me/{DM_CHANNEL}/2001" in text
            t = await h.command("pause", channel=dm)  # admin commands need a server
            assert "Only workspace admins" in h.text_of((await until(lambda: h.answers(t)))[0])
    run(go())


def test_backfill_command_starts_an_import_of_this_channel_for_admins_only(tmp_path, monkeypatch):
    async def go() -> None:
        async with Harness(tmp_path, monkeypatch) as h:
            started: list = []

            async def fake_backfill(guild, **kw):
                started.append((str(guild.id), kw))

            h.adapter.backfill_guild = fake_backfill  # type: ignore[method-assign]
            t = await h.command("backfill")  # a plain member
            assert "Only workspace admins" in h.text_of((await until(lambda: h.answers(t)))[0])
            t = await h.command("backfill", [opt("days", "30")], perms=ADMIN_PERMS)
            ans = (await until(lambda: h.answers(t)))[0]
            assert "Importing the history" in h.text_of(ans) and h.ephemeral(ans)
            await until(lambda: started)
            guild, kw = started[0]
            assert kw["only"] == {str(GENERAL)} and abs(kw["since"] - (time.time() - 30 * 86400)) < 60
    run(go())
