"""A hook service for a test: registered under its name, answering each event as told."""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.msg import Msg

from bastion.orchestrator.hooks import Hooks
from bastion.proto import subjects
from bastion.proto.hooks import HookAnswer, HookEvent, HookRegistration
from bastion.shared.bus import Client, round_trip
from bastion.shared.codec import decode, encode

__all__ = ["Answer", "hook"]

Answer = Callable[[HookEvent], HookAnswer | None]


async def hook(client: Client, registration: HookRegistration, answer: Answer) -> list[HookEvent]:
    """Register a hook service and answer its subjects with `answer` (None: stay silent)."""
    asked: list[HookEvent] = []

    async def respond(msg: Msg) -> None:
        event = decode(msg.data, HookEvent)
        asked.append(event)
        given = answer(event)
        if given is not None:
            await msg.respond(encode(given))

    await client.subscribe(f"{subjects.PREFIX}.hooks.*.*.{registration.name}", cb=respond)
    await round_trip(client)
    await Hooks.open(client, subjects.HOOKS_BUCKET)  # the bucket, created if missing
    kv = await client.jetstream().key_value(subjects.HOOKS_BUCKET)
    await kv.put(registration.name, encode(registration))
    return asked
