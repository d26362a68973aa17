"""The policy service's endpoint: `policy.decide`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bastion.policy.levels import decide_by_level
from bastion.proto import subjects
from bastion.proto.policy import PolicyDecision, PolicyRequest
from bastion.shared.bus import Client
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from bastion.shared.version import VERSION

__all__ = ["PolicySettings", "policy_service"]


class PolicySettings(BusSettings, frozen=True, kw_only=True):
    """The policy service needs nothing beyond the bus today."""


async def decide(request: PolicyRequest, _: RequestContext) -> PolicyDecision:
    return decide_by_level(request.autonomy, request.tool, request.effect)


@asynccontextmanager
async def policy_service(_client: Client, _settings: PolicySettings) -> AsyncIterator[Service]:
    service = Service("policy", VERSION, "Decides whether each tool call runs, asks or is refused.")
    service.add_endpoint("decide", subjects.POLICY_DECIDE, PolicyRequest, decide)
    yield service
