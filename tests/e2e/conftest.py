"""Fixtures for the end-to-end tests: `bastion up` as a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.running_up import Up, start_up, stop


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    """`bastion up` on a state dir of the test's own (`tmp_path/state`), ready; stopped after."""
    running = start_up(tmp_path / "state")
    try:
        yield running
    finally:
        stop(running)
