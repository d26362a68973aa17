"""The sandbox's `/etc`: a few host files programs need, and small generated ones."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bastion.shared.sandboxing.spec import (
    SANDBOX_GID,
    SANDBOX_UID,
    SANDBOX_USER,
    WORKSPACE,
    Network,
)

__all__ = ["HOST_ETC", "HOST_ETC_NETWORKED", "DataFile", "generated_etc", "host_etc_entries"]

HOST_ETC: Final = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "protocols",
    "services",
    "mime.types",
    "locale.alias",
    "gai.conf",
    "os-release",
    "debian_version",
)
"""Host `/etc` entries shown read-only when present: the loader, time, certificates,
alternatives. Never `passwd`, `group`, `shadow`, or anything holding a secret."""

HOST_ETC_PREFIXES: Final = ("python",)
"""Entries whose name starts so are shown too (`python3`, `python3.11`: site config)."""

HOST_ETC_NETWORKED: Final = ("resolv.conf", "hosts", "host.conf")
"""Shown only with the host's network, where name resolution means something."""


@dataclass(frozen=True)
class DataFile:
    """A file bubblewrap writes into the sandbox from a pipe: where, and what."""

    path: str
    content: bytes


def host_etc_entries(network: Network, etc: Path = Path("/etc")) -> list[str]:
    """Names under `etc` to bind read-only, in a stable order, for this network mode."""
    names = list(HOST_ETC)
    if network == "host":
        names += HOST_ETC_NETWORKED
    try:
        listed = sorted(entry.name for entry in etc.iterdir())
    except OSError:
        listed = []
    names += [name for name in listed if name.startswith(HOST_ETC_PREFIXES)]
    return [name for name in names if (etc / name).exists()]


def generated_etc(network: Network) -> list[DataFile]:
    """The user database and name service files the sandbox gets instead of the host's."""
    files = [
        DataFile(
            "/etc/passwd",
            f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:Bastion sandbox:{WORKSPACE}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        ),
        DataFile("/etc/group", f"{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n".encode()),
        DataFile(
            "/etc/nsswitch.conf",
            b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
            b"networks: files\nprotocols: files\nservices: files\n",
        ),
        DataFile("/etc/hostname", b"sandbox\n"),
    ]
    if network == "none":
        files.append(DataFile("/etc/hosts", b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n"))
    return files
