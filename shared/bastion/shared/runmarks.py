"""Telling a session that a run of it starts or ends, which asks its run hooks."""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.hooks import RunMark, RunMarked
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError

__all__ = ["mark_run"]


async def mark_run(client: Client, mark: RunMark, timeout_s: float) -> tuple[str, ...]:
    """Tell the session a run starts or ends (its run hooks are asked); what they added.

    A run hook that fails, or an orchestrator that does not answer, does not stop the run:
    only before-tool hooks block.
    """
    try:
        marked: RunMarked = await request(
            client, subjects.SESSION_RUN, mark, RunMarked, timeout_s=timeout_s
        )
    except BastionError:
        return ()
    return marked.notes
