"""Telling a connected MCP client that background tasks of its session ended on their own.

The sandbox service publishes `events.task_ended.<tenant>` when a task exits or its time
runs out (never one stopped by `bg_stop`, its session closing or the service stopping).
Every replica hears it; one holding a session-based MCP session bound to the task's Bastion
session sends that client one `notifications/message` (level `info`, logger
`bastion.tasks`) on its standing stream (the GET SSE stream), naming each task, how it
ended, and the `bg_output` call that reads it. Ends are coalesced: those within
`gather_s` of the first share one message, and a session gets at most one message every
`every_s` (later ends wait for the next, none is dropped). A client no longer connected
is told nothing. Stateless (2026-07-28) clients have no standing stream: nothing is
pushed to them (docs/front-door.md, "Background tasks").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup
from mcp.server.connection import allowed_log_levels
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.binding import Binding
from bastion.mcp.frontdoor.manager import DoorManager
from bastion.proto import subjects
from bastion.proto.events import TaskEnded
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import BastionError

__all__ = ["LOGGER", "NoticeTimes", "TaskNotices", "notice_of"]

logger = logging.getLogger(__name__)

LOGGER: Final = "bastion.tasks"
"""The `logger` of the notifications: what a client filters them by."""


@dataclass(frozen=True)
class NoticeTimes:
    """`BASTION_MCP_TASK_END_GATHER_S` and `BASTION_MCP_TASK_END_EVERY_S`."""

    gather_s: float = 2.0
    every_s: float = 10.0


def _ended_as(event: TaskEnded) -> str:
    if event.status == "failed" and event.error == "timeout":
        return "failed: its time ran out"
    if event.exit_code is not None and event.status == "failed":
        return f"failed with exit code {event.exit_code}"
    if event.status == "failed" and event.error:
        return f"failed ({event.error})"
    return event.status


def notice_of(ended: list[TaskEnded]) -> dict[str, Any]:
    """The `notifications/message` params telling `ended`: a sentence per task, and each
    task's id, label, status, exit code and the call that reads its output."""
    said = [
        f"background task {e.task_id} ({e.label}) {_ended_as(e)}: read it with "
        f"bg_output id={e.task_id}"
        for e in ended
    ]
    tasks = [
        {
            "id": e.task_id,
            "label": e.label,
            "status": e.status,
            "exit_code": e.exit_code,
            "error": e.error,
            "read": f"bg_output id={e.task_id}",
        }
        for e in ended
    ]
    return {"level": "info", "logger": LOGGER, "data": {"text": "; ".join(said), "tasks": tasks}}


@dataclass
class _Waiting:
    """A session's ends not yet told."""

    ended: list[TaskEnded] = field(default_factory=list)


class TaskNotices:
    """Hears tasks' ends and tells each connected client its own session's."""

    def __init__(
        self, client: Client, manager: DoorManager, binding: Binding, times: NoticeTimes
    ) -> None:
        self._client = client
        self._manager = manager
        self._binding = binding
        self._times = times
        self._bastion_of: dict[str, str] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Hear `events.task_ended.*` and tell clients for as long as the block runs."""
        async with anyio.create_task_group() as group:
            self._group = group
            heard = await self._client.subscribe(subjects.event("task_ended", "*"), cb=self._heard)
            try:
                yield
            finally:
                await heard.unsubscribe()
                self._group = None
                group.cancel_scope.cancel()

    async def _heard(self, message: Msg) -> None:
        try:
            event = decode(message.data, TaskEnded)
        except BastionError:
            logger.warning("an event on the task_ended subject was not one")
            return
        for mcp_session_id in await self._sessions_of(event.session_id):
            self.told(mcp_session_id, event)

    async def _sessions_of(self, bastion_session_id: str) -> list[str]:
        """The MCP sessions connected here that act in Bastion session `bastion_session_id`."""
        connected = self._manager.connected()
        self._bastion_of = {k: v for k, v in self._bastion_of.items() if k in connected}
        found = []
        for mcp_session_id in connected:
            bound = self._bastion_of.get(mcp_session_id)
            if bound is None:
                try:
                    bound = await self._binding.bound(mcp_session_id)
                except BastionError:
                    continue
                if bound is None:
                    continue
                self._bastion_of[mcp_session_id] = bound
            if bound == bastion_session_id:
                found.append(mcp_session_id)
        return found

    def told(self, mcp_session_id: str, event: TaskEnded) -> None:
        """Tell MCP session `mcp_session_id`'s client of `event`, with the others of its
        gathering, when its session may be told next."""
        if self._group is None:
            return
        waiting = self._waiting.get(mcp_session_id)
        if waiting is not None:
            waiting.ended.append(event)
            return
        waiting = self._waiting[mcp_session_id] = _Waiting([event])
        self._group.start_soon(self._deliver, mcp_session_id, waiting)

    async def _deliver(self, mcp_session_id: str, waiting: _Waiting) -> None:
        """Gather, tell, then keep the session quiet for `every_s`; tell what came meanwhile
        at its end. The session's entry lives as long as it must stay quiet."""
        try:
            await anyio.sleep(self._times.gather_s)
            while waiting.ended:
                ended, waiting.ended = waiting.ended, []
                connection = self._manager.connection(mcp_session_id)
                if connection is None or "info" not in allowed_log_levels(
                    connection.protocol_version, None
                ):
                    return  # the client is gone (or cannot be told): nothing to tell it
                await connection.notify("notifications/message", notice_of(ended))
                await anyio.sleep(self._times.every_s)
        finally:
            self._waiting.pop(mcp_session_id, None)
