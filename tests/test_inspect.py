"""``chorus inspect``: the store in Datasette, read-only, checked in headless Chromium.

The store is written the real way (Store ingest, the Writer with a scripted model behind
the LLM protocol), so records, an UPDATE chain, provenance and a writer_runs row with a
rejection are what the bot itself would have stored.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bot.inspect import check_store
from bot.inspect_metadata import HIDDEN_SUFFIXES, describe
from memory.db import connect, sqlite3
from memory.errors import StoreError
from memory.llm.fake import ScriptedLLM
from memory.records import NewRecord, Records
from memory.records_sync import attach
from memory.store import Store
from memory.writer.writer import Writer, WriterConfig
from tests._fakes import store_acts
from tests.conftest import ROOT, msg

pytest.importorskip("datasette", reason="Datasette is not installed (pip install 'chorus[inspect]')")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def _actions(*items: dict) -> str:
    return json.dumps({"actions": list(items)})


def _add(owner: str, content: str, layer: str = "per_speaker_core", utype: str = "fact", source: str | None = None):
    return {"op": "ADD", "owner": owner, "source": source or owner, "layer": layer, "utype": utype,
            "content": content}


def build_store(path: Path) -> Path:
    """Two writer windows: facts about Alice and Bob, a group decision, a rejection, then Bob's update."""
    store = Store(path)
    try:
        store.ingest([
            msg(1, "I just started a new job as a nurse at St Mary's hospital", author="Alice"),
            msg(2, "Congrats! I'm still looking for a job in graphic design", author="Bob"),
            msg(3, "Let's celebrate at the taco place on Friday at 8", author="Alice"),
        ])
        records = Records(store)
        attach(store, records)
        store_acts(store, {"3": "plan"})  # the analysis pass read message 3 as a plan: a GROUP record may rest on it
        writer = Writer(store, ScriptedLLM([
            _actions(_add("Alice", "Alice started a new job as a nurse at St Mary's hospital"),
                     _add("Bob", "Bob is looking for a job in graphic design"),
                     _add("GROUP", "Celebrate at the taco place on Friday at 8", "group_interaction", "decision",
                          source="Alice"),
                     _add("Alice", "Alice owns three racing yachts in Monaco")),
            _actions({"op": "UPDATE", "entry_id": "E2", "content": "Bob got a graphic design job at Pixel Studio"}),
        ]), config=WriterConfig(), records=records, clock=lambda: 2_000_000_000.0)
        writer.run_pending(force=True)
        store.ingest([msg(4, "Update: I got the graphic design job at Pixel Studio " + HOSTILE, author="Bob")])
        writer.run_pending(force=True)
    finally:
        store.close()
    return path


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("inspect") / "chorus.db")


