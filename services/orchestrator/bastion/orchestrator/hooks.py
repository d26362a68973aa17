"""Hooks: the operator's services asked before and after calls and at a run's start and end.

A hook service registers in the KV bucket `bastion_hooks` (a `HookRegistration` under its
name) and answers `bastion.v1.hooks.<event>.<tenant>.<name>`. This module watches the
bucket, so the registrations are in memory: with none matching a call, no one is asked
and nothing is added to the call's time. Matching hooks are asked one after another, in
the order of their names. A before-tool hook that blocks, answers with an error, or does
not answer within its `timeout_s` blocks the call (hooks fail closed); an after-tool or
run hook that fails is logged and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.abc import TaskStatus

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.hooks import HookAnswer, HookEvent, HookEventName, HookRegistration, RunMark
from bastion.proto.session import SessionInfo
from bastion.shared.bus import Client, request
from bastion.shared.carry import carried
from bastion.shared.errors import BastionError
from bastion.shared.kv import TypedBucket
from bastion.shared.patterns import pattern_matches

__all__ = ["HookBlocked", "Hooks"]

logger = logging.getLogger(__name__)


class HookBlocked(BastionError):
    """A before-tool hook blocked the call, or failed to answer (which blocks too)."""

    code = codes.HOOK_BLOCKED


class Hooks:
    """The registered hooks, kept current from the bucket, and asking them."""

    def __init__(self, client: Client, bucket: TypedBucket[HookRegistration]) -> None:
        self._client = client
        self._bucket = bucket
        self._registered: dict[str, HookRegistration] = {}

    @classmethod
    async def open(cls, client: Client, bucket: str) -> Hooks:
        return cls(client, await TypedBucket.open(client, bucket, HookRegistration))

    async def watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the bucket until cancelled; started once the registrations so far are read.
        A registration that does not decode is ignored (and logged)."""
        async for change in self._bucket.watch(ready=task_status.started):
            if change.value is None:
                self._registered.pop(change.key, None)
            else:
                self._registered[change.key] = change.value

    def _matching(self, event: HookEventName, tenant: str, tool: str) -> list[HookRegistration]:
        return [
            hook
            for _, hook in sorted(self._registered.items())
            if event in hook.events
            and pattern_matches(hook.tenants, tenant)
            and (not tool or pattern_matches(hook.tools, tool))
        ]

    async def _answers(
        self, hooks: list[HookRegistration], event: HookEvent, session: SessionInfo, failed: str
    ) -> AsyncIterator[tuple[HookRegistration, HookAnswer]]:
        """Each hook that answered `event`, with its answer; one that failed is logged as
        `failed` and passed over (an advisory hook never fails the call)."""
        for hook in hooks:
            try:
                answer = await self._ask(hook, event, session.tenant)
            except BastionError as error:
                logger.warning(
                    failed,
                    extra={"hook": hook.name, "code": error.code, "session": session.session_id},
                )
                continue
            yield hook, answer

    async def _ask(self, hook: HookRegistration, event: HookEvent, tenant: str) -> HookAnswer:
        answer: HookAnswer = await request(
            self._client,
            subjects.hook(event.event, tenant, hook.name),
            event,
            HookAnswer,
            timeout_s=hook.timeout_s,
        )
        return answer

    def _event(self, session: SessionInfo, event: HookEventName, **fields: Any) -> HookEvent:
        told = carried(session, ("session_id", "tenant", "agent", "workspace"))
        return HookEvent(event=event, **told, **fields)

    async def before_tool(
        self, session: SessionInfo, tool: str, tool_input: dict[str, Any], outcome: str
    ) -> None:
        """Ask each matching hook in turn.

        Raises:
            HookBlocked: a hook blocked the call, or failed to answer.
        """
        hooks = self._matching("before_tool", session.tenant, tool)
        if not hooks:
            return
        event = self._event(session, "before_tool", tool=tool, input=tool_input, outcome=outcome)
        for hook in hooks:
            try:
                answer = await self._ask(hook, event, session.tenant)
            except BastionError as error:
                raise HookBlocked(
                    f"blocked: the before-tool hook {hook.name} failed ({error.message}), "
                    "and a hook that fails blocks the call; the operator must fix the hook"
                ) from None
            if answer.block:
                raise HookBlocked(
                    f"blocked by the before-tool hook {hook.name}: "
                    f"{answer.reason or 'it gave no reason'}"
                )

    async def after_tool(
        self, session: SessionInfo, tool: str, tool_input: dict[str, Any], text: str
    ) -> str:
        """`text` with what each matching hook answered added, each marked as its hook's."""
        hooks = self._matching("after_tool", session.tenant, tool)
        if not hooks:
            return text
        event = self._event(session, "after_tool", tool=tool, input=tool_input, text=text)
        async for hook, answer in self._answers(hooks, event, session, "an after-tool hook failed"):
            if answer.text:
                text += f"\n[hook {hook.name}]\n{answer.text.rstrip()}"
        return text

    async def run_mark(self, session: SessionInfo, mark: RunMark) -> tuple[str, ...]:
        """Tell each run hook a run started or ended; the notes run-start hooks added."""
        notes: list[str] = []
        event = self._event(session, mark.event, text=mark.task, ended=mark.ended)
        hooks = self._matching(mark.event, session.tenant, "")
        async for hook, answer in self._answers(hooks, event, session, "a run hook failed"):
            if answer.text and mark.event == "run_start":
                notes.append(f"[hook {hook.name}] {answer.text.rstrip()}")
        return tuple(notes)
