"""Work the sandbox service does: commands, file tools, and the check before a session."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Identifier, Message, PathText, SessionId, Text, name_meta
from bastion.proto.policy import PolicyRequest
from bastion.proto.toolinput import (
    ApplyPatchInput,
    EditFileInput,
    FindFilesInput,
    ListFilesInput,
    ReadFileInput,
    SearchFilesInput,
    WriteFileInput,
)

__all__ = [
    "ApplyPatch",
    "CodeCheck",
    "CodeReport",
    "EditFile",
    "ExecRequest",
    "ExecResult",
    "FileRequest",
    "FileResult",
    "FindFiles",
    "FindSkills",
    "Limits",
    "ListFiles",
    "OutputChunk",
    "ReadFile",
    "ReadOnlyDirs",
    "ReadSkill",
    "ResolvePaths",
    "ResolvedPaths",
    "RunCode",
    "RunSkill",
    "SandboxCheck",
    "SandboxReady",
    "SandboxRelease",
    "SandboxReleased",
    "SearchFiles",
    "SkillDocument",
    "SkillEntry",
    "SkillListing",
    "SkillName",
    "WriteFile",
    "WriteSkill",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


ReadOnlyDirs = Annotated[tuple[PathText, ...], msgspec.Meta(max_length=32)]
"""Host directories shown read-only inside the sandbox, each at its own path."""


class Limits(Message, frozen=True, kw_only=True):
    """What one command may use; the defaults are the reference's."""

    wall_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 120.0
    cpu_s: Annotated[int, msgspec.Meta(gt=0, le=86400)] = 120
    address_space_bytes: Annotated[int, msgspec.Meta(gt=0)] = 4 * GiB
    file_size_bytes: Annotated[int, msgspec.Meta(gt=0)] = 512 * MiB
    output_bytes: Annotated[int, msgspec.Meta(ge=1024, le=16 * MiB)] = 64 * KiB
    processes: Annotated[int, msgspec.Meta(ge=8, le=65536)] = 256
    memory_bytes: Annotated[int, msgspec.Meta(ge=16 * MiB)] = 4 * GiB


class ExecRequest(Message, frozen=True, kw_only=True, tag="sandbox.exec"):
    """Run one shell command in the session's sandbox, with `/bin/sh -c`, in `/workspace`."""

    session_id: SessionId
    workspace: PathText
    command: Annotated[str, msgspec.Meta(min_length=1, max_length=256 * KiB)]
    backend: str = "bwrap"
    network: str = "none"
    limits: Limits = Limits()
    read_only_dirs: ReadOnlyDirs = ()
    tenant: Identifier = "default"
    call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    """The call the command runs for: a lease of its secrets is for this call only."""
    secrets: Annotated[
        tuple[Annotated[str, msgspec.Meta(pattern=r"^[A-Z_][A-Z0-9_]*$", max_length=128)], ...],
        msgspec.Meta(max_length=12),
    ] = ()
    """Names of the tenant's secrets leased from the vault for this one command: set as its
    environment variables, and cut out of everything it answers (`[secret NAME]`)."""
    declared_hosts: Annotated[
        tuple[Annotated[str, msgspec.Meta(min_length=1, max_length=300)], ...],
        msgspec.Meta(max_length=64),
    ] = ()
    """With network `declared`: the hosts this command may reach through the egress proxy,
    each `host`, `*.suffix`, `host:port`, or `true` (any public host). None: no network."""
    stream: bool = False
    """Publish the command's output as it comes, bounded and with the secrets cut, on
    `subjects.call_output(session_id, call_id)` (`OutputChunk`), for whoever waits on the
    call; only with a `call_id` that is a subject token (letters, digits, `_`, `-`)."""


class OutputChunk(Message, frozen=True, kw_only=True, tag="sandbox.output"):
    """What a streamed command wrote since the last chunk, secrets cut as in its result.

    `stdout` / `stderr` is the new text of each stream (at most the sandbox's bytes per
    chunk together); `more` counts what was written meanwhile and is not shown: the bytes of
    a burst past that bound, and the characters dropped at such a gap so that no secret is
    shown in part. `capped`: the
    streamed total reached its bound and nothing more is sent for this call (its result
    has the output, within its own limits).
    """

    seq: int
    stdout: Text = ""
    stderr: Text = ""
    more: int = 0
    capped: bool = False


class ExecResult(Message, frozen=True, kw_only=True, tag="sandbox.exec_result"):
    """How a command ended and what it printed (each stream cut to the output limit).

    `ended` is `exited` (its own exit status), `signal` (killed by a signal, `signal` says
    which), or `timeout` (the wall clock ran out and the whole process group was killed).
    `stdout_cut` / `stderr_cut` count the bytes left out of the middle of each stream.
    `limit_hit` names a limit the command ran into, whether or not it ended it: `oom` (its
    memory ran out and the kernel killed a process), `process_limit` (a fork was refused),
    `cpu_time` (SIGXCPU) or `file_size` (SIGXFSZ); empty when none was.
    """

    exit_status: int
    ended: Literal["exited", "signal", "timeout"]
    signal: int | None = None
    stdout: Text = ""
    stderr: Text = ""
    stdout_cut: int = 0
    stderr_cut: int = 0
    duration_s: float = 0.0
    limit_hit: Annotated[str, msgspec.Meta(max_length=32)] = ""
    connections: Text = ""
    """With network `declared` and declared hosts: the call's connection line
    (`connections: a:443 allowed; b:443 refused: not a declared host`)."""


