"""The OpenAI-compatible backend against real HTTP servers on 127.0.0.1.

Two kinds of server:
- llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``)
  with the shipped models, for the writer and the answer path in both prompt forms
  (marked ``model``: it loads real weights);
- a small scripted HTTP server for faults no healthy server produces on demand:
  429 and 5xx answers, timeouts, non-JSON bodies, JSON of the wrong shape, a cut-off
  answer, a server that refuses ``json_schema``, one without ``/completions``.
"""
from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from memory.errors import ModelError, ModelSchemaError, ModelTimeoutError, ModelTruncatedError, ModelUnavailableError
from memory.llm.chat import messages_of
from memory.llm.default_model import default_model_path, smollm2_path
from memory.llm.openai_chat import OpenAIChatLLM
from memory.records import Records
from memory.records_sync import attach
from memory.search import Searcher
from memory.writer.writer import Writer, WriterConfig
from tests.conftest import msg

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}


# ----------------------------------------------------------------------------- scripted server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


Reply = tuple[int, object]  # (status, body: dict for JSON, str for raw text, or a float = sleep seconds first)


class Scripted:
    """An HTTP server answering each POST with the next scripted reply and recording the request bodies."""

    def __init__(self, replies: list[Reply | Callable[[dict], Reply]], owned_by: str = "test") -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict]] = []
        self.owned_by = owned_by
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body).encode() if isinstance(body, (dict, list)) else str(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if isinstance(body, (dict, list)) else "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "m1", "object": "model",
                                                             "owned_by": outer.owned_by}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                reply = outer.replies.pop(0) if outer.replies else (500, {"error": {"message": "script ran out"}})
                if callable(reply):
                    reply = reply(body)
                status, payload = reply
                if isinstance(payload, float):
                    time.sleep(payload)
                    payload = completion_body("late")
                try:
                    self._send(status, payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion_body(text: str, finish: str = "stop") -> dict:
    return {"id": "c1", "object": "text_completion", "created": 0, "model": "m1",
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def chat_body(text: str, finish: str = "stop") -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}


@pytest.fixture
def scripted():
    servers: list[Scripted] = []

    def make(replies, **kw) -> Scripted:
        servers.append(Scripted(replies, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def client(server: Scripted, **kw) -> OpenAIChatLLM:
    kw.setdefault("max_retries", 2)
    return OpenAIChatLLM(server.url, model="m1", **kw)


def test_rate_limit_and_server_errors_are_retried_then_named(scripted):
    ok = scripted([(429, {"error": {"message": "slow down"}}), (503, {"error": {"message": "warming up"}}),
                   (200, completion_body(" Paris"))])
    assert client(ok).complete("Capital of France:", max_tokens=5).text == " Paris"
    assert len(ok.requests) == 3
    down = scripted([(500, {"error": {"message": "boom"}})] * 3)
    with pytest.raises(ModelUnavailableError, match="HTTP 500 after 2 retries: boom"):
        client(down).complete("x", max_tokens=5)
    limited = scripted([(429, {"error": {"message": "quota"}})] * 2)
    with pytest.raises(ModelUnavailableError, match="429"):
        client(limited, max_retries=1).chat(messages_of(None, "hi"), max_tokens=5)


def test_timeout_is_a_named_error(scripted):
    slow = scripted([(200, 2.0)])
    with pytest.raises(ModelTimeoutError, match="did not answer within 0.5s"):
        client(slow, timeout=0.5, max_retries=0).complete("x", max_tokens=5)


def test_unreachable_server(scripted):
    llm = OpenAIChatLLM(f"http://127.0.0.1:{free_port()}/v1", model="m1", max_retries=0, timeout=2)
    with pytest.raises(ModelUnavailableError, match="could not reach"):
        llm.complete("x", max_tokens=5)


def test_non_json_body_and_bad_json_output(scripted):
    html = scripted([(200, "<html>proxy error</html>")])
    with pytest.raises(ModelError, match="not an OpenAI-style answer"):
        client(html).complete("x", max_tokens=5)
    prose = scripted([(200, chat_body("Sure! The city is Paris."))], owned_by="vllm")
    with pytest.raises(ModelError, match="does not parse as JSON") as err:
        client(prose).chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)
    assert err.value.raw == "Sure! The city is Paris."


def test_schema_violation_and_truncation_are_told_apart(scripted):
    server = scripted([(200, chat_body('{"town": "Paris"}')), (200, chat_body('{"city": "Par', "length"))],
                      owned_by="vllm")
    llm = client(server)
    with pytest.raises(ModelSchemaError, match="does not match the schema") as err:
        llm.chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)
    assert err.value.raw == '{"town": "Paris"}'
    with pytest.raises(ModelTruncatedError, match="cut off at max_tokens=20"):
        llm.chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)


