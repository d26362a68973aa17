"""Bastion's wire: every message on the bus as a msgspec struct, and the subjects they travel on.

This package holds types and names only: no I/O and no service logic.

Schema evolution (every message is msgpack on the bus, JSON at the edges):
- a new field goes last and has a default; a field's type never changes;
- a field is never renamed or reused for another meaning; remove it only after every
  service that reads it is gone;
- internal messages (`Message`) skip unknown fields, so an older service tolerates a newer
  sender; messages an agent or outside client fills (`Ingress`) refuse unknown fields and
  bound every size;
- every message is tagged (`kind`), so unions decode without guessing; a tag never changes.
"""

from __future__ import annotations

from bastion.proto._base import Ingress, Message
from bastion.proto.audit import AuditRecord
from bastion.proto.errors import ErrorReply
from bastion.proto.events import CallDecided, CallFinished, Event, SessionClosed, SessionOpened
from bastion.proto.hooks import HookAnswer, HookEvent, HookRegistration, RunMark, RunMarked
from bastion.proto.journal import JournalEntry
from bastion.proto.policy import AUTONOMY_LEVELS, Autonomy, Effect, PolicyDecision, PolicyRequest
from bastion.proto.sandbox import (
    ApplyPatch,
    CodeCheck,
    CodeReport,
    EditFile,
    ExecRequest,
    ExecResult,
    FileRequest,
    FileResult,
    FindFiles,
    Limits,
    ListFiles,
    ReadFile,
    SandboxCheck,
    SandboxReady,
    SandboxRelease,
    SandboxReleased,
    SearchFiles,
    WriteFile,
)
from bastion.proto.session import OpenSession, SessionInfo, SessionRef, ToolSpec
from bastion.proto.stubs import FetchRequest
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.proto.vault import LeaseRequest

__all__ = [
    "AUTONOMY_LEVELS",
    "ApplyPatch",
    "AuditRecord",
    "Autonomy",
    "CallDecided",
    "CallFinished",
    "CallResult",
    "CodeCheck",
    "CodeReport",
    "EditFile",
    "Effect",
    "ErrorReply",
    "Event",
    "ExecRequest",
    "ExecResult",
    "FetchRequest",
    "FileRequest",
    "FileResult",
    "FindFiles",
    "HookAnswer",
    "HookEvent",
    "HookRegistration",
    "Ingress",
    "JournalEntry",
    "LeaseRequest",
    "Limits",
    "ListFiles",
    "Message",
    "OpenSession",
    "PolicyDecision",
    "PolicyRequest",
    "ReadFile",
    "RunMark",
    "RunMarked",
    "SandboxCheck",
    "SandboxReady",
    "SandboxRelease",
    "SandboxReleased",
    "SearchFiles",
    "SessionClosed",
    "SessionInfo",
    "SessionOpened",
    "SessionRef",
    "ToolCall",
    "ToolOutput",
    "ToolSpec",
    "WriteFile",
]
