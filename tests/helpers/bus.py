"""Services on the test's NATS: the types of the fixtures that run them, and raw requests."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from bastion.shared.bus import Client
from bastion.shared.service import Service

__all__ = ["Plane", "ServiceRunner", "raw_request"]

ServiceRunner = Callable[..., AbstractAsyncContextManager[Service]]
"""What the `run_service` fixture is: `async with run_service(setup, settings)`."""

Plane = Callable[..., AbstractAsyncContextManager[None]]
"""What `plane_of` (and the `plane_with_…` fixtures) are: `async with plane_of(): …` starts
fresh services for the block."""


async def raw_request(client: Client, subject: str, payload: bytes, timeout_s: float = 10) -> Msg:
    """A request of raw bytes, as a client in another language would send it.

    It flushes first and asks once more on "no responders": right after a service
    subscribes, the server can still answer a fresh connection's first request that way
    (the typed `bastion.shared.bus.request` works around the same race).
    """
    await client.flush()
    try:
        return await client.request(subject, payload, timeout=timeout_s)
    except NoRespondersError:
        await client.flush()
        return await client.request(subject, payload, timeout=timeout_s)
