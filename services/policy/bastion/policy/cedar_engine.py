"""Cedar through cedarpy: compile operator policy files once, then evaluate calls fast.

This is the only module that touches cedarpy (untyped); what it returns is typed. The
schema, each compiled policy set and the entities of each (session, tool, resource) are
parsed once and reused as handles (the most recent few thousand): a decision only builds
its small request, and parses the one entity of a resource it has not seen.
A built-in `permit` for every call sits beside the operator's policies, so Cedar's
answer is Deny exactly when an operator `forbid` holds: operators can only narrow. A call's
resource is inside every tool of its group (`tools.GROUPS`), so a policy written on one
tool holds for the tools that do the same thing.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final

import cedarpy

from bastion.policy.narrowing import Verdict
from bastion.policy.tools import group_of, normalised_target, target_kind
from bastion.proto.policy import PolicyRequest
from bastion.shared.errors import BastionError

__all__ = ["SCHEMA_FILE", "CompiledPolicies", "PolicyRejected", "compile_files", "evaluate"]

SCHEMA_FILE: Final = "bastion.cedarschema"
_PERMIT_ALL: Final = "bastion:permit-all"
_POLICY_IN_ERROR: Final = re.compile(r"policy `([^`]*)`")
_MAX_ERROR: Final = 300


class PolicyRejected(BastionError):
    """The policy files do not make a valid set; the message names the file and the fault."""


@dataclass(frozen=True)
class _Meta:
    name: str
    ask: str | None
    reason: str


@dataclass(frozen=True)
class CompiledPolicies:
    """A validated policy set, parsed once: its handle and what each policy is called."""

    files: tuple[str, ...] = ()
    count: int = 0
    handle: Any = None
    meta: dict[str, _Meta] = field(default_factory=dict)


@functools.cache
def _schema() -> Any:
    text = resources.files("bastion.policy").joinpath(SCHEMA_FILE).read_text()
    return cedarpy.Schema.from_str(text)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."


def _compile_file(name: str, text: str) -> dict[str, tuple[dict[str, Any], _Meta]]:
    """One file's policies, validated, keyed by `<file>:<n>` (n from 1)."""
    try:
        est = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as error:
        raise PolicyRejected(
            f"{name} is not valid Cedar ({_cut(str(error))}): fix it; the last good set "
            "stays in force meanwhile"
        ) from None
    if est.get("templates"):
        raise PolicyRejected(
            f"{name} holds a template (a policy with ?principal or ?resource): Bastion "
            "takes static policies only; write the entity out"
        )
    result = cedarpy.validate_policies(text, _schema())
    if not result.validation_passed:
        first = result.errors[0]
        index = first.policy_id.removeprefix("policy")
        where = f"policy {int(index) + 1}" if index.isdigit() else "a policy"
        label = result.id_annotations_by_policy_id.get(first.policy_id)
        more = f" (and {len(result.errors) - 1} more errors)" if len(result.errors) > 1 else ""
        raise PolicyRejected(
            f"{name}: {where}{f' ({label})' if label else ''} does not validate against "
            f"Bastion's Cedar schema: {_cut(first.error)}{more}; fix it, the last good set "
            "stays in force meanwhile"
        )
    compiled: dict[str, tuple[dict[str, Any], _Meta]] = {}
    for number, policy in enumerate(est["staticPolicies"].values(), start=1):
        key = f"{name}:{number}"
        notes = policy.get("annotations", {})
        meta = _Meta(
            name=notes.get("id") or key, ask=notes.get("ask"), reason=notes.get("reason", "")
        )
        compiled[key] = (policy, meta)
    return compiled


def compile_files(files: dict[str, str]) -> CompiledPolicies:
    """The policies of `files` (name → Cedar text), validated and parsed into one set.

    Raises:
        PolicyRejected: a file does not parse, holds a template, or does not validate.
    """
    if not files:
        return CompiledPolicies()
    static: dict[str, Any] = {}
    meta: dict[str, _Meta] = {}
    for name in sorted(files):
        for key, (policy, info) in _compile_file(name, files[name]).items():
            static[key], meta[key] = policy, info
    count = len(static)
    static[_PERMIT_ALL] = {
        "effect": "permit",
        "principal": {"op": "All"},
        "action": {"op": "All"},
        "resource": {"op": "All"},
        "conditions": [],
    }
    document = {"staticPolicies": static, "templates": {}, "templateLinks": []}
    handle = cedarpy.PolicySet.from_json_str(json.dumps(document))
    return CompiledPolicies(tuple(sorted(files)), count, handle, meta)


def _cut_target(target: str) -> str:
    return target if len(target) <= 120 else target[:117] + "..."


def _uid(kind: str, name: str) -> dict[str, str]:
    return {"type": kind, "id": name}


@functools.lru_cache(maxsize=1024)
def _principal(tenant: str, agent: str, session_id: str) -> Any:
    """A session's entities (Session in Agent in Tenant), parsed once per session."""
    agent_id = f"{tenant}/{agent}"
    entities = [
        {"uid": _uid("Tenant", tenant), "attrs": {}, "parents": []},
        {"uid": _uid("Agent", agent_id), "attrs": {}, "parents": [_uid("Tenant", tenant)]},
        {"uid": _uid("Session", session_id), "attrs": {}, "parents": [_uid("Agent", agent_id)]},
    ]
    return cedarpy.Entities.from_json_str(json.dumps(entities))


