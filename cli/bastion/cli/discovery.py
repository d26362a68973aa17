"""Finding every running service instance through the NATS micro protocol (`$SRV.*`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio
import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["Instance", "list_instances"]


class Instance(msgspec.Struct, frozen=True, kw_only=True):
    """One running service instance, as `$SRV.STATS` describes it."""

    name: str
    id: str
    version: str
    started: datetime
    requests: int
    errors: int
    endpoints: tuple[str, ...]
    host: str = ""
    pid: str = ""
    """Where the instance runs, from the metadata every Bastion service registers with."""

    def uptime_s(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(UTC)) - self.started).total_seconds()


def _instance(stats: dict[str, Any]) -> Instance:
    endpoints = stats.get("endpoints") or []
    started = datetime.fromisoformat(str(stats["started"]).replace("Z", "+00:00"))
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    return Instance(
        name=str(stats["name"]),
        id=str(stats["id"]),
        version=str(stats["version"]),
        started=started,
        requests=sum(int(e.get("num_requests", 0)) for e in endpoints),
        errors=sum(int(e.get("num_errors", 0)) for e in endpoints),
        endpoints=tuple(str(e.get("subject", "")) for e in endpoints),
        host=str((stats.get("metadata") or {}).get("host", "")),
        pid=str((stats.get("metadata") or {}).get("pid", "")),
    )


async def list_instances(client: Client, window_s: float = 0.5) -> list[Instance]:
    """Every instance that answers `$SRV.STATS` within `window_s`, sorted by name."""
    found: dict[str, Instance] = {}
    inbox = client.new_inbox()

    async def collect(msg: Msg) -> None:
        try:
            instance = _instance(json.loads(msg.data))
        except (ValueError, KeyError, TypeError):
            return
        found[instance.id] = instance

    subscription = await client.subscribe(inbox, cb=collect)
    try:
        await client.publish("$SRV.STATS", b"", reply=inbox)
        await client.flush()
        await anyio.sleep(window_s)
    finally:
        await subscription.unsubscribe()
    return sorted(found.values(), key=lambda i: (i.name, i.id))
