"""One place that sizes the property tests, so a commit always gives the same result.

``make test`` runs Hypothesis under the ``ci`` profile (loaded by ``conftest.py``): derandomized, no example
database, so the same commit draws the same examples on every machine. ``make fuzz`` sets ``CHORUS_HYPOTHESIS=fuzz``:
random seeds, an example database that replays failures, and ``FUZZ_FACTOR`` times the examples each property
asks for here.
"""
from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

FUZZ_FACTOR = 10
CI, FUZZ = "ci", "fuzz"
PROFILE_ENV = "CHORUS_HYPOTHESIS"


def register_profiles() -> None:
    settings.register_profile(CI, derandomize=True, database=None, deadline=None, print_blob=True)
    settings.register_profile(FUZZ, derandomize=False, deadline=None, print_blob=True)


def examples(n: int) -> int:
    """``n`` examples in the derandomized run, ``FUZZ_FACTOR`` times as many under the fuzz profile."""
    return n * FUZZ_FACTOR if settings.get_current_profile_name() == FUZZ else n


def prop(n: int, *, slow: bool = True, **kw: Any) -> settings:
    """Settings for a property test that draws ``n`` examples (scaled under ``make fuzz``)."""
    checks = [HealthCheck.too_slow] if slow else []
    return settings(max_examples=examples(n), deadline=None, suppress_health_check=checks, **kw)
