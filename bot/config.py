"""One settings model, loaded from TOML; secrets come only from environment variables.

Every field carries a description; ``config.example.toml`` is generated from this
model (``chorus config-example``) and a test keeps the two in step.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from platformdirs import user_data_path
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from memory.errors import ConfigError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreSettings(Section):
    path: str = Field("data/chorus.db", description="SQLite file that holds all memory (created if missing). A "
                      "relative path is taken from the folder of the config file; with no config file, from the "
                      "per-user data folder (on Linux ~/.local/share/chorus). `chorus status` and the console's "
                      "first line say which file is in use; `--db` overrides it for one command.")
    idle_gap_minutes: float = Field(30.0, gt=0, description="A silence longer than this starts a new session.")


class EmbeddingSettings(Section):
    backend: Literal["minilm-onnx", "minilm", "minilm-gguf", "gguf"] = Field(
        "minilm-onnx", description="'minilm-onnx': all-MiniLM-L6-v2 shipped on PyPI, built once into an ONNX graph "
        "and run by onnxruntime (fastest on CPU); 'minilm': the same model in plain numpy; 'minilm-gguf': the same "
        "model converted once to GGUF and run by llama.cpp (GPU offload possible); 'gguf': any GGUF embedding "
        "model run by llama.cpp. Switching between backends whose vectors differ needs `chorus reindex`.")
    dtype: str = Field("", description="Weight type. Empty (the default) means the backend's own default: 'int8' "
                       "for 'minilm-onnx', 'f32' for 'minilm-gguf'. Otherwise 'int8' or 'fp32' for 'minilm-onnx'; "
                       "'f32', 'f16' or 'q8_0' for 'minilm-gguf'; ignored by 'minilm' and 'gguf'. 'fp32', 'f32' and "
                       "'f16' give numpy's vectors.")
    model_path: str = Field("", description="Backend 'gguf': the GGUF embedding model file (required). 'minilm', "
                            "'minilm-onnx' and 'minilm-gguf': an all-MiniLM-L6-v2 folder to use instead of the "
                            "installed PyPI package (empty: the package).")
    n_gpu_layers: int = Field(0, ge=-1, description="Layers to offload to a GPU for the GGUF embedder (-1 = all).")
    n_threads: int = Field(0, ge=0, description="CPU threads for the ONNX or GGUF embedder (0 = the backend default).")


class LLMSettings(Section):
    backend: Literal["llama", "openai"] = Field(
        "llama", description="'llama': a local GGUF through llama-cpp-python; 'openai': an OpenAI-compatible "
        "HTTP server (llama.cpp server, vLLM, Ollama).")
    model_path: str = Field("", description="GGUF model file; empty uses the embedded default shipped on PyPI "
                            "(Gemma 3 270M, Q4_K_M).")
    n_ctx: int = Field(4096, ge=512, description="Context window in tokens.")
    n_gpu_layers: int = Field(0, ge=-1, description="Layers offloaded to a GPU (-1 = all; needs a CUDA build, "
                              "see README).")
    n_threads: int = Field(0, ge=0, description="CPU threads for generation (0 = llama.cpp default).")
    seed: int = Field(0, description="Sampling seed, for repeatable output.")
    base_url: str = Field("", description="Base URL of the OpenAI-compatible server (backend 'openai').")
    model: str = Field("", description="Model name sent to the OpenAI-compatible server.")
    api_key_env: str = Field("", description="Name of the environment variable holding that server's API key.")
    prompt_form: Literal["auto", "chat", "completion"] = Field(
        "auto", description="How prompts are sent. 'chat': system/user turns through the model's chat template "
        "(instruct models; servers' /v1/chat/completions); 'completion': one raw prompt (base models; "
        "/v1/completions). 'auto': chat when the model has a chat template (servers: always), raw for the shipped "
        "base model.")
    structured: Literal["auto", "json_schema", "json_object", "grammar", "none"] = Field(
        "auto", description="How a server is asked for JSON that fits a schema (backend 'openai'). 'auto' picks "
        "what the answering server is known to honour and falls back when it refuses; the output is always "
        "checked against the schema.")
    timeout: float = Field(60.0, gt=0, description="Seconds to wait for one server response (backend 'openai').")
    max_retries: int = Field(2, ge=0, le=10, description="Retries after a 429, a 5xx or a dropped connection, "
                             "with backoff (backend 'openai').")


class WriterSettings(Section):
    enabled: bool = Field(True, description="Run the memory writer on a schedule.")
    interval_seconds: int = Field(60, ge=5, description="How often pending writer windows are looked for.")
    window_messages: int = Field(25, ge=1, le=200, description="Most new messages in one writer window.")
    max_failures: int = Field(3, ge=1, description="A window failing this many times is quarantined.")
    grounding_threshold: float = Field(0.5, ge=0, le=1, description="Least share of a record's content words "
                                       "that must appear in one source message for it to be accepted.")
    max_new_tokens: int = Field(768, ge=64, description="Generation budget for one window's actions.")
    heads_token_budget: int = Field(800, ge=0, description="Tokens of existing memory shown to the writer.")
    content_mode: Literal["auto", "extractive", "abstractive"] = Field(
        "auto", description="'extractive': a record quotes the message it comes from (the model decides what "
        "matters, whom it concerns and how to file it); 'abstractive': the model words each record itself. "
        "'auto' is extractive for the small embedded default model and abstractive for a configured model.")


class AnalysisSettings(Section):
    enabled: bool = Field(True, description="Analyse every message in the background after it is stored (its "
                          "named entities, what it does for the group, and the earlier decision, plan or question "
                          "it changes, answers or confirms) and keep the group's decisions, plans, rules and tasks "
                          "as memory records with their history. Replies, catch-up and /timeline read it; no "
                          "language model is used.")
    encoder: bool = Field(True, description="Read each message's act and links with the fine-tuned encoder's heads "
                          "as well as the linear models, when the shipped encoder carries them (`chorus train "
                          "heads` adds them; encoder-v2 does not, so the linear models read alone).")


class PersonaSettings(Section):
    name: str = Field("Chorus", description="The bot's name, as it introduces itself.")
    description: str = Field("the group's attentive, even-handed memory keeper",
                             description="Who the persona is, in a phrase.")
    voice: str = Field("warm, brief and plain-spoken", description="How the persona talks.")
    cares_about: str = Field("keeping everyone's views straight and remembering what the group decided",
                             description="What the persona pays attention to (drives persona insights).")
    insights: bool = Field(True, description="Write persona-conditioned insights from committed facts.")


class SearchSettings(Section):
    recall_pool: int = Field(160, ge=1, le=500, description="Candidates each retriever contributes before fusion "
                             "(160 was chosen leave-one-dataset-out; docs/retrieval.md).")
    top_k: int = Field(10, ge=1, le=100, description="Messages kept after fusion.")
    neighbours: int = Field(1, ge=0, le=5, description="Turns added before and after each hit for context.")


class AnswerSettings(Section):
    max_chars: int = Field(1800, ge=200, description="Longest answer posted to chat; longer ones are cut.")
    evidence_token_budget: int = Field(1500, ge=200, description="Token budget of the evidence pack.")
    max_new_tokens: int = Field(48, ge=16,
                                description="Generation budget of the model's one-sentence answer in tokens.")
    policy: Literal["auto", "evidence", "model"] = Field(
        "auto", description="How replies are written. 'evidence': the best messages quoted with a short lead, no "
        "model call. 'model': the model may write a one-sentence lead over the quoted messages, shown only when a "
        "deterministic check finds its names, numbers and words in the messages it cites. 'auto': evidence for the "
        "shipped 270M model (its sentences rarely pass the check), model for a configured one.")
    decline_below: float | Literal["trained"] = Field(
        "trained", description="When to decline (\"the chat doesn't say ...\"): the reader model gives each of the "
        "best candidates the probability that it answers the question, and the reply declines when none reaches this "
        "threshold (0 to 1). 'trained': the threshold chosen by `chorus train answer`, the highest that kept false "
        "declines at or under 5% on each training source's held-apart chats. Lower it to decline less often.")
    reader_model: bool = Field(True, description="Judge the best candidates with the fine-tuned encoder (which "
                               "message answers, its words, whether any does; about 40-90 ms a question on two "
                               "cores). Off: the reranker's order and its feature decline, which rarely declines "
                               "a question whose topic the chat discusses.")
    @field_validator("decline_below")
    @classmethod
    def _probability(cls, v: float | str) -> float | str:
        if not isinstance(v, str) and not 0.0 <= v <= 1.0:
            raise ValueError("decline_below is a probability from 0 to 1, or 'trained'")
        return v

    reader: bool = Field(False, description="Let a capable model look things up with typed tools (search, exact "
                         "phrase, current state, dates) for a few rounds before it answers (EGMemory's adaptive "
                         "reader). Off for the shipped 270M model, which cannot drive tools.")
    reader_rounds: int = Field(4, ge=1, le=10, description="Most tool rounds of the reader before it must answer.")
    reader_token_budget: int = Field(6000, ge=500, description="Prompt plus completion tokens the reader may spend "
                                     "on one question, over all its rounds.")


class ScopeSettings(Section):
    links: list[list[str]] = Field(
        default_factory=list, description="Groups of scopes that may see each other's memory, each scope "
        "written 'platform:workspace:channel'. Empty: every channel sees only itself.")
    default_opt_in: bool = Field(True, description="Whether new channels are remembered until an admin opts "
                                 "them out.")


class CatchupSettings(Section):
    timezone: str = Field("UTC", description="The workspace time zone (an IANA name such as 'Europe/Berlin'): "
                          "`/catchup since Monday` and the schedules below are read in it.")
    workspace_timezones: list[list[str]] = Field(
        default_factory=list, description="Per-workspace time zones overriding `timezone`, each "
        "['platform:workspace', 'Area/City'].")
    schedules: list[list[str]] = Field(
        default_factory=list, description="Scheduled digests, each ['platform:workspace:channel', 'crontab'] "
        "(e.g. ['slack:T0123:C0456', '0 9 * * mon-fri'] for weekdays at 9:00 in the workspace time zone). "
        "Members who ran `/catchup subscribe` in that channel get a direct message; members with nothing new "
        "are skipped.")
    max_lines: int = Field(12, ge=1, le=50, description="Most lines of a digest before it says how many more "
                           "there are (`/catchup all` shows them all).")
    retry_minutes: float = Field(5.0, gt=0, description="How often scheduled digests whose delivery failed are "
                                 "retried.")
    max_attempts: int = Field(5, ge=1, description="Delivery attempts of one scheduled digest before it is given up "
                              "(logged as an error).")
    missed_grace_hours: float = Field(12.0, ge=0, description="At start, a scheduled run missed while Chorus was "
                                      "down this many hours ago or less is run then (a later one covers the rest).")

    @field_validator("schedules")
    @classmethod
    def _check_schedules(cls, value: list[list[str]]) -> list[list[str]]:
        from apscheduler.triggers.cron import CronTrigger

        for entry in value:
            if len(entry) != 2 or len(entry[0].split(":")) != 3:
                raise ValueError(f"{entry!r} should be ['platform:workspace:channel', 'crontab']")
            try:
                CronTrigger.from_crontab(entry[1])
            except ValueError as exc:
                raise ValueError(f"{entry[1]!r} is not a crontab line (minute hour day month weekday): {exc}") \
                    from exc
        return value

    @field_validator("workspace_timezones")
    @classmethod
    def _check_zones(cls, value: list[list[str]]) -> list[list[str]]:
        for entry in value:
            if len(entry) != 2 or len(entry[0].split(":")) != 2:
                raise ValueError(f"{entry!r} should be ['platform:workspace', 'Area/City']")
        return value

    def zone_name(self, platform: str, workspace: str) -> str:
        """The time zone of one workspace."""
        return next((z for w, z in self.workspace_timezones if w == f"{platform}:{workspace}"), self.timezone)


class ConsoleSettings(Section):
    bot_name: str = Field("chorus", description="Name to @mention in the console chat.")
    demo: bool = Field(True, description="Preload the short demo conversation into an empty console channel.")
    log_file: str = Field("", description="Where the console writes its logs (the scheduler's, the writer's and "
                          "llama.cpp's own output), so they never land in the chat. Empty: beside the store, "
                          "as <store>.log. A relative path is taken from the folder of the config file.")


class DiscordSettings(Section):
    enabled: bool = Field(False, description="Connect to Discord.")
    token_env: str = Field("DISCORD_TOKEN", description="Environment variable holding the bot token.")
    ignore_other_bots: bool = Field(True, description="Do not remember messages from other bots.")
    backfill_on_join: bool = Field(False, description="Import every readable channel's whole history (and "
                                   "threads) as soon as the bot is added to a server, without anyone asking. Off: "
                                   "history is imported only when an admin runs `/backfill` or `chorus backfill`.")


class SlackSettings(Section):
    enabled: bool = Field(False, description="Connect to Slack.")
    mode: Literal["socket", "http"] = Field("socket", description="'socket' (Socket Mode) or 'http' (Events API).")
    bot_token_env: str = Field("SLACK_BOT_TOKEN", description="Environment variable holding the xoxb- bot token.")
    app_token_env: str = Field("SLACK_APP_TOKEN", description="Environment variable holding the xapp- token "
                               "(Socket Mode).")
    signing_secret_env: str = Field("SLACK_SIGNING_SECRET", description="Environment variable holding the "
                                    "signing secret (HTTP mode).")
    port: int = Field(3000, ge=1, le=65535, description="Port for HTTP mode.")
    command: str = Field("/chorus", description="The one slash command; its first word picks the action.")
    ignore_other_bots: bool = Field(True, description="Do not remember messages from other bots.")
    backfill_on_join: bool = Field(False, description="Import a channel's whole history as soon as the bot is "
                                   "added to it, without anyone asking. Off: history is imported only when an "
                                   "admin runs `/chorus backfill` or `chorus backfill`.")


class Settings(Section):
    store: StoreSettings = Field(default_factory=StoreSettings, description="Where memory is kept.")
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="Sentence embeddings.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="The local language model.")
    writer: WriterSettings = Field(default_factory=WriterSettings, description="The memory writer.")
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings, description="The analysis pass at "
                                       "ingest (acts, links and the group state).")
    persona: PersonaSettings = Field(default_factory=PersonaSettings, description="The bot's persona.")
    search: SearchSettings = Field(default_factory=SearchSettings, description="Track 1 retrieval.")
    answer: AnswerSettings = Field(default_factory=AnswerSettings, description="Answers in chat.")
    scopes: ScopeSettings = Field(default_factory=ScopeSettings, description="Memory scopes.")
    catchup: CatchupSettings = Field(default_factory=CatchupSettings, description="Catch-up digests "
                                     "(`/catchup`), on demand and on a schedule.")
    console: ConsoleSettings = Field(default_factory=ConsoleSettings, description="The terminal group chat.")
    discord: DiscordSettings = Field(default_factory=DiscordSettings, description="Discord adapter.")
    slack: SlackSettings = Field(default_factory=SlackSettings, description="Slack adapter.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Logging level.")
    # Where these settings came from: the config file, or '' for the built-in defaults (`store_line`).
    _config_file: str = PrivateAttr("")
    _store_override: bool = PrivateAttr(False)

    def use_store(self, path: str) -> None:
        """Point this run at another store file (the command line's ``--db``)."""
        self.store.path = path
        self._store_override = True

    def store_line(self) -> str:
        """Which store file is in use and why, for `chorus status` and the console's first line."""
        if self._store_override:
            why = "given with --db"
        elif self._config_file:
            why = f"store.path in {self._config_file}"
        else:
            why = "no config file, so the per-user data folder"
        return f"Store: {Path(self.store.path).expanduser()} ({why})"

    def secret(self, env_name: str) -> str:
        """Read a secret from the environment; raise a clear error naming the variable."""
        if not env_name:
            raise ConfigError("no environment variable is configured for this secret")
        value = os.environ.get(env_name, "")
        if not value:
            raise ConfigError(f"the environment variable {env_name} is not set; export it before starting")
        return value


def data_folder() -> Path:
    """The per-user data folder a store lives in when no config file says otherwise (XDG on Linux)."""
    return user_data_path("chorus", appauthor=False)


def resolve_paths(settings: Settings, base: Path) -> Settings:
    """Relative file settings taken from ``base``, so the store does not depend on the working directory."""
    for section, name in (("store", "path"), ("console", "log_file")):
        part = getattr(settings, section)
        value = getattr(part, name)
        if value and value != ":memory:" and not Path(value).expanduser().is_absolute():
            setattr(part, name, str(base / value))
    return settings


def load_settings(path: str | Path | None = None) -> Settings:
    """Settings from ``path`` (or ``$CHORUS_CONFIG``, or ./config.toml if present, else defaults).

    Relative paths in a config file are taken from the file's folder; the defaults' from the
    per-user data folder (`data_folder`).
    """
    chosen = path or os.environ.get("CHORUS_CONFIG")
    if chosen is None and Path("config.toml").exists():
        chosen = "config.toml"
    if chosen is None:
        return resolve_paths(Settings(), data_folder())
    file = Path(chosen)
    if not file.exists():
        raise ConfigError(f"config file {file} does not exist; copy config.example.toml to start one")
    try:
        data = tomllib.loads(file.read_text("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"config file {file} has invalid settings: {problems}") from exc
    folder = file.expanduser().resolve().parent
    settings._config_file = str(file.expanduser().resolve())
    return resolve_paths(settings, folder)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def example_toml() -> str:
    """The documented example configuration, generated from the model."""
    lines = ["# Chorus configuration. Every setting is shown with its default.",
             "# Secrets are never written here: each *_env setting names an environment variable.", ""]
    defaults = Settings()
    for name, field in Settings.model_fields.items():
        value = getattr(defaults, name)
        if not isinstance(value, BaseModel):
            lines += [f"# {field.description}", f"{name} = {_toml_value(value)}", ""]
    for name, field in Settings.model_fields.items():
        value = getattr(defaults, name)
        if isinstance(value, BaseModel):
            lines += [f"# {field.description}", f"[{name}]"]
            for sub, subfield in type(value).model_fields.items():
                lines += [f"# {subfield.description}", f"{sub} = {_toml_value(getattr(value, sub))}"]
            lines.append("")
    return "\n".join(lines)