class RunCode(Message, frozen=True, kw_only=True, tag="sandbox.run_code"):
    """Run a `run_code` program in a sandbox of its own, with no workspace and no network,
    relaying each tool it calls to the orchestrator as a nested call of `call_id`.

    `workspace` is the session's, never shown to the program: the sandbox runs as its
    owner, as the session's commands do (docs/sandbox.md).
    """

    session_id: SessionId
    workspace: PathText
    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    """The run_code call the program runs for: each nested call names it as its parent."""
    code: Annotated[str, msgspec.Meta(min_length=1, max_length=64 * KiB)]
    backend: str = "bwrap"
    limits: Limits = Limits()
    tenant: Identifier = "default"


class _FileCall(Message, frozen=True, kw_only=True):
    """A file tool's call on a session's workspace: whose it is and where, and the tool's
    own input (its fields and bounds are the tool's, `bastion.proto.toolinput`).

    `tenant` (`default` if not given): every value of the tenant's secrets is cut out of
    the answer, and each tenant's searches have search workers of their own.
    """

    session_id: SessionId
    workspace: PathText
    tenant: Identifier = "default"


class ReadFile(_FileCall, frozen=True, kw_only=True, tag="file.read"):
    """Read a stretch of a workspace file, its lines numbered from `offset` (1-based)."""

    input: ReadFileInput


class WriteFile(_FileCall, frozen=True, kw_only=True, tag="file.write"):
    """Write a whole workspace file, atomically, creating its directories."""

    input: WriteFileInput


class EditFile(_FileCall, frozen=True, kw_only=True, tag="file.edit"):
    """Replace `old_string` in a workspace file: once, or every time with `replace_all`."""

    input: EditFileInput


class ApplyPatch(_FileCall, frozen=True, kw_only=True, tag="file.patch"):
    """Apply a unified diff or a `*** Begin Patch` patch to the workspace: all of it or none."""

    input: ApplyPatchInput


class ListFiles(_FileCall, frozen=True, kw_only=True, tag="file.list"):
    """The entries of one workspace directory."""

    input: ListFilesInput
    judge: PolicyRequest | None = None
    """The call as the policy judged it: each path the answer would show is judged too, as
    a read of it, and not shown if an operator policy refuses or asks (None: not judged)."""


class FindFiles(_FileCall, frozen=True, kw_only=True, tag="file.find"):
    """Workspace files whose path matches a glob (`**`, `{a,b}`), under `path`."""

    input: FindFilesInput
    judge: PolicyRequest | None = None
    """The call as the policy judged it: each path the answer would show is judged too, as
    a read of it, and not shown if an operator policy refuses or asks (None: not judged)."""


class SearchFiles(_FileCall, frozen=True, kw_only=True, tag="file.search"):
    """Lines of workspace files matching a regular expression, with lines around each."""

    input: SearchFilesInput
    judge: PolicyRequest | None = None
    """The call as the policy judged it: each path the answer would show is judged too, as
    a read of it, and not shown if an operator policy refuses or asks (None: not judged)."""


FileRequest = ReadFile | WriteFile | EditFile | ApplyPatch | ListFiles | FindFiles | SearchFiles
"""What `sandbox.files` takes; later file tools join this union."""


class ResolvePaths(Message, frozen=True, kw_only=True, tag="file.resolve"):
    """The workspace paths a file call would touch, resolved through the workspace's links
    as the file tools walk them, for the policy to judge before the call runs: `paths`
    as given, and every path `patch` (an `apply_patch` patch) adds, changes, deletes or
    moves to."""

    session_id: SessionId
    workspace: PathText
    paths: Annotated[tuple[PathText, ...], msgspec.Meta(max_length=16)] = ()
    patch: Text = ""


class ResolvedPaths(Message, frozen=True, kw_only=True, tag="file.resolved"):
    """Each path relative to the workspace, normalised, after its links (`.` the root)."""

    paths: tuple[str, ...] = ()


class FileResult(Message, frozen=True, kw_only=True, tag="file.result"):
    """The text a file tool answers with."""

    text: Text


class CodeCheck(Message, frozen=True, kw_only=True, tag="sandbox.check_code"):
    """Run the workspace's checker (`diagnostics`) or its tests (`tests`) in its sandbox.

    The sandbox service picks the program from the files at the workspace's root and runs
    it like a shell command, within `limits`.
    """

    session_id: SessionId
    workspace: PathText
    what: Literal["diagnostics", "tests"]
    backend: str = "bwrap"
    network: str = "none"
    limits: Limits = Limits()
    read_only_dirs: ReadOnlyDirs = ()
    tenant: Identifier = "default"
    call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    """The call it runs for: a cancel of that call kills what it runs."""


