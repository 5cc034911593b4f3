"""One place that turns a model's text into checked JSON, with a named error for each way it fails.

Local llama.cpp output is grammar-constrained, so it always matches; a server in
JSON mode (or one that ignored the schema) may not. Every backend therefore runs
its output through ``parse_checked`` so callers see the same three failures:
cut off (``ModelTruncatedError``), not JSON (``ModelOutputError``), JSON of the
wrong shape (``ModelSchemaError``). Each keeps the raw text for the audit log.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from ..errors import ModelOutputError, ModelSchemaError, ModelTruncatedError


@functools.lru_cache(maxsize=64)
def _validator(schema_key: str) -> Any:
    import jsonschema

    schema = json.loads(schema_key)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(value: Any, schema: dict, limit: int = 3) -> list[str]:
    """Human-readable reasons ``value`` breaks ``schema`` (empty when it fits)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    problems = []
    for err in validator.iter_errors(value):
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        problems.append(f"{where}: {err.message[:160]}")
        if len(problems) >= limit:
            break
    return problems


def parse_checked(text: str, schema: dict | None, *, finish_reason: str, name: str,
                  max_tokens: int) -> Any:
    """Parse ``text`` as JSON and check it against ``schema``; raise a named ModelOutputError otherwise."""
    try:
        value = json.loads(text, strict=False)  # raw newlines inside strings are tolerated
    except ValueError as err:
        if finish_reason == "length":
            raise ModelTruncatedError(
                f"{name}: JSON output was cut off at max_tokens={max_tokens}; raise max_tokens or tighten "
                f"the schema", raw=text) from None
        raise ModelOutputError(f"{name}: output does not parse as JSON ({err})", raw=text) from None
    if schema is not None:
        problems = schema_errors(value, schema)
        if problems:
            raise ModelSchemaError(f"{name}: output does not match the schema: {'; '.join(problems)}", raw=text)
    return value
