"""A service process's `main`: settings, logs, traces and metrics, the bus, and a graceful stop.

SIGTERM or SIGINT stops taking requests, lets in-flight work finish (up to the drain
timeout), flushes pending replies and spans, and exits 0.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import anyio

from bastion.shared.bus import Client, connect
from bastion.shared.errors import BastionError
from bastion.shared.kv import use_replicas
from bastion.shared.logs import configure_logging
from bastion.shared.probe import heartbeat
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings, load_settings
from bastion.shared.telemetry import configure_telemetry

__all__ = ["run_service", "serve"]

logger = logging.getLogger(__name__)

S = TypeVar("S", bound=BusSettings)

Setup = Callable[[Client, S], AbstractAsyncContextManager[Service]]


async def serve(name: str, settings: S, setup: Setup[S]) -> None:
    """Connect, build the service with `setup`, serve until SIGTERM or SIGINT, then drain."""
    async with connect(settings, f"bastion-{name}") as client, setup(client, settings) as service:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with (
                service.running(client, settings.drain_timeout_s),
                heartbeat(settings.probe_file, client),
            ):
                logger.info(
                    "service ready",
                    extra={"instance": service.instance_id, "version": service.version},
                )
                async for received in signals:
                    logger.info(
                        "stopping: draining in-flight work", extra={"signal": received.name}
                    )
                    break
    logger.info("service stopped")


def run_service(name: str, settings_type: type[S], setup: Setup[S]) -> None:
    """Run service `name` in this process until it is told to stop; exit 2 on bad settings."""
    try:
        configure_logging(name)
        settings = load_settings(settings_type)
        telemetry = configure_telemetry(name)
    except BastionError as error:
        sys.stderr.write(f"bastion-{name}: {error.message}\n")
        raise SystemExit(2) from None
    use_replicas(settings.kv_replicas)
    try:
        anyio.run(serve, name, settings, setup)
    except BastionError as error:
        logger.error("service cannot run: %s", error.message)
        raise SystemExit(1) from None
    finally:
        telemetry.shutdown()