def test_structured_mode_falls_back_when_refused_and_logs_it(scripted, caplog):
    def refuse_schema(body: dict) -> Reply:
        if body.get("response_format", {}).get("type") == "json_schema":
            return 400, {"error": {"message": "response_format json_schema is not supported"}}
        return 200, chat_body('{"city": "Paris"}')

    server = scripted([refuse_schema] * 3)
    llm = client(server)
    with caplog.at_level(logging.WARNING, logger="memory.llm.openai_chat"):
        out = llm.chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)
    assert out.structured == "json_object" and json.loads(out.text) == {"city": "Paris"}
    assert "rejected structured mode 'json_schema'" in caplog.text
    assert [b["response_format"]["type"] for _, b in server.requests] == ["json_schema", "json_object"]
    llm.chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)  # remembered: no second refusal
    assert server.requests[-1][1]["response_format"]["type"] == "json_object"
    assert llm.capabilities().structured_chat == "json_object"


def test_server_without_completions_endpoint_is_reported(scripted):
    server = scripted([(404, {"error": {"message": "Not Found"}})])
    llm = client(server)
    with pytest.raises(ModelError, match='llm.prompt_form = "chat"'):
        llm.complete("x", max_tokens=5)
    caps = llm.capabilities()
    assert not caps.completion and caps.preferred == "chat"


def test_key_comes_from_the_environment(scripted, monkeypatch):
    seen: list[str] = []
    server = scripted([(200, completion_body("ok"))])
    monkeypatch.setenv("CHORUS_TEST_KEY", "sk-test-123")
    llm = OpenAIChatLLM(server.url, model="m1", api_key_env="CHORUS_TEST_KEY")
    original = server.server.RequestHandlerClass.do_POST

    def spy(handler) -> None:
        seen.append(handler.headers.get("Authorization", ""))
        original(handler)

    server.server.RequestHandlerClass.do_POST = spy
    llm.complete("x", max_tokens=2)
    assert seen == ["Bearer sk-test-123"]


def test_writer_commits_nothing_from_a_failing_server(scripted, store):
    store.ingest([msg(1, "I adopted a cat called Miso", author="Ann"), msg(2, "Cute!", author="Ben")])
    server = scripted([(200, completion_body("I think Ann has a cat."))] + [(503, {"error": {"message": "down"}})] * 3)
    llm = client(server, prompt_form="completion")
    records = Records(store)
    attach(store, records)
    writer = Writer(store, llm, config=WriterConfig(cues=False), records=records, clock=lambda: 2_000_000_000.0)
    [window] = writer.pending(force=True)
    first = writer.run_window(window)
    second = writer.run_window(window)
    assert (first.status, second.status) == ("failed", "failed")
    assert "JSON" in first.error and "503" in second.error
    assert records.count() == 0


# ----------------------------------------------------------------------------- llama-cpp-python's server

def start_server(model_path: str, n_ctx: int = 4096) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")  # idle llama.cpp threads must not spin on a shared box
    log = tempfile.TemporaryFile()  # not a pipe: llama.cpp's load log would fill it and block the server
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "2"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"llama_cpp.server exited: {log.read().decode(errors='replace')[-800:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not come up within 90 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serving(model_path: Callable[[], Path]):
    """Serve one shipped model for a module's tests; yields the server's URL."""
    pytest.importorskip("llama_cpp.server.app", reason="the llama-cpp-python [server] extra is not installed")
    proc, url = start_server(str(model_path()))
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def smollm2_server():
    yield from serving(smollm2_path)


@pytest.fixture(scope="module")
def gemma_server():
    yield from serving(default_model_path)


def band_chat(store) -> int:
    store.ingest([
        msg(1, "I started learning the cello last month", author="Ann"),
        msg(2, "Nice, I play the trumpet in a brass band", author="Ben"),
        msg(3, "Let's all meet for the concert on Saturday at 7", author="Ann"),
    ])
    return store.scopes()[0].id


