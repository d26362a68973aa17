"""Hooks: operator services asked around calls and runs, and how they register.

A hook service puts a `HookRegistration` in the KV bucket `bastion_hooks` (key: its
name) and answers requests on `bastion.v1.hooks.<event>.<tenant>.<name>`. The
orchestrator watches the bucket; with nothing registered for an event it asks no one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec

from bastion.proto._base import Identifier, Ingress, Message, SessionId

__all__ = [
    "HOOK_EVENTS",
    "HookAnswer",
    "HookEvent",
    "HookEventName",
    "HookRegistration",
    "RunMark",
    "RunMarked",
]

HookEventName = Literal["before_tool", "after_tool", "run_start", "run_end"]

HOOK_EVENTS: tuple[HookEventName, ...] = get_args(HookEventName)

Pattern = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class HookRegistration(Message, frozen=True, kw_only=True, tag="hooks.registration"):
    """A hook service's wish to be asked: for which events, tools and tenants, and how long
    to wait for it. Patterns use `*` for any characters."""

    name: Identifier
    events: tuple[HookEventName, ...]
    tools: tuple[Pattern, ...] = ("*",)
    """Tool-name patterns of the calls it is asked about (run events ignore them)."""
    tenants: tuple[Pattern, ...] = ("*",)
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 10.0
    """How long the orchestrator waits; past it a before-tool hook blocks the call."""


class HookEvent(Message, frozen=True, kw_only=True, tag="hooks.event"):
    """What a hook is told: the event, the session, and as the event has them the call's
    tool and input, the decision's outcome, the text the model is shown, how a run ended."""

    event: HookEventName
    session_id: SessionId
    tenant: str
    agent: str
    workspace: str | None = None
    tool: str = ""
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    outcome: str = ""
    text: str = ""
    """after_tool: what the model is shown of the call; run_start: the task, if any."""
    ended: str = ""
    """run_end: how the run ended (`done`, `error`, `interrupted`)."""


class HookAnswer(Message, frozen=True, kw_only=True, tag="hooks.answer"):
    """A hook's answer: `block` (before_tool only) with the reason the model is shown, and
    text to add (after_tool: to the call's result; run_start: to the run's start)."""

    block: bool = False
    reason: Annotated[str, msgspec.Meta(max_length=16384)] = ""
    text: Annotated[str, msgspec.Meta(max_length=65536)] = ""


class RunMark(Ingress, frozen=True, kw_only=True, tag="session.run_mark"):
    """An agent run of a session starts or ends (`bastion agent run` sends both)."""

    session_id: SessionId
    event: Literal["run_start", "run_end"]
    task: Annotated[str, msgspec.Meta(max_length=16384)] = ""
    ended: Annotated[str, msgspec.Meta(max_length=64)] = ""


class RunMarked(Message, frozen=True, kw_only=True, tag="session.run_marked"):
    """What run-start hooks added, each line marked with its hook's name."""

    notes: tuple[str, ...] = ()
