"""The test run builds the Docker test image when it is missing or stale, and a build that
fails is an error saying what to do, not a skip (`tests.helpers.docker.ensure_image`).

The builds here are pointed at a mirror where nothing listens, so each one fails at once.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import tarfile
from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest

from tests.helpers.docker import RECIPE, ensure_image


@pytest.fixture
def unbuilt(engine: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tag of the test image's name that no image has, its build bound to fail."""
    monkeypatch.setenv("DEBIAN_MIRROR", "http://127.0.0.1:9/debian")  # nothing listens there
    tag = f"bastion-sandbox-test:never-{secrets.token_hex(6)}"
    yield tag
    with contextlib.suppress(docker.errors.ImageNotFound):
        engine.images.remove(tag, force=True)


def _empty_image(engine: Any, tag: str, recipe: str) -> None:
    """An image under `tag` with nothing in it, labelled as built by `recipe`."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w"):
        pass
    repository, _, name = tag.partition(":")
    engine.api.import_image_from_data(
        data.getvalue(),
        repository=repository,
        tag=name,
        changes=[f"LABEL io.bastion.test-image={recipe}"],
    )


def test_a_missing_image_whose_build_fails_is_an_error_saying_what_to_do(
    engine: Any, unbuilt: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(RuntimeError) as failed:
        ensure_image(engine, unbuilt)
    assert unbuilt in str(failed.value) and "just docker-image" in str(failed.value)
    assert f"building the Docker sandbox test image {unbuilt} (missing)" in capfd.readouterr().err


def test_an_image_of_an_older_recipe_is_built_again(
    engine: Any, unbuilt: str, capfd: pytest.CaptureFixture[str]
) -> None:
    _empty_image(engine, unbuilt, recipe=f"{RECIPE}-old")
    with pytest.raises(RuntimeError):
        ensure_image(engine, unbuilt)
    assert f"(stale: not of recipe {RECIPE})" in capfd.readouterr().err


def test_an_image_of_the_current_recipe_is_used_as_it_is(engine: Any, unbuilt: str) -> None:
    _empty_image(engine, unbuilt, recipe=RECIPE)
    assert ensure_image(engine, unbuilt) == engine.images.get(unbuilt).id
