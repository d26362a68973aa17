"""A revoked token's session from outside: a background loop and a long call that run until
they are ended, and the states that say they were (the processes gone, the tasks
`cancelled`, the Bastion session closed), waited for with bounded polling."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client

from bastion.proto import subjects
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tasks import TaskList, TaskListing
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from tests.helpers.front_door import mcp_client, text_of

__all__ = [
    "WAIT_S",
    "closed",
    "long_call",
    "looping",
    "no_process",
    "running_commands",
    "sleeper",
    "tasks_stopped",
    "two_sessions",
    "until",
]

WAIT_S = 90.0
"""The bound on each wait for a state (the machine may be loaded; nothing is timed)."""

logger = logging.getLogger(__name__)


def running_commands(marker: str) -> list[int]:
    """The pids of host processes whose command line holds `marker` (the sandbox's processes
    are the host's, in their own pid namespace)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(proc.name))
    return found


def no_process(marker: str) -> bool:
    """Whether no host process's command line holds `marker`."""
    return not running_commands(marker)


def sleeper(name: str) -> str:
    """The long call's command of session `name`, as its process shows it."""
    return f"sleep 3{ord(name) - ord('a')}01"


async def closed(client: Bus, session_id: str) -> bool:
    got: SessionInfo = await request(
        client, subjects.SESSION_GET, SessionRef(session_id=session_id), SessionInfo, timeout_s=10
    )
    return got.state == "closed"


async def tasks_stopped(client: Bus, session_id: str) -> bool:
    """Whether the session's tasks, as the sandbox service lists them, were all stopped."""
    listing: TaskListing = await request(
        client,
        subjects.SANDBOX_TASK_LIST,
        TaskList(session_id=session_id),
        TaskListing,
        timeout_s=10,
    )
    return bool(listing.tasks) and all(t.status == "cancelled" for t in listing.tasks)


async def until(check: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Poll `check()` (sync or async) until it is true, at most `WAIT_S`."""
    try:
        with anyio.fail_after(WAIT_S):
            while True:
                done = check()
                if not isinstance(done, bool):
                    done = await done
                if done:
                    return
                await anyio.sleep(0.1)
    except TimeoutError:
        # Logged too: raised inside the services' task groups, the error is nested deeper
        # than a traceback shows.
        logger.error("still not so after %g s: %s", WAIT_S, what)
        raise AssertionError(f"still not so after {WAIT_S:g} s: {what}") from None


async def looping(mcp: Client, name: str) -> str:
    """Start a background loop appending to `loop-<name>`; the Bastion session's id."""
    started = await mcp.call_tool(
        "bg_run", {"command": f"while true; do echo x >> loop-{name}; sleep 0.1; done"}
    )
    assert not started.is_error, text_of(started)
    assert json.loads(text_of(started))["status"] == "running"
    assert started.meta is not None
    return str(started.meta["bastion/session_id"])


async def long_call(mcp: Client, name: str, ended: dict[str, str | Exception]) -> None:
    """A shell call that runs until it is ended; what it answered, kept in `ended`."""
    try:
        answered = await mcp.call_tool(
            "shell", {"command": f"touch started-{name} && {sleeper(name)}", "timeout_s": 3600}
        )
    except Exception as error:
        ended[name] = error
    else:
        ended[name] = text_of(answered)


@asynccontextmanager
async def two_sessions(url_a: str, url_b: str, token: str) -> AsyncIterator[dict[str, Client]]:
    """One MCP session of `token` on each front door (not deleted on leaving: the token is
    revoked by then)."""
    async with AsyncExitStack() as stack:
        yield {
            name: await stack.enter_async_context(mcp_client(url, token, delete_on_exit=False))
            for name, url in (("a", url_a), ("b", url_b))
        }
