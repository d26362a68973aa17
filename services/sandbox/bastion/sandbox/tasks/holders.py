"""Asking the sandbox replica that runs a task: a `bg_output`, `bg_stop` or session close
that landed on another replica goes on to the holder's own subjects
(`subjects.sandbox_task_held`), which no other replica serves (docs/sandbox.md,
"Background tasks")."""

from __future__ import annotations

from dataclasses import dataclass

from bastion.proto import subjects
from bastion.proto.sandbox import SandboxRelease, SandboxReleased
from bastion.proto.tasks import TaskOutput, TaskRead, TaskStop, TaskView
from bastion.shared.bus import Client, request

__all__ = ["Holders"]


@dataclass(frozen=True)
class Holders:
    """The other replicas, asked by id. Each ask raises `NoResponders` when no replica of
    that id runs (it is gone), and the holder's own typed error as a `RemoteError`.

    `stop_s`: how long a stop may take there (its grace, then its log drained), on top of
    the bus's `timeout_s`."""

    client: Client
    timeout_s: float
    stop_s: float

    async def output(self, replica: str, asked: TaskRead) -> TaskOutput:
        """`bg_output`, as the holder answers it."""
        subject = subjects.sandbox_task_held(replica, "output")
        answer: TaskOutput = await request(
            self.client, subject, asked, TaskOutput, timeout_s=self.timeout_s
        )
        return answer

    async def stop(self, replica: str, asked: TaskStop) -> TaskView:
        """`bg_stop`, made by the holder: the task as it is once stopped."""
        subject = subjects.sandbox_task_held(replica, "stop")
        answer: TaskView = await request(
            self.client, subject, asked, TaskView, timeout_s=self.timeout_s + self.stop_s
        )
        return answer

    async def release(self, replica: str, session_id: str) -> None:
        """The session closed: the holder releases what it keeps of it, its tasks ended."""
        subject = subjects.sandbox_task_held(replica, "release")
        await request(
            self.client,
            subject,
            SandboxRelease(session_id=session_id),
            SandboxReleased,
            timeout_s=self.timeout_s + self.stop_s,
        )
