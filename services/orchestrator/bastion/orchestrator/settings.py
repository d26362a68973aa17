"""The orchestrator's settings: where sessions, calls and parked calls are kept, and its caps."""

from __future__ import annotations

from typing import Annotated

import msgspec

from bastion.proto import subjects
from bastion.shared.settings import BusSettings

__all__ = ["OrchestratorSettings"]


class OrchestratorSettings(BusSettings, frozen=True, kw_only=True):
    """Where sessions and parked calls are kept, and how long a result from outside taints
    a session (`BASTION_TAINT_S`; 0 turns taint off)."""

    sessions_bucket: str = subjects.SESSIONS_BUCKET
    journal_bucket: str = subjects.JOURNAL_BUCKET
    journal_ttl_s: float = 7 * 24 * 3600.0
    """How long a journal entry is kept: an identical call after that runs again."""
    calls_bucket: str = subjects.CALLS_BUCKET
    """`BASTION_CALLS_BUCKET`: the KV bucket of each call's record by call id (its outcome,
    or that it is running), which answers a call sent again with the same id."""
    calls_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 7 * 24 * 3600.0
    """`BASTION_CALLS_TTL_S`: how long a call's record by call id is kept; the same call id
    sent after that is a new call."""
    hooks_bucket: str = subjects.HOOKS_BUCKET
    approvals_bucket: str = subjects.APPROVALS_BUCKET
    turns_bucket: str = subjects.TURNS_BUCKET
    turn_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """`BASTION_TURN_TTL_S`: how long a session's turn outlives an orchestrator that died
    holding it, before another replica takes the session over."""
    turn_wait_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """`BASTION_TURN_WAIT_S`: how long a call waits for a turn another replica holds."""
    tasks_ask_s: Annotated[float, msgspec.Meta(ge=0)] = 120.0
    """`BASTION_TASKS_ASK_S`: how long `bg_run` and `bg_stop` keep asking the sandbox
    service again, each time an answer does not come within `BASTION_REQUEST_TIMEOUT_S`:
    a start is made once per call id (sent again, it is answered with the task the first
    sending started), a stop joins the one under way. Past it the call is answered that
    the task may have started, or may still run. Keep it above the sandbox's
    `BASTION_TENANT_WAIT_S`, which a start may wait for a sandbox slot."""
    session_parallel_reads: Annotated[int, msgspec.Meta(ge=1)] = 8
    """`BASTION_SESSION_PARALLEL_READS`: how many of one session's reads (calls whose effect
    is `read` and that the policy lets run) each orchestrator replica runs at once; writes,
    commands and calls that ask run alone, in order. 1: one call at a time."""
    tenant_calls_per_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """`BASTION_TENANT_CALLS_PER_S`: each tenant's calls per second across every replica (a
    token bucket one second deep, in KV); 0: no quota."""
    tenant_calls_lease_s: Annotated[float, msgspec.Meta(gt=0)] = 0.05
    """`BASTION_TENANT_CALLS_LEASE_S`: how long a replica spends a batch of a tenant's
    tokens (the rate times this, at least 1) taken from the shared bucket by one
    compare-and-set; a tenant may exceed its rate over a window by one such lease."""
    quota_bucket: str = subjects.QUOTA_BUCKET
    """`BASTION_QUOTA_BUCKET`: the KV bucket of each tenant's calls-per-second bucket."""
    max_sessions_per_tenant: Annotated[int, msgspec.Meta(ge=0)] = 256
    """`BASTION_MAX_SESSIONS_PER_TENANT`: sessions one tenant may have open at once, across
    every replica; 0: no cap."""
    max_sessions_per_token: Annotated[int, msgspec.Meta(ge=0)] = 64
    """`BASTION_MAX_SESSIONS_PER_TOKEN`: sessions one front-door token may have open at
    once, across every replica; 0: no cap."""
    taint_s: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    search: str = ""
    """`BASTION_SEARCH`, the egress service's variable too: set, `web` sessions get
    `web_search` (the orchestrator only asks whether it is set; the key is not its)."""
