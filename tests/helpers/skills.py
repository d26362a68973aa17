"""A session that may run the skills of a skills directory."""

from __future__ import annotations

from pathlib import Path

from bastion.shared.bus import Client
from tests.helpers.session import open_session

__all__ = ["skill_session"]


async def skill_session(
    client: Client,
    workspace: Path,
    skills_dir: Path,
    autonomy: str = "L3",
    network: str = "none",
) -> str:
    """Open a shell session on `workspace` offered `skills_dir`'s skills; its id."""
    info = await open_session(
        client,
        workspace=str(workspace),
        skills_dir=str(skills_dir),
        shell=True,
        autonomy=autonomy,
        network=network,
    )
    assert {"skill_run", "skill_write"} <= {t.name for t in info.tools}
    return info.session_id
