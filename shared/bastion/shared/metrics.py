"""Bastion's metrics: the named instruments every service records into.

Names follow OpenTelemetry's naming conventions: dotted, singular (a count of things is
`<thing>.count`, things in progress `<thing>.active` or `.pending`, never `total`), the unit
in `unit`, not in the name. A collector's Prometheus exporter shows them as
`bastion_call_count_total`, `bastion_call_duration_seconds`, `bastion_egress_io_bytes_total`,
and so on. No attribute
holds a session id, an input or a secret: labels are few and bounded (tool names come
from a session's catalogue).

The instruments come from the global meter provider; until `configure_telemetry` installs
one (and when it installs none) they are the API's no-ops.
"""

from __future__ import annotations

from opentelemetry import metrics

from bastion.shared.version import VERSION

__all__ = [
    "approvals_waiting",
    "call_duration",
    "calls",
    "decisions",
    "egress_io",
    "sandboxes_running",
]

_meter = metrics.get_meter("bastion", VERSION)

calls = _meter.create_counter(
    "bastion.call.count", unit="{call}", description="Tool calls answered, by tool and outcome."
)
"""Attributes: `bastion.tool`, `bastion.outcome` (`ok` or the error code). Orchestrator."""

call_duration = _meter.create_histogram(
    "bastion.call.duration",
    unit="s",
    description="Time from a call's arrival at the orchestrator to its answer.",
)
"""Attributes: `bastion.tool`, `bastion.outcome`. Orchestrator."""

decisions = _meter.create_counter(
    "bastion.decision.count", unit="{decision}", description="Policy decisions, by outcome."
)
"""Attributes: `bastion.decision` (`allow`, `ask`, `deny`). Policy service."""

sandboxes_running = _meter.create_up_down_counter(
    "bastion.sandbox.active",
    unit="{sandbox}",
    description="Commands running in a sandbox right now.",
)
"""Attributes: `bastion.sandbox.backend` (`bwrap`, `docker`). Sandbox service."""

egress_io = _meter.create_counter(
    "bastion.egress.io",
    unit="By",
    description="Bytes carried through the egress proxy, and pages read by fetch_url.",
)
"""Attributes: `network.io.direction` (`transmit` to the site, `receive` from it). Egress
service."""

approvals_waiting = _meter.create_up_down_counter(
    "bastion.approval.pending",
    unit="{approval}",
    description="Calls parked for a person's approval, not yet answered.",
)
"""No attributes. Orchestrator (summed over replicas; counted as calls are parked and
answered, so a replica's restart resets its part)."""
