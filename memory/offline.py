"""Nothing phones home: every dependency's telemetry and hub access is switched off before any of them loads.

``memory/__init__`` calls ``opt_out()`` first thing, and every path into Chorus (the CLI, the bot, the
adapters, tests, benchmarks, evaluation) imports the engine before it can reach onnxruntime or
huggingface_hub, so the variables are set before those libraries read them. They are set, not defaulted:
an environment that turned telemetry on does not turn it on for Chorus. README "Privacy" lists what each
dependency does and which of these switches covers it.
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping

OPT_OUTS: dict[str, str] = {
    # onnxruntime 1.29+ records a device id and session events on Linux and uploads them when online; the
    # variable must be set before the runtime initialises (an API call made later misses the start event).
    "ORT_DISABLE_TELEMETRY": "1",
    # huggingface_hub (a dependency of tokenizers): no hub requests and no telemetry; models load from disk.
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    # transformers, should anything load it: read local files only.
    "TRANSFORMERS_OFFLINE": "1",
    # OpenTelemetry (FastAPI 0.13x ships hooks for it; the llama-cpp-python test server uses FastAPI): no SDK,
    # so no exporter can be configured from the environment.
    "OTEL_SDK_DISABLED": "true",
    # The cross-tool convention some libraries honour.
    "DO_NOT_TRACK": "1",
}


def opt_out(env: MutableMapping[str, str] = os.environ) -> None:
    """Set every opt-out variable in ``env`` (the process environment by default)."""
    env.update(OPT_OUTS)
