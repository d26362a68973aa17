"""The policy service's endpoints: `policy.decide`, `policy.status`, `policy.check_rule`
and `policy.check_paths`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread

from bastion.policy.cedar_store import OperatorPolicies
from bastion.policy.decide import decide
from bastion.policy.hidden import hidden_paths
from bastion.policy.rulecheck import check_rule
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.policy import (
    PathsCheck,
    PathsChecked,
    PolicyDecision,
    PolicyRequest,
    PolicyStatus,
    PolicyStatusQuery,
    RuleCheck,
    RuleChecked,
)
from bastion.shared.bus import Client
from bastion.shared.metrics import decisions
from bastion.shared.service import RequestContext, Service
from bastion.shared.telemetry import annotate
from bastion.shared.version import VERSION

__all__ = ["policy_service"]


@asynccontextmanager
async def policy_service(_client: Client, settings: PolicySettings) -> AsyncIterator[Service]:
    """The policy service, its operator policies loaded, watching them until it stops."""
    policies = OperatorPolicies(settings.policies_path())
    await anyio.to_thread.run_sync(policies.reload_if_changed)

    async def decide_call(request: PolicyRequest, _: RequestContext) -> PolicyDecision:
        decision = decide(request, policies)
        decisions.add(1, {"bastion.decision": decision.outcome})
        annotate(decision=decision.outcome)
        return decision

    async def status(_query: PolicyStatusQuery, _: RequestContext) -> PolicyStatus:
        return policies.status()

    async def rule_check(check: RuleCheck, _: RequestContext) -> RuleChecked:
        return check_rule(check)

    async def paths_check(check: PathsCheck, _: RequestContext) -> PathsChecked:
        return hidden_paths(check, policies)

    service = Service("policy", VERSION, "Decides whether each tool call runs, asks or is refused.")
    # A decision never waits (Cedar's evaluation is in process, a few hundred µs at most):
    # it is made in the subscription's callback, without a task of its own.
    service.add_endpoint("decide", subjects.POLICY_DECIDE, PolicyRequest, decide_call, inline=True)
    service.add_endpoint("status", subjects.POLICY_STATUS, PolicyStatusQuery, status)
    service.add_endpoint("check_rule", subjects.POLICY_CHECK_RULE, RuleCheck, rule_check)
    service.add_endpoint("check_paths", subjects.POLICY_CHECK_PATHS, PathsCheck, paths_check)
    async with anyio.create_task_group() as watching:
        watching.start_soon(policies.watch, settings.policy_poll_s)
        yield service
        watching.cancel_scope.cancel()
