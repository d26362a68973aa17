"""The paths a listing or search may not show, asked of the policy service in batches.

`list_files`, `find_files` and `search_files` show other files than the path they were
decided on. Before one answers, the paths it would show are sent to `policy.check_paths`
with the call as the policy judged it (`judge` of the request), at most
`MAX_CHECKED_PATHS` a message, and those an operator policy keeps from a read are left
out of the answer (docs/policies.md). No answer from the policy means nothing is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bastion.proto import subjects
from bastion.proto.policy import MAX_CHECKED_PATHS, PathsCheck, PathsChecked, PolicyRequest
from bastion.shared.bus import Client, request
from bastion.shared.errors import Unavailable

__all__ = ["PathJudge"]


@dataclass(frozen=True)
class PathJudge:
    """Asks the policy service which paths of an answer to leave out."""

    client: Client
    timeout_s: float

    async def hidden(self, call: PolicyRequest, paths: Sequence[str]) -> frozenset[str]:
        """The paths of `paths` an operator policy keeps from `call`'s session.

        Raises:
            Unavailable: no policy service answered, so nothing may be shown.
        """
        hidden: set[str] = set()
        for start in range(0, len(paths), MAX_CHECKED_PATHS):
            batch = tuple(paths[start : start + MAX_CHECKED_PATHS])
            try:
                checked: PathsChecked = await request(
                    self.client,
                    subjects.POLICY_CHECK_PATHS,
                    PathsCheck(call=call, paths=batch),
                    PathsChecked,
                    timeout_s=self.timeout_s,
                )
            except Unavailable:
                raise Unavailable(
                    f"the policy service does not answer, so {call.tool} cannot tell which "
                    "files an operator policy keeps from this session: nothing was shown; "
                    "try again once the policy service runs"
                ) from None
            hidden.update(checked.hidden)
        return frozenset(hidden)
