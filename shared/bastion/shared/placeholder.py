"""A service whose capability lands in a later issue: it registers and answers every
endpoint with a typed `not_implemented` error naming that issue."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from bastion.shared.bus import Client
from bastion.shared.errors import NotImplementedYet
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from bastion.shared.version import VERSION

__all__ = ["placeholder_service"]


def placeholder_service(
    name: str, description: str, issue: int, endpoints: dict[str, tuple[str, Any]]
) -> Callable[[Client, BusSettings], Any]:
    """A setup for service `name` whose endpoints (name -> (subject, request type)) refuse."""

    async def not_yet(_request: object, context: RequestContext) -> object:
        raise NotImplementedYet(
            f"the {name} service does not do this yet ({context.subject}): "
            f"it is built in issue {issue}"
        )

    @asynccontextmanager
    async def setup(_client: Client, _settings: BusSettings) -> AsyncIterator[Service]:
        service = Service(name, VERSION, description)
        for endpoint, (subject, request_type) in endpoints.items():
            service.add_endpoint(endpoint, subject, request_type, not_yet)
        yield service

    return setup
