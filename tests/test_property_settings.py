"""`make test` never times a property test; exploring does (tests/support/properties.py)."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.support.properties import DEFAULT_PROFILE, SCALE_ENV, explore_deadline


def test_the_seeded_profile_sets_no_wall_clock_deadline() -> None:
    """Hypothesis' own default is 200 ms per example: on two shared cores that fails a test for the machine's load."""
    assert settings.get_profile(DEFAULT_PROFILE).deadline is None


def test_a_property_tests_deadline_holds_only_while_exploring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SCALE_ENV, raising=False)
    assert explore_deadline(5_000) is None
    monkeypatch.setenv(SCALE_ENV, "20")
    assert explore_deadline(5_000) == 5_000