class CodeReport(Message, frozen=True, kw_only=True, tag="sandbox.code_report"):
    """What a check found, as the model is shown it; `program` is the command that ran."""

    program: str
    text: Text


class SandboxCheck(Message, frozen=True, kw_only=True, tag="sandbox.check"):
    """Before a session starts: does a trivial command run in this sandbox?"""

    workspace: PathText
    backend: str = "bwrap"
    network: str = "none"
    read_only_dirs: ReadOnlyDirs = ()
    skills_dir: PathText | None = None


class SandboxReady(Message, frozen=True, kw_only=True, tag="sandbox.ready"):
    """The sandbox ran the trivial command; `detail` says what it is."""

    backend: str
    detail: str


class SandboxRelease(Message, frozen=True, kw_only=True, tag="sandbox.release"):
    """A session closed: remove what its sandbox kept (a Docker container), end its
    background tasks on every replica that runs one (they are found by `tenant`), and check
    its `workspace`'s git once nothing of the session runs any more."""

    session_id: SessionId
    tenant: Identifier = "default"
    workspace: PathText | None = None


class SandboxReleased(Message, frozen=True, kw_only=True, tag="sandbox.released"):
    """What was removed: how many containers (none for a session that kept nothing)."""

    containers: int = 0


SkillName = Annotated[str, name_meta(64)]
"""A skill's directory name inside the skills dir: no `/`, no leading `.`."""


class ReadSkill(Message, frozen=True, kw_only=True, tag="sandbox.skill_read"):
    """Read `<skills_dir>/<name>/SKILL.md`, confined to the skills dir whatever its links say;
    answered with `tenant`'s values cut out."""

    session_id: SessionId
    skills_dir: PathText
    name: SkillName
    tenant: Identifier = "default"


class SkillDocument(Message, frozen=True, kw_only=True, tag="sandbox.skill_document"):
    """A skill's SKILL.md: its whole text and what its front matter declares.

    `allowed_tools` holds the rules of `allowed-tools`, one per item, in the pre-approval
    grammar (they are checked by the policy when they are used, not here). `network`,
    `secrets` and `timeout_s` are its `metadata.bastion-*` keys: the hosts its scripts may
    reach (`true`: any public host), the secrets they are given, and their wall clock.
    """

    name: str
    text: Text
    description: str = ""
    allowed_tools: tuple[str, ...] = ()
    network: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    timeout_s: float | None = None


class FindSkills(Message, frozen=True, kw_only=True, tag="sandbox.skill_find"):
    """List the skills of `<skills_dir>`, or (with `query`) search them by word, confined to
    the skills dir whatever its links say; answered with `tenant`'s values cut out (and
    looked for in the skills' text with them cut)."""

    session_id: SessionId
    skills_dir: PathText
    query: Annotated[str, msgspec.Meta(max_length=400)] | None = None
    tenant: Identifier = "default"


class SkillEntry(Message, frozen=True, kw_only=True, tag="sandbox.skill_entry"):
    """One skill as `skill_find` shows it: what its front matter declares, never a secret's
    value (only names are declared), and its scripts (regular files under `scripts/`).

    `problem` is set, and nothing else but `name`, when its SKILL.md cannot be read as a
    skill (a link out, too large, misshapen front matter): the sentence says why. `excerpt`
    is a body line holding one of the query's words.
    """

    name: str
    description: str = ""
    allowed_tools: tuple[str, ...] = ()
    network: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    timeout_s: float | None = None
    scripts: tuple[str, ...] = ()
    more_scripts: bool = False
    excerpt: str = ""
    problem: str = ""


class SkillListing(Message, frozen=True, kw_only=True, tag="sandbox.skill_listing"):
    """The skills `FindSkills` found, best first for a query, at most a bounded number:
    `total` says how many there were (listed, or matching the query) before the cut, and
    `unread` whether the skills dir held more entries than are looked at."""

    skills: tuple[SkillEntry, ...] = ()
    total: int = 0
    unread: bool = False


ScriptArg = Annotated[str, msgspec.Meta(max_length=64 * KiB)]


class RunSkill(Message, frozen=True, kw_only=True, tag="sandbox.skill_run"):
    """Run `<skills_dir>/<name>/<script>` with `args` as `exec` says (network, secrets, limits).

    The sandbox service checks the script is the skill's own, picks its interpreter (its
    `#!` line, else its extension), and runs that argv in place of `exec.command` with the
    skill's directory read-only at `/skill`; `exec.command` only says what was asked.
    """

    skills_dir: PathText
    name: SkillName
    script: PathText
    args: Annotated[tuple[ScriptArg, ...], msgspec.Meta(max_length=256)] = ()
    exec: ExecRequest


class WriteSkill(Message, frozen=True, kw_only=True, tag="sandbox.skill_write"):
    """Write `<skills_dir>/<name>/SKILL.md` with only a name, a description and instructions."""

    session_id: SessionId
    skills_dir: PathText
    name: SkillName
    description: Annotated[str, msgspec.Meta(max_length=1024)]
    instructions: Annotated[str, msgspec.Meta(max_length=200 * KiB)]
