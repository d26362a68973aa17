"""Asking the policy service whether a call may run, and its answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal, get_args

import msgspec

from bastion.proto._base import Message, SessionId

__all__ = [
    "AUTONOMY_LEVELS",
    "MAX_CHECKED_PATHS",
    "MAX_PATHS",
    "MAX_TARGET",
    "SKILL_SOURCE_PREFIX",
    "Autonomy",
    "Effect",
    "Outcome",
    "PathsCheck",
    "PathsChecked",
    "PolicyDecision",
    "PolicyRequest",
    "PolicyStatus",
    "PolicyStatusQuery",
    "PreApproval",
    "RuleCheck",
    "RuleChecked",
]

Autonomy = Literal["L0", "L1", "L2", "L3", "L4", "L5", "L6"]
"""How much a session may do without a person: L0 asks even to read, L6 runs everything."""

AUTONOMY_LEVELS: tuple[Autonomy, ...] = get_args(Autonomy)

Effect = Literal["read", "write", "external", "spend"]
"""The most a call can do: read the workspace, change it, reach outside, or spend money."""

Outcome = Literal["allow", "ask", "deny"]

MAX_TARGET: Final = 64 * 1024
"""Upper bound of `PolicyRequest.target`: a whole shell command must fit, never a cut one."""

MAX_PATHS: Final = 1024
"""Upper bound of `PolicyRequest.paths`: the files one call (a patch) may touch."""

SKILL_SOURCE_PREFIX: Final = "skill "
"""A `PreApproval.source` that starts with this comes from a skill (`skill release-notes`)."""


class PreApproval(Message, frozen=True, kw_only=True, tag="policy.preapproval"):
    """A rule that lets matching calls run without asking, and who granted it.

    `rule` is written in the pre-approval grammar (docs/approvals.md, "Pre-approvals"):
    `Bash(git log:*)`, `Write(notes/*)`, `WebFetch(domain:docs.rs)`, a bare tool name, ...
    `source` says who granted it, in words shown to people: `skill <name>` for a skill's
    `allowed-tools` (the prefix `SKILL_SOURCE_PREFIX` is what marks it as a skill's, so
    `skill_approvals=False` can turn it off), or e.g. `always (person)` for a person's
    "always" answer.
    `skill`, when set, limits a `skill_run` rule to that skill's scripts: a person's
    "always" for one skill's `scripts/check.sh` never covers another skill's script of the
    same name (a skill's own rules are limited to it by their source).
    """

    rule: Annotated[str, msgspec.Meta(max_length=1024)]
    source: Annotated[str, msgspec.Meta(max_length=256)]
    skill: Annotated[str, msgspec.Meta(max_length=128)] = ""


class PolicyRequest(Message, frozen=True, kw_only=True, tag="policy.request"):
    """A call about to run, described for the policy: who, which tool, what it may do.

    The fields after `input_summary` serve pre-approvals and operator policies:
    - `target`: what pre-approvals and operator policies match against, filled by the
      caller per tool: the whole shell command for `shell` (never cut: a cut command could
      hide a `;` after the cut); the path relative to the workspace, normalised, for the
      file tools (`notes/2.4.0.md`, no leading `./` or `/`); the URL's host alone, without
      port, for `fetch_url` (`docs.rs`); the script's path inside its skill for
      `skill_run` (`scripts/check.sh`); empty when the tool has no such thing (then only
      a bare-tool-name pre-approval covers the call).
    - `pre_approvals`: every rule in force for the session, skills' and persons'. They
      only ever turn *ask* into *allow*, and are ignored while `tainted`.
    - `skill`: the skill the call runs a script of (`skill_run`), else empty; a skill's
      `skill_run(...)` rule covers only that skill's own scripts.
    - `skill_approvals`: False under `--no-skill-approvals`: skills' rules are ignored,
      persons' "always" rules still apply.
    - `tainted` (older): the session read content from outside and the taint has not
      expired yet; every pre-approval is suspended.
    - `paths`: for a file tool, every workspace path the call touches, each resolved
      through the workspace's symbolic links as the sandbox walks it (`target` is the
      first): `apply_patch` names each file it adds, changes, deletes or moves to. A path
      pre-approval covers the call only if it covers every path, and operator policies
      judge each path.
    """

    session_id: SessionId
    tenant: str
    agent: str
    autonomy: Autonomy
    tool: str
    effect: Effect
    tainted: bool = False
    input_summary: Annotated[str, msgspec.Meta(max_length=512)] = ""
    target: Annotated[str, msgspec.Meta(max_length=MAX_TARGET)] = ""
    pre_approvals: Annotated[tuple[PreApproval, ...], msgspec.Meta(max_length=512)] = ()
    skill: Annotated[str, msgspec.Meta(max_length=128)] = ""
    skill_approvals: bool = True
    paths: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_PATHS)] = ()


class PolicyDecision(Message, frozen=True, kw_only=True, tag="policy.decision"):
    """Allow, ask or deny, why in a sentence, and the rule that decided.

    - `rule`: `level.<L>.<effect>` for the level table, `preapproval:<rule>` when a
      pre-approval turned ask into allow, `cedar:<policy>` when an operator policy
      narrowed the call (the policy's `@id`, else `<file>:<index>`).
    - `approved_by`: set only when the call runs because of a pre-approval: who granted
      it and the rule (`skill release-notes: Write(notes/*)`), for the transcript.
    - `asked_because_tainted`: the call asks only because the session is tainted: a
      pre-approval would have let it run; the reason says so.
    """

    outcome: Outcome
    reason: str
    rule: str
    approved_by: str = ""
    asked_because_tainted: bool = False


class PolicyStatusQuery(Message, frozen=True, kw_only=True, tag="policy.status_query"):
    """Ask a policy instance which operator policies it enforces."""


class PolicyStatus(Message, frozen=True, kw_only=True, tag="policy.status"):
    """The operator policies one policy instance enforces, and whether the files on disk are.

    `error` is empty when the files on disk are the ones in force; otherwise it says why
    they were rejected, and the last good set (`files`, `loaded_at`) stays in force.
    `generation` counts the sets loaded so far (0: none yet).
    """

    policy_dir: str
    files: tuple[str, ...] = ()
    policies: int = 0
    loaded_at: datetime | None = None
    generation: int = 0
    error: str = ""


class RuleCheck(Message, frozen=True, kw_only=True, tag="policy.rule_check"):
    """Check a person's "always" rule against the call it was given for, or ask for one.

    With `rule`: is it a rule of the pre-approval grammar, and does it cover a call of
    `tool` on `target` (a person's rule must at least cover the call it approves)? Without
    `rule`: the rule that covers exactly this call (`write_file(README.md)`,
    `shell(git log -1)`, a bare tool name for a tool without a target), if one can.
    """

    tool: str
    target: Annotated[str, msgspec.Meta(max_length=MAX_TARGET)] = ""
    rule: Annotated[str, msgspec.Meta(max_length=1024)] = ""


class RuleChecked(Message, frozen=True, kw_only=True, tag="policy.rule_checked"):
    """The rule checked (or made), or, in `problem`, why it cannot be used, in a sentence."""

    rule: str = ""
    problem: str = ""


MAX_CHECKED_PATHS: Final = 500
"""How many paths one `PathsCheck` judges; a longer listing is judged in several."""


class PathsCheck(Message, frozen=True, kw_only=True, tag="policy.check_paths"):
    """Which of `paths` (workspace paths a listing or search of the session would show)
    the operator policies keep from it: each is judged as a `read_file` of it by the
    session of `call` (the call that lists or searches), since a search that shows a file
    reads it, and a listing that names it tells it is there."""

    call: PolicyRequest
    paths: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_CHECKED_PATHS)]


class PathsChecked(Message, frozen=True, kw_only=True, tag="policy.paths_checked"):
    """The paths an operator policy refuses or asks about as a read: not to be shown."""

    hidden: tuple[str, ...] = ()
