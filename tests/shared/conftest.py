"""Fixtures for the runtime tests: a test service with controllable handlers."""

from __future__ import annotations

import pytest

from tests.helpers.runtime import Harness


@pytest.fixture
def harness() -> Harness:
    """The runtime tests' echo service, its handler steered by the test."""
    return Harness()
