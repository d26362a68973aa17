"""What a `docker:` backend names: an image pinned by digest, and the network it may use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from bastion.shared.errors import InvalidInput

__all__ = ["DOCKER_PREFIX", "DockerTarget", "parse_docker_backend"]

DOCKER_PREFIX: Final = "docker:"

_PINNED: Final = re.compile(r"^(?P<name>[^@\s]+)@sha256:(?P<digest>[0-9a-f]{64})$")
_NETWORK_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_UNRESTRICTED: Final = {
    "host": "Docker's `host` network is the machine's own: nothing restricts where a "
    "command connects",
    "bridge": "Docker's default `bridge` network reaches everything the machine reaches: "
    "nothing restricts where a command connects",
    "default": "Docker's `default` network is its `bridge`, which reaches everything the "
    "machine reaches: nothing restricts where a command connects",
}


@dataclass(frozen=True)
class DockerTarget:
    """An image pinned by `sha256:` digest (a repository digest or an image ID) and a
    network: `none`, or the name of a network the operator set up."""

    name: str
    digest: str
    """`sha256:` and 64 hex digits."""
    network: str = "none"

    @property
    def reference(self) -> str:
        """The image as it was given: `name@sha256:…`."""
        return f"{self.name}@{self.digest}"


def parse_docker_backend(backend: str, network: str) -> DockerTarget:
    """The image and network of a `docker:<name>@sha256:<64 hex>` backend.

    Raises:
        InvalidInput: the image is not pinned by a full digest, or the network is one that
            restricts nothing (`host`, `bridge`, `default`) or no network name at all.
    """
    image = backend.removeprefix(DOCKER_PREFIX)
    pinned = _PINNED.match(image)
    if pinned is None:
        shown = image if len(image) <= 200 else image[:200] + "…"
        raise InvalidInput(
            f"the Docker image {shown} is not pinned by digest: give "
            "name@sha256:<64 hex digits> (its repository digest, or its image ID for an "
            "image built or imported here)"
        )
    if network in _UNRESTRICTED:
        raise InvalidInput(
            f"{_UNRESTRICTED[network]}: use `none`, or name a network you set up to "
            "restrict where commands connect"
        )
    if network == "declared":
        raise InvalidInput(
            "the `declared` network is bubblewrap's: with Docker, use `none` or name a "
            "network you set up to restrict where commands connect"
        )
    if not _NETWORK_NAME.match(network):
        raise InvalidInput(
            "a Docker network is `none` or the name of a network you set up (letters, "
            "digits, `_`, `.`, `-`): give one of those"
        )
    return DockerTarget(
        name=pinned.group("name"), digest="sha256:" + pinned.group("digest"), network=network
    )
