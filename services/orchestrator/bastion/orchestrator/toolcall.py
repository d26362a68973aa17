"""One allowed call about to run, with what running it needs, and asking a service for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from bastion.orchestrator.store import SessionStore
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.shared.bus import Client, request

__all__ = ["Call"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """A call the policy allowed (or a person approved), as each tool's run takes it."""

    client: Client
    store: SessionStore
    session: SessionInfo
    tool: ToolSpec
    call_id: str
    timeout_s: float
    """The orchestrator's deadline for a service's answer."""
    stream: bool = False
    """Its caller asked for its output as it comes (`ToolCall.stream`): `shell` has the
    sandbox publish it on the call's output subject."""
    ask_again_s: float = 0.0
    """How long a request that is safe to send again (a background task's start, made once
    per call id, or its stop) is sent again when its answer does not come in time."""

    def whose(self) -> dict[str, Any]:
        """The session's id and tenant, as a request to a service names them."""
        return {"session_id": self.session.session_id, "tenant": self.session.tenant}

    @property
    def workspace(self) -> str:
        """The session's workspace; only a workspace session has the tools that ask for it."""
        assert self.session.workspace is not None
        return self.session.workspace

    async def ask(
        self, subject: str, message: Any, reply: type[T], *, timeout_s: float | None = None
    ) -> T:
        """The service's answer on `subject` (within `timeout_s`, the call's deadline if
        None); its typed error is raised."""
        answer: T = await request(
            self.client,
            subject,
            message,
            reply,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
        )
        return answer