def run_window(store, llm, *, extractive: bool) -> tuple:
    records = Records(store)
    attach(store, records)
    writer = Writer(store, llm, config=WriterConfig(extractive=extractive, max_new_tokens=300, cues=False),
                    records=records, clock=lambda: 2_000_000_000.0)
    [result] = writer.run_pending(force=True)
    return result, records


def answer_once(store, llm, sid: int):
    from memory.query.answer import Answerer

    return Answerer(store, Searcher(store), Records(store), llm, policy="model").answer(
        [sid], "What does Ben play in the brass band?")


@pytest.mark.model
@pytest.mark.parametrize("form", ["chat", "completion"])
def test_smollm2_server_writer_and_answer_in_both_forms(smollm2_server, store, form):
    llm = OpenAIChatLLM(smollm2_server, prompt_form=form, timeout=180)
    assert llm.capabilities().server == "llama-cpp-python"
    sid = band_chat(store)
    result, records = run_window(store, llm, extractive=True)
    assert result.status == "committed", result.error
    assert result.completion.form == form
    assert result.completion.structured == ("json_object" if form == "chat" else "grammar")
    with store.read() as conn:
        raw = conn.execute("SELECT raw_output FROM writer_runs").fetchone()[0]
    assert isinstance(json.loads(raw)["actions"], list)
    ans = answer_once(store, llm, sid)
    assert ans.text and ans.model_used and ans.cited_messages
    assert all(m.scope_id == sid for m in ans.cited_messages)
    assert not ans.generated or ans.support.ok  # a model sentence is shown only when its check passed


@pytest.mark.model
def test_shipped_gemma_through_the_server_in_completion_form(gemma_server, store):
    llm = OpenAIChatLLM(gemma_server, prompt_form="completion", timeout=180)
    sid = band_chat(store)
    result, records = run_window(store, llm, extractive=True)
    assert result.status == "committed", result.error
    assert result.completion.form == "completion" and result.completion.structured == "grammar"
    ans = answer_once(store, llm, sid)
    assert ans.text and ans.model_used


@pytest.mark.parametrize("owner, chat_field, completion_fields", [
    ("llamacpp", {"type": "json_schema"}, {"json_schema", "response_format"}),
    ("me", {"type": "json_object"}, {"grammar"}),
    ("vllm", {"type": "json_schema"}, {"json_schema", "response_format"}),
])
def test_each_server_kind_gets_the_structured_fields_it_reads(scripted, owner, chat_field, completion_fields):
    pytest.importorskip("llama_cpp", reason="grammar mode converts the schema with llama-cpp-python")
    server = scripted([(200, chat_body('{"city": "Rome"}')), (200, completion_body('{"city": "Rome"}'))],
                      owned_by=owner)
    llm = client(server)
    assert llm.chat(messages_of(None, "city?"), max_tokens=9, json_schema=SCHEMA).text == '{"city": "Rome"}'
    llm.complete("city:", max_tokens=9, json_schema=SCHEMA)
    (_, chat), (_, completion) = server.requests
    assert {k: v for k, v in chat["response_format"].items() if k == "type"} == chat_field
    assert completion_fields <= set(completion) and "messages" in chat and "prompt" in completion
    if "grammar" in completion_fields:
        assert "root" in completion["grammar"]


def test_doctor_reports_each_path_and_fails_when_one_does(scripted, tmp_path, capsys):
    from bot.cli import main

    def answer(body: dict) -> Reply:
        wants_json = "response_format" in body or "json_schema" in body or "grammar" in body
        text = '{"city": "Paris"}' if wants_json else " Paris"
        return 200, chat_body(text) if "messages" in body else completion_body(text)

    server = scripted([answer] * 4, owned_by="vllm")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[llm]\nbackend = "openai"\nbase_url = "{server.url}"\nmax_retries = 0\n')
    assert main(["--config", str(cfg), "doctor"]) == 0
    out = capsys.readouterr().out
    assert "server=vllm" in out and "all paths that exist work" in out
    for path in ("completion ", "completion+json", "chat ", "chat+json"):
        assert any(line.strip().startswith(path.strip()) and " ok " in line for line in out.splitlines()), path
    broken = scripted([answer, (200, completion_body("not json")), answer, answer], owned_by="vllm")
    cfg.write_text(f'[llm]\nbackend = "openai"\nbase_url = "{broken.url}"\nmax_retries = 0\n')
    assert main(["--config", str(cfg), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "completion+json  FAIL" in out and "1 path(s) failed" in out