@functools.lru_cache(maxsize=1024)
def _with_tools(tenant: str, agent: str, session_id: str, tool_name: str) -> Any:
    """A session's entities with the tools a call of `tool_name` is inside, parsed once."""
    _, entities = _tools(tool_name)
    return _principal(tenant, agent, session_id).with_added_json_str(json.dumps(entities))


@functools.lru_cache(maxsize=4096)
def _entities(
    tenant: str, agent: str, session_id: str, tool_name: str, resource: tuple[str, str]
) -> Any:
    """Every entity a decision on a call of `tool_name` on `resource` (its type and id)
    needs: the session's, the tools', the resource inside its tools."""
    tools, _ = _tools(tool_name)
    inside = {"uid": _uid(*resource), "attrs": {}, "parents": tools}
    base = _with_tools(tenant, agent, session_id, tool_name)
    return base.with_added_json_str(json.dumps([inside]))


def _tools(tool_name: str) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The tools a call of `tool_name` is inside (it, or every tool of its group), and
    their entities (each inside its group)."""
    group = group_of(tool_name)
    if group is None:
        tool = _uid("Tool", tool_name)
        return [tool], [{"uid": tool, "attrs": {}, "parents": []}]
    name, members = group
    parent = _uid("ToolGroup", name)
    tools = [_uid("Tool", member) for member in sorted(members)]
    entities: list[dict[str, Any]] = [{"uid": parent, "attrs": {}, "parents": []}]
    entities += [{"uid": tool, "attrs": {}, "parents": [parent]} for tool in tools]
    return tools, entities


def _resource(tool_name: str, target: str) -> tuple[str, str]:
    """The call's resource: its entity type and id."""
    kind = {"path": "Path", "host": "Host"}.get(target_kind(tool_name))
    return (kind, target) if kind is not None and target else ("ToolCall", tool_name)


def evaluate(compiled: CompiledPolicies, request: PolicyRequest) -> Verdict | None:
    """The operator policies' verdict on `request`: None, ask, or deny (also on any error).

    A call that touches several paths (`apply_patch`) is judged once per path: a refusal
    of any path refuses the call, else a question on any path asks.
    """
    if not compiled.count:
        return None
    targets = request.paths if request.paths and target_kind(request.tool) == "path" else ()
    verdicts = [_evaluate(compiled, request, t) for t in targets or (request.target,)]
    found = [v for v in verdicts if v is not None]
    refusals = [v for v in found if v.outcome == "deny"]
    return next(iter(refusals or found), None)


def _evaluate(compiled: CompiledPolicies, request: PolicyRequest, target: str) -> Verdict | None:
    target = normalised_target(request.tool, target)
    resource = _resource(request.tool, target)
    entities = _entities(request.tenant, request.agent, request.session_id, request.tool, resource)
    result = cedarpy.is_authorized(
        {
            "principal": _uid("Session", request.session_id),
            "action": {"type": "Action", "id": request.effect},
            "resource": _uid(*resource),
            "context": {
                "tool": request.tool,
                "target": target,
                "level": int(request.autonomy[1:]),
                "tainted": request.tainted,
                "skill": request.skill,
                "input_summary": request.input_summary,
            },
        },
        compiled.handle,
        entities,
        _schema(),
    )
    errors: list[str] = list(result.diagnostics.errors)
    if errors:
        return _failed(compiled, errors)
    if result.decision == cedarpy.Decision.Allow:
        return None
    return _forbidden(compiled, list(result.diagnostics.reasons), request, target)


def _failed(compiled: CompiledPolicies, errors: list[str]) -> Verdict:
    """Cedar skips a policy it cannot evaluate; a skipped forbid must not let a call run."""
    found = _POLICY_IN_ERROR.search(errors[0])
    meta = compiled.meta.get(found.group(1)) if found else None
    name = meta.name if meta else "request"
    what = f"operator policy {name}" if meta else "the operator policies"
    return Verdict(
        outcome="deny",
        policy=name,
        reason=(
            f"{what} could not be evaluated for this call ({_cut(errors[0])}), and a call the "
            "operator policies cannot judge is refused: an operator should fix the policy"
        ),
    )


def _forbidden(
    compiled: CompiledPolicies, reasons: list[str], request: PolicyRequest, target: str
) -> Verdict:
    forbids = [compiled.meta[r] for r in reasons if r in compiled.meta]
    on = f" on {_cut_target(target)}" if target else ""
    refusing = [m for m in forbids if m.ask is None]
    if refusing or not forbids:
        meta = refusing[0] if refusing else _Meta("unknown", None, "")
        why = f": {meta.reason}" if meta.reason else ""
        return Verdict(
            outcome="deny",
            policy=meta.name,
            reason=(
                f"operator policy {meta.name} forbids {request.tool}{on}{why}; only an "
                "operator can change that policy"
            ),
        )
    meta = forbids[0]
    why = f": {meta.ask}" if meta.ask else ""
    return Verdict(
        outcome="ask",
        policy=meta.name,
        reason=f"operator policy {meta.name} wants a person to approve {request.tool}{on}{why}",
    )
