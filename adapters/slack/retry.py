"""slack_sdk's own retry handlers on the adapter's WebClient: rate limits, server errors, dropped connections.

The library decides when a call is retried and re-issues it; we only choose the limits
and route the waiting through the adapter's ``sleep`` (tests pass a recorder, so a
Retry-After of minutes costs them nothing). A 429 waits exactly as long as Slack's
Retry-After says, and says so in the log.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

log = logging.getLogger(__name__)

RATE_LIMIT_RETRIES = 5
SERVER_ERROR_RETRIES = 2
CONNECTION_RETRIES = 2


class _WaitThrough:
    """Mixin for a slack_sdk handler: wait through an injected ``sleep`` instead of ``time.sleep``."""

    interval_calculator: Any

    def __init__(self, sleep: Callable[[float], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        self.sleep = sleep

    def wait_s(self, state: RetryState, request: HttpRequest, response: HttpResponse | None) -> float:
        return float(self.interval_calculator.calculate_sleep_duration(state.current_attempt))

    def prepare_for_next_attempt(self, *, state: RetryState, request: HttpRequest,
                                 response: HttpResponse | None = None, error: Exception | None = None) -> None:
        state.next_attempt_requested = True
        self.sleep(self.wait_s(state, request, response))
        state.increment_current_attempt()


class RateLimitRetry(_WaitThrough, RateLimitErrorRetryHandler):
    def wait_s(self, state: RetryState, request: HttpRequest, response: HttpResponse | None) -> float:
        headers = {str(k).lower(): v for k, v in ((response.headers if response else None) or {}).items()}
        value = headers.get("retry-after", "1")
        wait = float(value[0] if isinstance(value, list) else value)
        log.warning("slack rate limit on %s: waiting %.0f s as Retry-After asks", request.url.rsplit("/", 1)[-1],
                    wait)
        return wait


class ServerErrorRetry(_WaitThrough, ServerErrorRetryHandler):
    pass


class ConnectionErrorRetry(_WaitThrough, ConnectionErrorRetryHandler):
    pass


def install_retry_handlers(client: WebClient, sleep: Callable[[float], None]) -> list[RetryHandler]:
    """Give ``client`` slack_sdk's retry handlers (replacing its defaults), waiting through ``sleep``."""
    handlers: list[RetryHandler] = [
        RateLimitRetry(sleep, max_retry_count=RATE_LIMIT_RETRIES),
        ServerErrorRetry(sleep, max_retry_count=SERVER_ERROR_RETRIES),
        ConnectionErrorRetry(sleep, max_retry_count=CONNECTION_RETRIES),
    ]
    client.retry_handlers = handlers
    return handlers
