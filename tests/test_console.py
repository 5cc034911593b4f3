"""The console adapter driven through real stdin/stdout of a `chorus console` process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_console(tmp_path: Path, script: str, *extra: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "chorus.db"}"\n'
                      f'[llm]\nmodel_path = "{tmp_path / "no-model.gguf"}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bot", "--config", str(config), "console", *extra],
                          input=script, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)


def test_console_session_remembers_and_answers_with_citations(tmp_path):
    script = "\n".join([
        "alice: the band rehearsal moved to Thursday at 8pm in studio B",
        "bob: cool, I'll bring the new bass amp",
        "carol: @chorus when is the band rehearsal?",
        "/whosaid new bass amp",
        "/status",
        "/channel random",
        "@chorus when is the band rehearsal?",
        "/quit",
    ]) + "\n"
    out = run_console(tmp_path, script, "--no-demo")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    first_answer = text.split("chorus> ")[1]
    assert "[1] alice" in first_answer and "rehearsal moved to Thursday" in first_answer
    whosaid = text.split("chorus> ")[2]
    assert whosaid.startswith("bob said it first")
    # The question is kept too, but counted apart from the chat; the writer's backlog and the reply mode show.
    assert "Messages remembered: 2 from 2 member(s) in 1 channel(s), plus 1 question(s) to me." in text
    assert "2 message(s) not yet read by the writer" in text and "Replies: quoted messages" in text
    # Another channel is another memory: nothing from #general leaks into #random.
    last = text.split("chorus> ")[4]
    assert "alice" not in last and "don't have any messages from this channel" in last.lower()
    # The model file is missing: the reason reaches the log file, never the chat, and the chat keeps working.
    log = (tmp_path / "chorus.log").read_text("utf-8")
    assert "no-model.gguf" in log and "no-model.gguf" not in text and "WARNING" not in text


def test_console_demo_preloaded(tmp_path):
    """The demo chat is there on a first start and answers from its messages, cited. (Which message leads for the
    dinner question is the reader's: tests/test_answer_model.py.)"""
    out = run_console(tmp_path, "/ask when is the end-of-season dinner?\n/quit\n")
    assert out.returncode == 0, out.stderr
    assert "loaded a 14-message demo conversation" in out.stdout
    assert "Maya (2025-03-03 18:11): “Decision: pizza by the river" in out.stdout, out.stdout
