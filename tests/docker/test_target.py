"""What a `docker:` backend may name, and the unreachable engine: no engine needed."""

from __future__ import annotations

import pytest

from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing import DockerSandboxes, parse_docker_backend

DIGEST = "sha256:" + "ab" * 32


def test_a_pinned_image_gives_its_name_digest_and_network() -> None:
    target = parse_docker_backend(f"docker:mirror.example/library/alpine@{DIGEST}", "egress-only")
    assert (target.name, target.digest, target.network) == (
        "mirror.example/library/alpine",
        DIGEST,
        "egress-only",
    )


@pytest.mark.parametrize(
    "image", ["alpine:3.20", "alpine", "alpine@sha256:abcdef", f"alpine@{DIGEST.upper()}"]
)
def test_an_image_not_pinned_by_a_full_digest_is_refused_saying_what_to_give(image: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_docker_backend(f"docker:{image}", "none")
    assert raised.value.message.startswith(f"the Docker image {image} is not pinned by digest")
    assert "name@sha256:<64 hex digits>" in raised.value.message


@pytest.mark.parametrize("network", ["host", "bridge", "default"])
def test_networks_that_restrict_nothing_are_refused_by_name(network: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_docker_backend(f"docker:alpine@{DIGEST}", network)
    assert f"`{network}`" in raised.value.message
    assert "nothing restricts where a command connects" in raised.value.message


def test_the_declared_network_is_bubblewraps() -> None:
    with pytest.raises(InvalidInput, match="`declared` network is bubblewrap's"):
        parse_docker_backend(f"docker:alpine@{DIGEST}", "declared")


async def test_an_unreachable_engine_is_a_sandbox_failure_naming_docker_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    sandboxes = DockerSandboxes("test-unreachable")
    with pytest.raises(Exception) as raised:
        await sandboxes.version()
    assert getattr(raised.value, "code", "") == "sandbox_failed"
    assert "unix:///nonexistent/docker.sock does not answer" in str(raised.value)
    assert "DOCKER_HOST" in str(raised.value)
