"""The hooks service: answer hook events by running the operator's command hooks.

`bastion up` starts it (`python -m bastion.hooks`, supervised like the six services, but no
NATS micro service: discovery does not list it) when `<state dir>/hooks.json` exists. It
registers in the `bastion_hooks` bucket as the hook `commands`, for the events and tool
patterns the file names, answers `bastion.v1.hooks.<event>.<tenant>.commands`, and
re-registers when the file changes. A hooks file that others may change registers for
every event and blocks every call until it is fixed. Hooks run outside any sandbox, in the
session's workspace when it has one, with git's configuration locked down
(`gitguard.LOCKED_GIT_ENVIRONMENT`: no program named by a git setting runs). Failures of
hooks that do not block go to `<state dir>/hooks.log`.
"""

from __future__ import annotations

import json
import logging
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from nats.aio.msg import Msg

from bastion.hooks.command import Ran, run_command
from bastion.hooks.settings import HooksSettings
from bastion.proto import subjects
from bastion.proto.hooks import HOOK_EVENTS, HookAnswer, HookEvent, HookEventName, HookRegistration
from bastion.shared.bus import Client, answer, connect, round_trip
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BastionError
from bastion.shared.hookfile import CommandHook, UnsafeHooksFile, hooks_path, load_hooks
from bastion.shared.kv import TypedBucket
from bastion.shared.natsperms import HOOKS
from bastion.shared.patterns import pattern_matches

__all__ = ["NAME", "HookRunner", "answer_event", "hooks_service"]

NAME = "commands"
"""The name the runner registers under; the model sees `[hook commands]` on what it adds."""

POLL_S = 1.0
MARGIN_S = 5.0

logger = logging.getLogger(__name__)


def _command_event(name: HookEventName) -> str:
    return name.replace("_", "-")


def _selects(hook: CommandHook, event: HookEvent) -> bool:
    if hook.event != _command_event(event.event):
        return False
    if not event.tool or not hook.tools:
        return True
    return pattern_matches(tuple(hook.tools), event.tool)


def registration(hooks: list[CommandHook] | None) -> HookRegistration:
    """What to register for these hooks: only their events and tools (no event for no hooks:
    nobody is asked); every event and tool when the file is refused (None given), so that
    every call is blocked until it is fixed."""
    if hooks is None:
        return HookRegistration(name=NAME, events=HOOK_EVENTS, timeout_s=MARGIN_S)
    events = tuple(e for e in HOOK_EVENTS if any(h.event == _command_event(e) for h in hooks))
    tools: set[str] = set()
    for hook in hooks:
        tools.update(hook.tools or ["*"])
    timeout = min(sum(h.timeout_s for h in hooks) + MARGIN_S, 3600.0)
    return HookRegistration(name=NAME, events=events, tools=tuple(sorted(tools)), timeout_s=timeout)


def _failure(number: int, hook: CommandHook, ran: Ran) -> str:
    what = ran.failure or f"exit status {ran.status}"
    said = ran.said()
    detail = f": {said.splitlines()[0][:300]}" if said else ""
    return f"command hook {number} ({Path(hook.command[0]).name}) failed, {what}{detail}"


async def answer_event(event: HookEvent, state_dir: Path) -> HookAnswer:
    """Run every command hook the event selects, in the file's order, and answer."""
    try:
        hooks = load_hooks(hooks_path(state_dir))
    except UnsafeHooksFile as error:
        return HookAnswer(block=event.event == "before_tool", reason=error.message)
    told: dict[str, Any] = {"event": _command_event(event.event), "session": event.session_id}
    told.update(tenant=event.tenant, agent=event.agent)
    if event.tool:
        told.update(tool=event.tool, input=event.input, outcome=event.outcome)
    if event.event == "after_tool":
        told["result"] = event.text
    if event.event == "run_start":
        told["task"] = event.text
    if event.event == "run_end":
        told["ended"] = event.ended
    added: list[str] = []
    for number, hook in enumerate(hooks, start=1):
        if not _selects(hook, event):
            continue
        ran = await run_command(hook.command, told, event.workspace, hook.timeout_s)
        if event.event == "before_tool":
            if ran.status == 0:
                continue
            if ran.status == 2:
                return HookAnswer(
                    block=True, reason=ran.said() or f"command hook {number} blocked the call"
                )
            return HookAnswer(
                block=True, reason=_failure(number, hook, ran) + "; a failing hook blocks"
            )
        if ran.status == 0:
            if ran.stdout.strip():
                added.append(ran.stdout.strip())
        else:
            _log_failure(state_dir, event, _failure(number, hook, ran))
    return HookAnswer(text="\n".join(added))


def _log_failure(state_dir: Path, event: HookEvent, sentence: str) -> None:
    line = {
        "at": datetime.now(UTC).isoformat(),
        "event": _command_event(event.event),
        "session": event.session_id,
        "failure": sentence,
    }
    with (state_dir / "hooks.log").open("a") as log:
        log.write(json.dumps(line) + "\n")


class HookRunner:
    """Keeps the registration in step with the file and answers the hook subjects."""

    def __init__(
        self, client: Client, bucket: TypedBucket[HookRegistration], state_dir: Path
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._state_dir = state_dir
        self._registered: HookRegistration | None = None
        """What is in the bucket now, as this runner put it."""

    @classmethod
    async def open(cls, client: Client, state_dir: Path) -> HookRunner:
        bucket = await TypedBucket.open(client, subjects.HOOKS_BUCKET, HookRegistration)
        return cls(client, bucket, state_dir)

    async def register(self) -> None:
        """Register what the file asks for now (or refuse everything if it is unsafe)."""
        try:
            wanted = registration(load_hooks(hooks_path(self._state_dir)))
        except UnsafeHooksFile as error:
            logger.error("the hooks file is refused: %s", error.message)
            wanted = registration(None)
        if wanted != self._registered:
            await self._bucket.put(NAME, wanted)
            self._registered = wanted

    async def unregister(self) -> None:
        await self._bucket.delete(NAME)

    async def _answer(self, msg: Msg) -> None:
        try:
            event = decode(msg.data, HookEvent)
        except BastionError as error:
            await answer(self._client, msg, encode(error.to_reply()), HOOKS)
            return
        await answer(self._client, msg, encode(await answer_event(event, self._state_dir)), HOOKS)

    async def serve(self) -> None:
        """Answer events (each in its own task, so a slow hook holds up no other) until
        cancelled, re-registering when the file changes."""
        async with anyio.create_task_group() as work:

            async def hand_over(msg: Msg) -> None:
                work.start_soon(self._answer, msg)

            subscription = await self._client.subscribe(
                f"{subjects.PREFIX}.hooks.*.*.{NAME}", cb=hand_over
            )
            await round_trip(self._client)
            await self.register()
            try:
                while True:
                    await anyio.sleep(POLL_S)
                    await self.register()
            finally:
                with anyio.CancelScope(shield=True):
                    await subscription.unsubscribe()


async def hooks_service(settings: HooksSettings) -> None:
    """Connect, register and answer hook events until SIGTERM or SIGINT, then unregister."""
    state_dir = Path(settings.state_dir)
    async with connect(settings, "bastion-hookrunner") as client:
        runner = await HookRunner.open(client, state_dir)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(runner.serve)
                async for _ in signals:
                    break
                tasks.cancel_scope.cancel()
        await runner.unregister()
