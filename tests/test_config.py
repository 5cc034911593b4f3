"""Configuration: every field documented in config.example.toml, bad files rejected clearly."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.config import Settings, example_toml, load_settings
from memory.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_example_file_matches_model():
    assert (ROOT / "config.example.toml").read_text("utf-8") == example_toml(), \
        "config.example.toml is stale: run `chorus config-example > config.example.toml`"


def test_every_field_present_and_described():
    data = tomllib.loads((ROOT / "config.example.toml").read_text("utf-8"))
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert name in data, name
        sub = getattr(Settings(), name)
        if hasattr(type(sub), "model_fields"):
            for subname, subfield in type(sub).model_fields.items():
                assert subfield.description, f"{name}.{subname}"
                assert subname in data[name], f"{name}.{subname} missing from config.example.toml"
    assert Settings.model_validate(data) == Settings()


def test_bad_config_rejected(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[store]\nidle_gap_minutes = -5\nunknown = 1\n")
    with pytest.raises(ConfigError, match="idle_gap_minutes"):
        load_settings(bad)
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")


def test_secrets_only_from_environment(monkeypatch):
    s = Settings()
    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="DISCORD_TOKEN"):
        s.secret(s.discord.token_env)
    monkeypatch.setenv("DISCORD_TOKEN", "abc")
    assert s.secret(s.discord.token_env) == "abc"