def _ids(path: Path) -> dict[str, int]:
    """Record ids by content prefix, so the assertions do not depend on insertion order."""
    conn = connect(path)
    try:
        rows = conn.execute("SELECT id, content FROM records").fetchall()
    finally:
        conn.close()
    wanted = {"alice_job": "Alice started", "bob_old": "Bob is looking", "bob_new": "Bob got", "group": "Celebrate"}
    return {key: next(i for i, c in rows if c.startswith(prefix)) for key, prefix in wanted.items()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``chorus inspect`` as a user runs it, in a child process."""

    def __init__(self, store: Path, env: dict[str, str] | None = None, token_env: str | None = None) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "bot", "inspect", "--store", str(store), "--port", str(self.port)]
        if token_env:
            cmd += ["--token-env", token_env]
        # Its output goes to a file: an unread pipe fills up and blocks the server mid-request.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=self.log,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise AssertionError(f"chorus inspect exited: {self.log.read()}")
            try:
                urllib.request.urlopen(self.base + "/-/versions.json", timeout=2)
                return
            except urllib.error.HTTPError:
                return  # answering (a token gate says 401)
            except OSError:
                time.sleep(0.2)
        raise AssertionError("chorus inspect did not start within 60 s")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def server(store_path):
    s = Server(store_path)
    yield s
    s.close()


class Rows(HTMLParser):
    """Cell texts of the first results table of a Datasette page, plus link targets per cell."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.links: list[dict[str, list[str]]] = []
        self._col: str | None = None
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append({})
            self.links.append({})
        elif tag == "td" and self._in_body:
            self._col = next(c[4:] for c in (a.get("class") or "").split() if c.startswith("col-"))
            self.rows[-1][self._col] = ""
            self.links[-1][self._col] = []
        elif tag == "a" and self._col:
            self.links[-1][self._col].append(a.get("href", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._col = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._col:
            self.rows[-1][self._col] += data


def chromium(url: str, tmp_path: Path, screenshot: Path | None = None) -> str:
    """The DOM after Chromium has run the page (scripts included), or a screenshot of it."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs Debian's package when run as root)")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        cmd += [f"--screenshot={screenshot}", "--window-size=1280,900", "--hide-scrollbars"]
    else:
        cmd += ["--dump-dom"]
    done = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=120)
    if screenshot is not None:
        assert screenshot.is_file() and screenshot.stat().st_size > 10_000, done.stderr[-2000:]
        return ""
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    return done.stdout


def table(dom: str) -> Rows:
    parser = Rows()
    parser.feed(dom)
    return parser


def test_person_page_lists_records_with_provenance(server, store_path, tmp_path):
    ids = _ids(store_path)
    dom = chromium(f"{server.base}/chorus/person?person=bob&scope=", tmp_path)
    assert "the operator's read-only view" in dom.replace("&#39;", "'")  # every page says whose view it is
    rows = table(dom)
    got = [(r["record"].strip(), r["state"].strip()) for r in rows.rows]
    # Current version first, the superseded one after it, and nothing about Alice.
    new, old = (f"E{ids['bob_new']}", "current"), (f"E{ids['bob_old']}", f"superseded by E{ids['bob_new']}")
    assert new in got and old in got and got.index(new) < got.index(old)
    assert f"E{ids['alice_job']}" not in [g[0] for g in got] and f"E{ids['group']}" not in [g[0] for g in got]
    by_record = {r["record"].strip(): (r, links) for r, links in zip(rows.rows, rows.links)}
    old_row, old_links = by_record[f"E{ids['bob_old']}"]
    assert "looking for a job in graphic design" in old_row["source_messages"]  # the message it rests on
    assert any(h.endswith("/chorus/messages/2") for h in old_links["source_messages"])
    assert old_links["record"] == [f"/chorus/record_chain?record={ids['bob_old']}"]
    # Alice's page: her fact, and the group decision she voiced.
    alice = {r["record"].strip(): r["why"].strip() for r in table(chromium(
        f"{server.base}/chorus/person?person=Alice&scope=console:w:general", tmp_path)).rows}
    assert alice[f"E{ids['alice_job']}"] == "about them" and alice[f"E{ids['group']}"] == "voiced by them"
    chromium(f"{server.base}/chorus/person?person=Bob&scope=", tmp_path, screenshot=ROOT / "out" / "inspect-person.png")


def test_chain_page_shows_old_and_new_versions_in_order(server, store_path, tmp_path):
    ids = _ids(store_path)
    dom = chromium(f"{server.base}/chorus/record_chain?record=E{ids['bob_new']}", tmp_path)
    rows = table(dom).rows
    assert [(r["version"], r["record"].strip()) for r in rows] == [("1", f"E{ids['bob_old']}"),
                                                                   ("2", f"E{ids['bob_new']}")]
    assert "looking for a job" in rows[0]["content"] and rows[0]["state"] == f"superseded by E{ids['bob_new']}"
    assert "Pixel Studio" in rows[1]["content"] and rows[1]["state"] == "current"
    assert "still looking" in rows[0]["source_messages"] and "I got the graphic design job" in rows[1][
        "source_messages"]
    chromium(f"{server.base}/chorus/record_chain?record=E{ids['bob_new']}", tmp_path,
             screenshot=ROOT / "out" / "inspect-chain.png")


def test_hostile_text_and_query_strings_stay_text(server, store_path, tmp_path):
    before = hashlib.sha256(store_path.read_bytes()).hexdigest()
    ids = _ids(store_path)
    dom = chromium(f"{server.base}/chorus/record_chain?record={ids['bob_new']}", tmp_path)
    assert "<title>pwned</title>" not in dom and "<script>document.title" not in dom
    assert "&lt;script&gt;document.title" in dom  # shown as the text the member typed
    evil = urllib.request.quote("<script>document.title='pwned'</script>")
    dom = chromium(f"{server.base}/chorus/person?person={evil}&scope=%27%3B%20DROP%20TABLE%20records%3B--", tmp_path)
    assert "<title>pwned</title>" not in dom and "<script>document.title" not in dom
    for sql in ("DELETE FROM records", "UPDATE records SET content = 'x'", "DROP TABLE messages"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.base}/chorus.json?sql={urllib.request.quote(sql)}", timeout=10)
        assert err.value.code == 400
    assert hashlib.sha256(store_path.read_bytes()).hexdigest() == before  # nothing was written


def test_canned_queries_run_on_the_real_schema(server, store_path):
    def rows(path: str) -> list[dict]:
        with urllib.request.urlopen(f"{server.base}/chorus/{path}&_shape=objects", timeout=20) as resp:
            return json.loads(resp.read())["rows"]

    ids = _ids(store_path)
    rejected = rows("writer_rejections.json?run=&scope=")
    assert len(rejected) == 1 and "not grounded" in rejected[0]["reason"] and "yachts" in rejected[0]["action"]
    timeline = rows("topic_timeline.json?topic=graphic+design&scope=")
    assert [r["record"] for r in timeline] == [ids["bob_old"], ids["bob_new"]]
    status = rows("channel_status.json?_=1")
    assert status[0]["scope"] == "console:w:general" and status[0]["messages"] == 4
    assert status[0]["waiting"] == 0 and status[0]["current_records"] >= 3
    assert rows("waiting_for_writer.json?scope=") == []


def test_metadata_describes_every_table_and_column(tmp_path, embedder):
    store = Store(tmp_path / "fresh.db", embedder=embedder)
    records = Records(store)  # creates the record vector table
    try:
        store.ingest([msg(1, "hello there")])
        with store.write() as conn:  # a record, so the channel's record index exists too
            records.insert(conn, NewRecord(store.scopes()[0].id, "per_speaker_profile", "fact", "u", "u", "says hello",
                                           1.0, 1, 1, 1.0, [1], {}), run_id=None, model="m", vector=None)
        with store.read() as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            shown = [n for n in names if not n.startswith("sqlite_") and not n.endswith(HIDDEN_SUFFIXES)]
            assert {"messages_fts_s1", "messages_vocab_s1", "records_fts_s1"} <= set(shown)
            for name in shown:
                entry = describe(name)
                assert entry is not None, f"table {name} has no description in bot/inspect_metadata.py"
                columns = [r[1] for r in conn.execute(f"PRAGMA table_info([{name}])")]
                missing = [c for c in columns if c not in entry[1]]
                assert not missing, f"{name}: columns without a description: {missing}"
    finally:
        store.close()


def test_bad_stores_are_one_clear_line(tmp_path, store_path):
    def fails(path: Path, *words: str) -> None:
        with pytest.raises(StoreError) as err:
            check_store(path, timeout_s=0.3)
        text = str(err.value)
        assert "\n" not in text and all(w in text for w in words), text

    fails(tmp_path / "nope.db", "no store at")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    fails(junk, "not a readable SQLite store")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    fails(other, "not a Chorus store")
    newer = tmp_path / "newer.db"
    shutil.copy(store_path, newer)
    conn = connect(newer)
    conn.execute("INSERT INTO _migrations(name, applied_at) VALUES ('9999_from_the_future', 0)")
    conn.close()
    fails(newer, "newer Chorus", "9999_from_the_future")
    locked = tmp_path / "locked.db"
    shutil.copy(store_path, locked)
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        fails(locked, "locked by another process")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # Through the command line: exit 1 and one line on stderr.
    done = subprocess.run([sys.executable, "-m", "bot", "inspect", "--store", str(junk)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "chorus:" in done.stderr, done.stderr


def test_operator_token_gates_every_page(store_path):
    server = Server(store_path, env={"CHORUS_TEST_INSPECT_TOKEN": "s3cret-token-value"},
                    token_env="CHORUS_TEST_INSPECT_TOKEN")
    try:
        for url in (server.base + "/chorus/records.json", server.base + "/chorus/records.json?token=wrong"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(url, timeout=10)
            assert err.value.code == 401
        req = urllib.request.Request(server.base + "/chorus/records.json",
                                     headers={"Authorization": "Bearer s3cret-token-value"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["rows"]

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open(server.base + "/chorus/records?token=s3cret-token-value&_size=5", timeout=10)
        assert err.value.code == 302 and err.value.headers["location"] == "/chorus/records?_size=5"
        cookie = err.value.headers["set-cookie"].split(";")[0]
        assert "s3cret" not in cookie
        req = urllib.request.Request(server.base + "/chorus/records.json", headers={"Cookie": cookie})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    finally:
        server.close()
