"""The audit log's record: what was decided, called, answered or approved, never what was said.

A record is published on `bastion.v1.audit.<tenant>.<session>` into the JetStream stream
`bastion_audit`, which refuses deletes and purges. It carries a bounded summary, never a
secret value and never a whole tool input: file contents appear only as their size.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

import msgspec

from bastion.proto._base import Message

__all__ = ["MAX_SUMMARY", "AuditRecord"]

MAX_SUMMARY: Final = 200
"""Upper bound, in characters, of `AuditRecord.summary`."""


class AuditRecord(Message, frozen=True, kw_only=True, tag="audit.record"):
    """One thing that happened to a session's call, for people who review it later.

    `action` says what: `session_opened`, `decision`, `call`, `result`, `journal`, `hook`,
    `run_start`, `run_end`, `session_closed`, `approval`, `cancel` (a running call told to
    stop, `by` whom) (new actions may be added; one never changes meaning). `outcome` is
    the action's own: allow / ask / deny for a decision, `ok` or an error code for a
    result, `answered` / `uncertain` for the journal, `blocked` for a hook, approved /
    declined for an approval.
    """

    action: Annotated[str, msgspec.Meta(max_length=64)]
    session_id: Annotated[str, msgspec.Meta(max_length=64)]
    tenant: Annotated[str, msgspec.Meta(max_length=64)]
    at: datetime
    tool: Annotated[str, msgspec.Meta(max_length=128)] = ""
    call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    outcome: Annotated[str, msgspec.Meta(max_length=64)] = ""
    rule: Annotated[str, msgspec.Meta(max_length=256)] = ""
    summary: Annotated[str, msgspec.Meta(max_length=MAX_SUMMARY)] = ""
    by: Annotated[str, msgspec.Meta(max_length=128)] = ""
    """Who acted, when a person or a hook did (an approver, `hook guard`, who cancelled)."""
    parent_call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    """For a call a `run_code` program made: the run_code call's id."""
