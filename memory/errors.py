"""A small, named error hierarchy.

Boundaries (CLI, event handlers, scheduled jobs) catch ``ChorusError`` and show
``str(err)``; every message says what went wrong and what to do about it.
"""
from __future__ import annotations


class ChorusError(Exception):
    """Base class for every error Chorus raises on purpose."""


class ConfigError(ChorusError):
    """The configuration file or environment is invalid."""


class InputError(ChorusError):
    """User or platform input was rejected (nothing was stored)."""


class StoreError(ChorusError):
    """The SQLite store could not be opened, migrated or written."""


class EmbeddingError(ChorusError):
    """The embedding model is missing or failed."""


class ModelError(ChorusError):
    """The language model is missing, failed to load, or failed to generate."""


class ModelOutputError(ModelError):
    """The model produced output that does not meet its contract.

    ``raw`` keeps the offending text so the operator can read it.
    """

    def __init__(self, reason: str, raw: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


class ModelSchemaError(ModelOutputError):
    """The output parsed as JSON but does not match the schema that was asked for."""


class ModelTruncatedError(ModelOutputError):
    """Generation stopped at ``max_tokens`` before the output was complete."""


class ModelUnavailableError(ModelError):
    """A model server could not be reached, refused the call (429, 5xx) or ran out of retries."""


class ModelTimeoutError(ModelUnavailableError):
    """A model server did not answer within the configured timeout."""


class ToolCallError(ModelOutputError):
    """The model asked for a tool that does not exist, or gave a tool arguments it cannot take."""


class DatasetError(ChorusError):
    """An evaluation or import file does not have the expected format."""


class TimeExpressionError(InputError):
    """A time the user typed (``/catchup since ...``) could not be read, or names the future."""


class AnalysisError(ChorusError):
    """The analysis pass (entities, acts, links) could not read a message, or a model broke its contract."""


class ModelMissing(ChorusError):
    """A shipped model file (reranker, decline, encoder) is missing or unreadable."""
