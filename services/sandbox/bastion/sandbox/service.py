"""The sandbox service's endpoints: `sandbox.exec`, `.files`, `.check`, `.check_code`,
`.release`, `.skill_read`, `.skill_find`, `.skill_run`, `.skill_write`, `.run_code` and
the background tasks' `.task_start`, `.task_list`, `.task_output` and `.task_stop`; and,
this replica alone, `sandbox.tasks.<replica>.output|stop|release` for the tasks it runs
(what another replica forwards to it).

Everything a command or a file tool answers, its errors too, leaves with every value of
the tenant's secrets cut out (`bastion.shared.secretcuts`; a large text in a worker thread,
in its tenant's turn: `bastion.shared.cutturns`); a call that reaches declared
hosts gets a grant carrying only digests of those values' forms, so the egress service
can cut them from what it records without holding them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio.to_process
import anyio.to_thread
import msgspec

from bastion.proto import subjects, toolinput
from bastion.proto.events import TaskEnded
from bastion.proto.sandbox import (
    CodeCheck,
    CodeReport,
    ExecRequest,
    ExecResult,
    FileRequest,
    FileResult,
    FindSkills,
    Limits,
    ReadSkill,
    ResolvedPaths,
    ResolvePaths,
    RunCode,
    RunSkill,
    SandboxCheck,
    SandboxReady,
    SandboxRelease,
    SandboxReleased,
    SkillDocument,
    SkillListing,
    WriteSkill,
)
from bastion.proto.tasks import (
    TaskList,
    TaskListing,
    TaskOutput,
    TaskRead,
    TaskRecord,
    TaskStart,
    TaskStarted,
    TaskStop,
    TaskView,
)
from bastion.proto.tools import NestedCall, NestedResult
from bastion.sandbox.codecheck import check_code
from bastion.sandbox.editing import edit_file
from bastion.sandbox.egress import EgressClient
from bastion.sandbox.files import read_file, read_file_now, write_file
from bastion.sandbox.finding import (
    Search,
    find_candidates,
    find_files,
    search_candidates,
    search_files,
)
from bastion.sandbox.hiding import PathJudge
from bastion.sandbox.patching import apply_patch
from bastion.sandbox.resolving import resolve_paths, resolve_paths_now
from bastion.sandbox.runcode import PYTHON, Ask, Relay, program_argv, program_pipes, runtime_file
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.sharedslots import SharedSlots
from bastion.sandbox.skillfind import find_skills
from bastion.sandbox.skillrun import script_command, skill_script
from bastion.sandbox.skills import checked_skills_dir, read_skill
from bastion.sandbox.skillwrite import write_skill
from bastion.sandbox.streaming import OutputStreams, StreamBounds
from bastion.sandbox.tasks.cwd import checked_cwd
from bastion.sandbox.tasks.holders import Holders
from bastion.sandbox.tasks.runner import STOP_TAKES_S, TaskLimits, Tasks
from bastion.sandbox.tasks.store import TaskStore
from bastion.sandbox.tenants import TenantSlots
from bastion.sandbox.usage import LEAST_FILE_BYTES, WorkspaceBound
from bastion.sandbox.walking import list_candidates, list_files
from bastion.sandbox.workspace import (
    CheckedWorkspaces,
    check_skills_dir,
    checked_read_only_dirs,
)
from bastion.shared.bus import Client, request
from bastion.shared.cancelling import Running, listen
from bastion.shared.codec import encode
from bastion.shared.cutturns import INLINE_CHARS, Cutter
from bastion.shared.errors import BastionError, InvalidInput, NotImplementedYet
from bastion.shared.leasing import LeaseClient, lease_key
from bastion.shared.linecuts import cut_around_gaps
from bastion.shared.metrics import sandboxes_running
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing import (
    BwrapBackend,
    ContainerLimits,
    DockerBackend,
    DockerSandboxes,
    HostIds,
    Network,
    SandboxBackend,
    SandboxFailed,
    SandboxSpec,
    configured_ids,
    parse_backend,
    parse_docker_backend,
    sandbox_ids,
)
from bastion.shared.sandboxing.bridge import EgressBridge
from bastion.shared.sandboxing.gitguard import closing_check
from bastion.shared.sandboxing.hostids import path_owner
from bastion.shared.sandboxing.output import CUT_MARKERS, OutputTap
from bastion.shared.sandboxing.warm import marker, sweep_marked
from bastion.shared.secretcuts import SecretCuts
from bastion.shared.service import RequestContext, Service
from bastion.shared.telemetry import span
from bastion.shared.version import VERSION

__all__ = ["Sandboxes", "output_cap", "redacted", "sandbox_service"]

_Found = TypeVar("_Found")
"""What a search's worker answers: its text, or the paths it would show."""


@dataclasses.dataclass(frozen=True)
class _FileTool:
    """How `sandbox.files` runs one file tool on the checked workspace, in a worker thread.

    `writes`: it is given the host user what it writes is for, and `git_writable`, and it
    refuses git's control paths (`gitguard`) unless the operator's `git_writable` lets it;
    the workspace's bound is checked first (`grows`: by how much the input may grow it).
    `in_process`: it runs in a worker process of its tenant instead (`Sandboxes._search`).
    `candidates`: for a tool whose answer names or shows other files, the paths it would
    show; each is judged as a read, and one the policy refuses is hidden (`run` is given
    the hidden ones).
    `now`: its answer had on the event loop when nothing of it can wait, or None, and
    `run` runs in the worker thread then (`files.read_file_now`).
    `cuts`: `run` (and `now`) take the session's redactor (`redactor=` for a writing
    tool, whose misses quote the file's lines), and cut the file's text of its values
    before they number or shorten its lines; a read then runs in the tenant's turn.
    """

    run: Callable[..., Any]
    writes: bool = False
    grows: Callable[[Any], int] = lambda _input: 0
    in_process: bool = False
    candidates: Callable[..., list[str]] | None = None
    now: Callable[..., str | None] | None = None
    cuts: bool = False


_FILE_TOOLS: dict[type, _FileTool] = {
    toolinput.ReadFileInput: _FileTool(read_file, now=read_file_now, cuts=True),
    toolinput.ListFilesInput: _FileTool(list_files, candidates=list_candidates),
    toolinput.FindFilesInput: _FileTool(find_files, candidates=find_candidates),
    toolinput.SearchFilesInput: _FileTool(
        search_files, in_process=True, candidates=search_candidates
    ),
    toolinput.WriteFileInput: _FileTool(
        write_file, writes=True, grows=lambda given: len(given.content.encode())
    ),
    toolinput.EditFileInput: _FileTool(edit_file, writes=True, cuts=True),
    toolinput.ApplyPatchInput: _FileTool(apply_patch, writes=True, cuts=True),
}
"""Each file tool by the type of its input: `sandbox.files`' whole dispatch."""

_SEARCH_CUT_CHARS: Final = INLINE_CHARS
"""A search's answer is cut as a large text (in a worker thread, in its tenant's turn):
what it holds is known only once it is back from its worker process."""

logger = logging.getLogger(__name__)


def _cut_after(read: Callable[[], str], cutter: Cutter) -> Callable[[], str]:
    """`read`, then its answer with `cutter`'s values cut, as one piece of work."""
    redactor = cutter.redactor

    def work() -> str:
        text = read()
        return redactor.redact(text) if redactor is not None and text else text

    return work


def output_cap(max_payload: int) -> int:
    """The most output a stream may keep so that a reply fits one bus message.

    Two streams, each of which can triple when bytes that are not UTF-8 become U+FFFD,
    and room for the rest of the reply and its headers.
    """
    return max(1024, (max_payload - 16 * 1024) // 6)


async def redacted(result: ExecResult, cutter: Cutter) -> ExecResult:
    """`result` with the session's leased values cut out of both streams and its
    connection line (off the event loop when they are large, in the tenant's turn). Where
    a stream's middle was left out, what is beside the gap is dropped as far as it could
    hold part of a value (`cut_around_gaps`): a value across it is never shown in halves."""
    redactor = cutter.redactor
    if redactor is None:
        return result

    def cut() -> ExecResult:
        return msgspec.structs.replace(
            result,
            stdout=cut_around_gaps(redactor, result.stdout, CUT_MARKERS),
            stderr=cut_around_gaps(redactor, result.stderr, CUT_MARKERS),
            connections=redactor.redact(result.connections),
        )

    return await cutter.run(len(result.stdout) + len(result.stderr), cut)


async def _relayed(
    backend: BwrapBackend,
    spec: SandboxSpec,
    code: str,
    ask: Ask,
) -> ExecResult:
    """The program's run, its pipes' relay beside it until the sandbox is gone."""
    with program_pipes() as ((requests, mine), (answers, theirs)):
        relay = Relay(mine, theirs, ask)
        async with anyio.create_task_group() as group:
            group.start_soon(relay.serve, code)
            result = await backend.run_program(
                spec, program_argv(requests, answers), [runtime_file()], [requests, answers]
            )
            group.cancel_scope.cancel()
    return result


class Sandboxes:
    """The endpoints' handlers: each checks the workspace, then runs in a sandbox or on it."""

    def __init__(
        self,
        settings: SandboxSettings,
        backend: SandboxBackend | None = None,
        max_payload: int = 1024 * 1024,
        leases: LeaseClient | None = None,
        egress: EgressClient | None = None,
        *,
        slots: SharedSlots,
        judge: PathJudge | None = None,
        streams: OutputStreams | None = None,
        client: Client | None = None,
        tasks: TaskStore | None = None,
    ) -> None:
        self._client = client
        self._state_dir = Path(settings.state_dir).expanduser().resolve()
        self.running = Running()
        """The commands running here by session and call id: what `calls.cancel` kills."""
        self._workspaces = CheckedWorkspaces(self._state_dir)
        self._backend = backend or BwrapBackend(
            settings.bwrap,
            settings.prlimit,
            cgroups=settings.cgroups,
            cpu_weight=settings.cpu_weight,
            setpriv=settings.setpriv,
            state_dir=self._state_dir,
            idle_s=settings.sandbox_idle_s,
        )
        self._host_ids = configured_ids(settings.sandbox_host_uid, settings.sandbox_host_gid)
        self.docker = DockerSandboxes(
            settings.docker_owner,
            ContainerLimits(
                memory_bytes=settings.docker_memory_bytes,
                pids=settings.docker_pids,
                cpus=settings.docker_cpus,
                tmp_bytes=settings.docker_tmp_bytes,
            ),
        )
        self._output_cap = output_cap(max_payload)
        self._search_timeout_s = settings.search_timeout_s
        self._git_writable = settings.git_writable
        self._bound = WorkspaceBound(settings.workspace_max_bytes)
        self._slots = slots
        self._searches = TenantSlots(
            settings.search_workers_per_tenant,
            settings.search_timeout_s,
            what="searches running",
            setting="BASTION_SEARCH_WORKERS_PER_TENANT",
            max_waiting=settings.search_queue_per_tenant,
            waiting_setting="BASTION_SEARCH_QUEUE_PER_TENANT",
        )
        # Worker processes are bounded per tenant by `_searches`, not by anyio's default
        # limiter, which every tenant would share (a flood of one would hold them all).
        self._search_processes = anyio.CapacityLimiter(math.inf)
        self._leases = leases
        self._egress = egress
        self._judge = judge
        self._streams = streams
        self._egress_socket = (
            Path(settings.egress_socket).expanduser() if settings.egress_socket else None
        )
        self.secrets = SecretCuts(leases, settings.redaction_refresh_s)
        self.tasks = (
            Tasks(
                tasks,
                self._state_dir,
                marker(self._state_dir),
                TaskLimits(
                    max_run_s=settings.tasks_max_run_s,
                    max_output_bytes=settings.tasks_max_output_bytes,
                    per_session=settings.tasks_max_per_session,
                    per_tenant=settings.tasks_max_per_tenant,
                    stop_wait_s=settings.tasks_stop_wait_s,
                    start_wait_s=settings.tenant_wait_s + settings.request_timeout_s,
                ),
                self._task_ended,
                holders=Holders(client, settings.request_timeout_s, STOP_TAKES_S)
                if client is not None
                else None,
                slots=slots,
            )
            if tasks is not None
            else None
        )

    def _spec(
        self,
        workspace: str,
        backend: str,
        network: str,
        limits: Limits,
        *,
        read_only_dirs: tuple[str, ...],
        session_id: str = "",
        tenant: str = "default",
    ) -> tuple[SandboxBackend, SandboxSpec]:
        """The backend a request names and the spec of its run, or why it is refused."""
        if limits.output_bytes > self._output_cap:
            limits = msgspec.structs.replace(limits, output_bytes=self._output_cap)
        chosen: SandboxBackend = self._backend
        mode: Network = "none"  # the Docker backend's network is in its target
        resolved = self._workspaces.check(workspace)
        host_ids = None  # the Docker backend runs as the workspace's owner itself
        if backend.startswith("docker:"):
            chosen = self.docker.backend(parse_docker_backend(backend, network))
        else:
            mode = parse_backend(backend, network)
            host_ids = self._owner(resolved)
        spec = SandboxSpec(
            workspace=resolved,
            network=mode,
            limits=limits,
            hidden=(self._state_dir,),
            read_only=checked_read_only_dirs(read_only_dirs, self._state_dir),
            git_writable=self._git_writable,
            session_id=session_id,
            tenant=tenant,
            host_ids=host_ids,
        )
        return chosen, spec

    def _spec_of(self, request: ExecRequest | CodeCheck) -> tuple[SandboxBackend, SandboxSpec]:
        """The backend and spec of a command's or a check's run, as its request names them."""
        return self._spec(
            request.workspace,
            request.backend,
            request.network,
            request.limits,
            read_only_dirs=request.read_only_dirs,
            session_id=request.session_id,
            tenant=request.tenant,
        )

    def _owner(self, workspace: Path) -> HostIds | None:
        """The host user a sandbox in `workspace` runs as and what is written there is for.

        Raises:
            SandboxFailed: the service is root and that user would be root.
        """
        return sandbox_ids(workspace, self._host_ids, f"the workspace {workspace}")

    async def exec(self, request: ExecRequest, _context: RequestContext) -> ExecResult:
        """Run one shell command in the session's sandbox; a failing command is a result too.
        A cancel of its call kills it (every process of it: the warm sandbox's init ends the
        command's pid namespace, a container's exec is killed) and answers `cancelled`."""
        with self.running.scope(request.session_id, request.call_id) as running:
            return await self._exec(request, request.command)
        raise running.error("this command")

    async def _cut_error(self, error: BastionError, tenant: str, session_id: str) -> None:
        """Cut the tenant's values out of an error's message (a file's lines it quotes)."""
        cutter = await self.secrets.cutter(tenant, session_id)
        if cutter.redactor:
            error.message = await cutter.cut(error.message)
            error.args = (error.message,)

    async def _exec(
        self, request: ExecRequest, command: str, skill_dir: Path | None = None
    ) -> ExecResult:
        """`_run`, its errors cut like its output."""
        try:
            return await self._run(request, command, skill_dir)
        except BastionError as error:
            await self._cut_error(error, request.tenant, request.session_id)
            raise

    async def _run(self, request: ExecRequest, command: str, skill_dir: Path | None) -> ExecResult:
        """Run `command` as `request` says: its leased secrets set and every value of its
        tenant cut from its output, and with declared hosts, the egress bridge under a grant
        for this call."""
        backend, spec = self._spec_of(request)
        spec, room = await self._bounded(dataclasses.replace(spec, skill_dir=skill_dir))
        bridged = request.network == "declared" and bool(request.declared_hosts)
        if bridged and request.backend != "bwrap":
            raise NotImplementedYet(
                "the `declared` network with declared hosts runs with the bwrap backend only "
                "for now (the Docker backend has no egress bridge yet): use the bwrap backend"
            )
        spec = await self._leased(request, spec)
        running = {"bastion.sandbox.backend": request.backend.split(":", 1)[0]}
        async with self._slots.slot(request.tenant), self._streamed(request) as tap:
            spec = dataclasses.replace(spec, tap=tap)
            sandboxes_running.add(1, running)
            try:
                with span("sandbox.run"):
                    if bridged:
                        result = await self._run_bridged(backend, spec, request, command)
                    else:
                        result = await backend.run(spec, command)
            finally:
                sandboxes_running.add(-1, running)
        return await redacted(
            self._noted(result, room),
            await self.secrets.cutter(request.tenant, request.session_id),
        )

    @asynccontextmanager
    async def _streamed(self, request: ExecRequest) -> AsyncIterator[OutputTap | None]:
        """The tap publishing the command's output as it comes, when its call asked for it
        (`streaming`), cut of every value its result is cut of; None otherwise."""
        if self._streams is None or not request.stream:
            yield None
            return
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        async with self._streams.opened(request, cutter) as tap:
            yield tap

    async def _leased(self, request: ExecRequest, spec: SandboxSpec) -> SandboxSpec:
        """`spec` with the secrets `request` names leased for its call as its environment
        (and remembered, so they are cut from what the session is answered)."""
        if not request.secrets:
            return spec
        if request.backend != "bwrap":
            raise NotImplementedYet(
                "secrets are given to commands of the bwrap backend only for now: run "
                "this skill with the bwrap backend"
            )
        if self._leases is None:
            raise InvalidInput("this sandbox service cannot lease secrets (no vault connection)")
        pairs = await self._leases.lease(
            request.tenant, request.session_id, request.call_id, request.secrets
        )
        self.secrets.remember(request.tenant, request.session_id, pairs)
        return dataclasses.replace(spec, secret_environment=tuple(pairs))

    def _tasks(self) -> Tasks:
        if self.tasks is None:
            raise NotImplementedYet("this sandbox service runs no background tasks")
        return self.tasks

    async def task_start(self, request: TaskStart, _context: RequestContext) -> TaskStarted:
        """`bg_run`: start a command in the background in the session's warm sandbox, with a
        command's limits and environment but a wall clock of its own; once per call id (a
        sending again is answered with the task the first one started). A cancel of its
        call ends the start (and every sending of it waiting on it) while its process has
        not started, having started nothing: its call id is free again."""
        given = request.exec
        with self.running.scope(given.session_id, given.call_id) as running:
            return await self._task_start(request)
        raise running.error("this bg_run's start")

    async def _task_start(self, request: TaskStart) -> TaskStarted:
        given = request.exec
        try:
            tasks = self._tasks()
            backend, spec = self._spec_of(given)
            if not isinstance(backend, BwrapBackend | DockerBackend) or (
                given.network == "declared" and given.declared_hosts
            ):
                raise NotImplementedYet(
                    "background tasks run in the bwrap backend's warm sandbox or the "
                    "session's Docker container, without declared hosts, for now: open the "
                    "session with one of those backends"
                )
            cwd = await anyio.to_thread.run_sync(checked_cwd, spec.workspace, request.cwd)
            spec, _room = await self._bounded(spec)
            spec = await self._leased(given, spec)
            leased = spec
            started = await tasks.start(
                session_id=given.session_id,
                tenant=given.tenant,
                call_id=given.call_id,
                command=given.command,
                label=request.label,
                timeout_ms=tasks.timeout_ms(request.timeout_ms),
                cutter=await self.secrets.cutter(
                    given.tenant, given.session_id, spec.secret_environment
                ),
                cuts=functools.partial(
                    self.secrets.cutter, given.tenant, given.session_id, spec.secret_environment
                ),
                starter=lambda output: backend.start_task(leased, given.command, output, cwd),
            )
        except BastionError as error:
            await self._cut_error(error, given.tenant, given.session_id)
            raise
        return started

    async def task_list(self, request: TaskList, _context: RequestContext) -> TaskListing:
        """`bg_list`: the session's tasks, newest first (another session's never)."""
        return await self._tasks().list(request)

    async def task_output(self, request: TaskRead, _context: RequestContext) -> TaskOutput:
        """`bg_output`: a stretch of one of the session's tasks' output."""
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        return await self._tasks().read(request, cutter)

    async def task_stop(self, request: TaskStop, _context: RequestContext) -> TaskView:
        """`bg_stop`: stop one of the session's tasks; the task as it is then."""
        return await self._tasks().stop(request)

    async def held_output(self, request: TaskRead, _context: RequestContext) -> TaskOutput:
        """`bg_output` forwarded by another replica: read from this replica's log."""
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        return await self._tasks().read_here(request, cutter)

    async def held_stop(self, request: TaskStop, _context: RequestContext) -> TaskView:
        """`bg_stop` forwarded by another replica: the task stopped here."""
        return await self._tasks().stop_here(request)

    async def held_release(
        self, request: SandboxRelease, _context: RequestContext
    ) -> SandboxReleased:
        """The session's close, forwarded by the replica that got it: released here."""
        if self.tasks is not None:
            await self.tasks.release_here(request.session_id)
        return await self._release_here(request.session_id)

    async def _task_ended(self, record: TaskRecord) -> None:
        """A task ended on its own (succeeded, failed, its time ran out): said in the log, and
        told on `events.task_ended.<tenant>` (never its output), which the front door tells
        the session's MCP client."""
        logger.info("background task %s ended %s", record.id, record.status)
        if self._client is None:
            return
        ended = TaskEnded(
            session_id=record.session_id,
            tenant=record.tenant,
            task_id=record.id,
            label=record.label,
            status=record.status,
            exit_code=record.exit_code,
            error=record.error,
            at=datetime.fromtimestamp(record.ended_at or time.time(), UTC),
        )
        await self._client.publish(subjects.event("task_ended", record.tenant), encode(ended))

    async def _bounded(self, spec: SandboxSpec) -> tuple[SandboxSpec, int | None]:
        """`spec` with no file allowed to grow past the room its workspace has left under
        `BASTION_WORKSPACE_MAX_BYTES` (but `LEAST_FILE_BYTES` at least), and that room
        (None: no bound)."""
        room = await anyio.to_thread.run_sync(self._bound.room, spec.workspace)
        if room is None:
            return spec, None
        most = min(spec.limits.file_size_bytes, max(LEAST_FILE_BYTES, room))
        limits = msgspec.structs.replace(spec.limits, file_size_bytes=most)
        return dataclasses.replace(spec, limits=limits), room

    def _noted(self, result: ExecResult, room: int | None) -> ExecResult:
        """The result, its stderr first saying why files could not grow, when they could not."""
        if room is None or room > 0:
            return result
        note = f"bastion: {self._bound.over(room)}\n"
        return msgspec.structs.replace(result, stderr=note + result.stderr)

    async def _run_bridged(
        self, backend: SandboxBackend, spec: SandboxSpec, request: ExecRequest, command: str
    ) -> ExecResult:
        """Run with the egress bridge under a grant for this call, then revoke it and add
        its connection line to the result."""
        if self._egress is None or self._egress_socket is None:
            raise InvalidInput(
                "this sandbox service has no egress proxy socket (BASTION_EGRESS_SOCKET), so "
                "a command cannot reach its declared hosts: start it with `bastion up`, or "
                "set BASTION_EGRESS_SOCKET to the egress service's unix: listen path"
            )
        grant = await self._egress.grant(
            request.session_id,
            request.tenant,
            request.call_id,
            request.declared_hosts,
            spec.limits.wall_s,
            cuts=[
                *spec.secret_environment,  # the call's own values first, should there be too many
                *sorted(await self.secrets.pairs(request.tenant, request.session_id)),
            ],
        )
        bridge = EgressBridge(self._egress_socket, grant.grant_id, grant.secret)
        try:
            result = await backend.run(dataclasses.replace(spec, bridge=bridge), command)
        finally:
            with anyio.CancelScope(shield=True):
                connections = await self._egress.close(grant.grant_id)
        return msgspec.structs.replace(result, connections=connections)

    async def skill_run(self, request: RunSkill, _context: RequestContext) -> ExecResult:
        """Run one of a skill's own scripts, the skill read-only at `/skill`, as `exec` says."""
        if request.exec.backend != "bwrap":
            raise NotImplementedYet(
                "skills' scripts run with the bwrap backend only for now: open the session "
                "with the bwrap backend"
            )
        skills_dir = checked_skills_dir(request.skills_dir, self._state_dir)
        run = await anyio.to_thread.run_sync(skill_script, skills_dir, request.name, request.script)
        command = await anyio.to_thread.run_sync(script_command, run, request.args)
        with self.running.scope(request.exec.session_id, request.exec.call_id) as running:
            return await self._exec(request.exec, command, run.skill_dir)
        raise running.error(f"this run of skill {request.name}'s script")

    async def run_code(self, asked: RunCode, _context: RequestContext) -> ExecResult:
        """Run a `run_code` program in a cold sandbox with no workspace and no network, as
        the session's owner with its limits, relaying each tool it calls (docs/sandbox.md).
        A cancel of its call kills the program (its sandbox's whole process group) and
        gives its tenant's sandbox slot back."""
        with self.running.scope(asked.session_id, asked.call_id) as running:
            return await self._run_code(asked)
        raise running.error("this program")

    async def _run_code(self, asked: RunCode) -> ExecResult:
        backend = self._backend
        if asked.backend != "bwrap" or not isinstance(backend, BwrapBackend):
            raise NotImplementedYet(
                "run_code runs with the bwrap backend only: a Docker session's container "
                "shows the workspace to all it runs; use shell, or a bwrap session"
            )
        if not os.access(PYTHON, os.X_OK):
            raise SandboxFailed(f"run_code needs {PYTHON} on this machine: install python3")
        if self._client is None:
            raise InvalidInput("this sandbox service has no bus to relay a program's calls on")
        _, spec = self._spec(
            asked.workspace,
            asked.backend,
            "none",
            asked.limits,
            read_only_dirs=(),
            tenant=asked.tenant,
        )
        spec = dataclasses.replace(spec, workspace_shown=False)
        client, deadline_s = self._client, asked.limits.wall_s

        async def ask(tool: str, given: dict[str, Any]) -> str:
            nested = NestedCall(parent_call_id=asked.call_id, tool=tool, input=given)
            answer: NestedResult = await request(
                client,
                subjects.session_nested(asked.session_id),
                nested,
                NestedResult,
                timeout_s=deadline_s,
            )
            return answer.text

        running = {"bastion.sandbox.backend": "bwrap"}
        async with self._slots.slot(asked.tenant):
            sandboxes_running.add(1, running)
            try:
                with span("sandbox.run_code"):
                    result = await _relayed(backend, spec, asked.code, ask)
            finally:
                sandboxes_running.add(-1, running)
        return await redacted(result, await self.secrets.cutter(asked.tenant, asked.session_id))

    async def skill_write(self, request: WriteSkill, _context: RequestContext) -> FileResult:
        """Write a skill's SKILL.md with only its name, description and instructions."""
        skills_dir = checked_skills_dir(request.skills_dir, self._state_dir)
        owner = path_owner(skills_dir) if os.geteuid() == 0 else None
        text = await anyio.to_thread.run_sync(write_skill, skills_dir, request, owner)
        return FileResult(text=text)

    async def files(self, request: FileRequest, _context: RequestContext) -> FileResult:
        """Run one file tool on the workspace, confined to it; its answer and its error
        (which may quote the file's lines) with the tenant's values cut out.

        A read that cannot be answered at once (`read_file_now`), or a listing, runs in a
        worker thread in its tenant's turn (`bastion.shared.cutturns`) with its cut: a
        tenant's large reads wait behind its own, one at a time, never ahead of another
        tenant's calls."""
        given = request.input
        tool = _FILE_TOOLS[type(given)]
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        redactor = cutter.redactor
        try:
            workspace = self._workspaces.check(request.workspace)
            hidden = await self._hidden(workspace, request, tool)
            if tool.in_process:
                hold = redactor.longest if redactor else 0
                found: Search = await self._search(
                    tool.run, workspace, request.tenant, given, hidden, hold
                )
                text = await cutter.run(_SEARCH_CUT_CHARS, lambda: found.text(redactor))
            elif tool.writes:
                text = await anyio.to_thread.run_sync(self._write, tool, workspace, given, redactor)
            elif hidden is not None:
                read = functools.partial(tool.run, workspace, given, hidden)
                return FileResult(text=await cutter.in_thread(_cut_after(read, cutter)))
            elif tool.cuts:
                text = await self._read(tool, workspace, given, cutter)
            elif tool.now is None or (now := tool.now(workspace, given)) is None:
                read = functools.partial(tool.run, workspace, given)
                return FileResult(text=await cutter.in_thread(_cut_after(read, cutter)))
            else:
                text = now
        except BastionError as error:
            await self._cut_error(error, request.tenant, request.session_id)
            raise
        return FileResult(text=await cutter.cut(text))

    async def _read(self, tool: _FileTool, workspace: Path, given: Any, cutter: Cutter) -> str:
        """A tool that cuts the file's text itself (`_FileTool.cuts`): on the event loop
        when nothing of it can wait (a small file), else in a worker thread in the tenant's
        turn, with or without values to cut (a tenant's large reads wait behind its own)."""
        redactor = cutter.redactor
        if tool.now is not None and (now := tool.now(workspace, given, redactor)) is not None:
            return now
        if redactor is None:
            return await cutter.in_thread(lambda: str(tool.run(workspace, given)))
        return await cutter.in_thread(lambda: str(tool.run(workspace, given, redactor)))

    def _write(
        self, tool: _FileTool, workspace: Path, given: Any, redactor: Redactor | None
    ) -> str:
        """A writing tool's whole work, in one worker thread: the workspace's bound checked,
        its owner found, then the write (given `redactor` when it `cuts`)."""
        self._bound.check_write(workspace, tool.grows(given))
        owner = self._owner(workspace)
        cuts = {"redactor": redactor} if tool.cuts else {}
        text: str = tool.run(workspace, given, owner, git_writable=self._git_writable, **cuts)
        return text

    async def resolve(self, request: ResolvePaths, _context: RequestContext) -> ResolvedPaths:
        """The paths a file call touches, resolved through the workspace's links: on the
        event loop when that cannot wait (`resolve_paths_now`), in a worker thread if not."""
        workspace = self._workspaces.check(request.workspace)
        paths = resolve_paths_now(workspace, request)
        if paths is None:
            paths = await anyio.to_thread.run_sync(resolve_paths, workspace, request)
        return ResolvedPaths(paths=paths)

    async def skill_read(self, request: ReadSkill, _context: RequestContext) -> SkillDocument:
        """A skill's SKILL.md and its front matter, read confined to the skills dir; its
        text and description, and its errors, with the tenant's values cut out (read and
        cut in a worker thread, in the tenant's turn)."""
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        redactor = cutter.redactor

        def read() -> SkillDocument:
            document = read_skill(checked_skills_dir(request.skills_dir, self._state_dir), request)
            if redactor is None:
                return document
            return msgspec.structs.replace(
                document,
                text=redactor.redact(document.text),
                description=redactor.redact(document.description),
            )

        try:
            return await cutter.in_thread(read)
        except BastionError as error:
            await self._cut_error(error, request.tenant, request.session_id)
            raise

    async def skill_find(self, request: FindSkills, _context: RequestContext) -> SkillListing:
        """The skills dir's skills and what each declares, or those matching a query; what
        each says cut of the tenant's values before it is looked in or shortened (in a
        worker thread, in the tenant's turn), and the errors cut too."""
        cutter = await self.secrets.cutter(request.tenant, request.session_id)
        redactor = cutter.redactor

        def find() -> SkillListing:
            skills_dir = checked_skills_dir(request.skills_dir, self._state_dir)
            return find_skills(skills_dir, request, redactor)

        try:
            return await cutter.in_thread(find)
        except BastionError as error:
            await self._cut_error(error, request.tenant, request.session_id)
            raise

    async def _hidden(
        self, workspace: Path, request: FileRequest, tool: _FileTool
    ) -> frozenset[str] | None:
        """For a tool whose answer names or shows other files (`tool.candidates`), the paths
        it may not show: those the policy keeps from the session's reads, of the paths it
        would show (none without a `judge`); None for the other tools."""
        if tool.candidates is None:
            return None
        judged = getattr(request, "judge", None)
        if judged is None or self._judge is None:
            return frozenset()
        candidates: list[str]
        if tool.in_process:
            candidates = await self._search(
                tool.candidates, workspace, request.tenant, request.input
            )
        else:
            candidates = await anyio.to_thread.run_sync(tool.candidates, workspace, request.input)
        return await self._judge.hidden(judged, candidates)

    async def _search(
        self,
        function: Callable[..., _Found],
        workspace: Path,
        tenant: str,
        given: msgspec.Struct,
        *args: Any,
    ) -> _Found:
        """A search in a worker process, killed at the deadline: a pattern with nested
        repetition can backtrack for ever, and a thread cannot be stopped, a process can.
        It runs in one of its tenant's own workers, so another tenant's never wait for it."""
        async with self._searches.slot(tenant):
            with anyio.move_on_after(self._search_timeout_s):
                found: _Found = await anyio.to_process.run_sync(
                    function,
                    workspace,
                    given,
                    *args,
                    cancellable=True,
                    limiter=self._search_processes,
                )
                return found
        raise InvalidInput(
            f"the search did not finish within {self._search_timeout_s:g} s and was stopped: "
            "a pattern with nested repetition such as (a+)+ can take for ever; simplify it, "
            "or narrow the search with path or glob"
        )

    async def check_code(self, request: CodeCheck, _context: RequestContext) -> CodeReport:
        """Run the workspace's checker or tests in the session's sandbox, like a command; a
        cancel of its call kills it as it kills a command."""
        with self.running.scope(request.session_id, request.call_id) as running:
            return await self._check_code(request)
        raise running.error(f"this {request.what} run")

    async def _check_code(self, request: CodeCheck) -> CodeReport:
        backend, spec = self._spec_of(request)

        spec, room = await self._bounded(spec)
        cutter = await self.secrets.cutter(request.tenant, request.session_id)

        async def run(command: str) -> ExecResult:
            """The run, its output cut before the report picks its problems or its tail."""
            async with self._slots.slot(request.tenant):
                result = self._noted(await backend.run(spec, command), room)
            return await redacted(result, cutter)

        try:
            program, text = await check_code(spec.workspace, request, run)
        except BastionError as error:
            await self._cut_error(error, request.tenant, request.session_id)
            raise
        return CodeReport(program=program, text=await cutter.cut(text))

    async def check(self, request: SandboxCheck, _context: RequestContext) -> SandboxReady:
        """Run `true` in the sandbox a session would get; `sandbox_failed` if it does not.
        A skills dir that every skill call would refuse (missing, in the state dir) is
        refused here, at the session's opening."""
        if request.skills_dir is not None:
            checked_skills_dir(request.skills_dir, self._state_dir)
        backend, spec = self._spec(
            request.workspace,
            request.backend,
            request.network,
            Limits(),
            read_only_dirs=request.read_only_dirs,
        )
        if request.skills_dir is not None:
            check_skills_dir(request.skills_dir, spec.workspace)
        detail = await backend.check(spec)
        return SandboxReady(backend=request.backend, detail=detail)

    async def release(self, request: SandboxRelease, _context: RequestContext) -> SandboxReleased:
        """Remove what a closed session kept (its Docker container); nothing held is fine.
        Its background tasks end here and on every replica that runs one of them."""
        if self.tasks is not None:
            await self.tasks.release(request.tenant, request.session_id)
        released = await self._release_here(request.session_id)
        if request.workspace is not None and not self._git_writable:
            await self._closing_check(request.session_id, Path(request.workspace))
        return released

    async def _closing_check(self, session_id: str, workspace: Path) -> None:
        """Once nothing of the session runs, check its workspace's git as a run's start
        does: what something that outlived a sweep left (a `commondir`, a linked
        `alternates`) is moved aside before host tools read it (docs/git-protection.md)."""

        try:
            found = await anyio.to_thread.run_sync(closing_check, workspace)
        except (BastionError, OSError) as error:
            logger.warning(
                "the closed session's workspace could not be checked",
                extra={"session": session_id, "why": str(error)},
            )
            return
        for note in found:
            logger.warning(note, extra={"session": session_id})

    async def _release_here(self, session_id: str) -> SandboxReleased:
        """Forget the session's values and close what this replica keeps of it."""
        self.secrets.forget(session_id)
        if isinstance(self._backend, BwrapBackend) and self._backend.warm is not None:
            await self._backend.warm.release(session_id)
        return SandboxReleased(containers=await self.docker.release(session_id))

    async def close_idle(self) -> None:
        """Close the warm sandboxes idle for `BASTION_SANDBOX_IDLE_S`, checking now and then."""
        warm = self._backend.warm if isinstance(self._backend, BwrapBackend) else None
        if warm is None:
            return
        while True:
            await anyio.sleep(min(warm.idle_s / 4, 5.0))
            await warm.close_idle()

    async def aclose(self) -> None:
        """Close every warm sandbox and every Docker container this service holds."""
        with anyio.CancelScope(shield=True):
            if isinstance(self._backend, BwrapBackend):
                await self._backend.aclose()
            await self.docker.aclose()

    def tasks_running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Follow background tasks for the block; its end stops every live one."""
        return self.tasks.running() if self.tasks is not None else contextlib.nullcontext()

    async def sweep(self) -> None:
        """End the warm sandboxes and remove the containers an earlier run left (no Docker
        engine: no containers to remove); the background tasks it left unfinished are
        marked `lost`, never silently gone."""
        if isinstance(self._backend, BwrapBackend) and self._backend.warm is not None:
            killed = sweep_marked(self._state_dir)
            if killed:
                logger.info("ended %d process(es) of an earlier run's warm sandboxes", killed)
            await self._backend.prepare()
        if self.tasks is not None:
            lost = await self.tasks.mark_lost()
            if lost:
                logger.info("marked %d background task(s) of an earlier run lost", lost)
        if isinstance(self._backend, BwrapBackend):
            removed = self._backend.remove_stale_cgroups()
            if removed:
                logger.info("removed %d empty cgroup(s) a killed service left", removed)
        try:
            await self.docker.version()
        except SandboxFailed:
            logger.info("no Docker engine answers: Docker sandboxes unavailable until one does")
            return
        await self.docker.sweep()


@asynccontextmanager
async def sandbox_service(client: Client, settings: SandboxSettings) -> AsyncIterator[Service]:
    leases = LeaseClient(client, lease_key(settings.sandbox_key_file), settings.request_timeout_s)
    egress = EgressClient(client, settings.request_timeout_s)
    slots = await SharedSlots.open(
        client,
        settings.sandbox_slots_bucket,
        settings.max_sandboxes_per_tenant,
        settings.tenant_wait_s,
        lease_s=settings.sandbox_slot_lease_s,
    )
    judge = PathJudge(client, settings.request_timeout_s)
    tasks = await TaskStore.open(client, settings.tasks_bucket)
    sandboxes = Sandboxes(
        settings,
        max_payload=client.max_payload,
        leases=leases,
        egress=egress,
        slots=slots,
        judge=judge,
        streams=OutputStreams(
            client,
            StreamBounds(
                interval_s=settings.stream_interval_s,
                chunk_bytes=settings.stream_chunk_bytes,
                total_bytes=settings.stream_total_bytes,
            ),
        ),
        client=client,
        tasks=tasks,
    )
    await sandboxes.sweep()
    await listen(client, sandboxes.running)
    service = Service(
        "sandbox", VERSION, "Runs shell commands and file tools inside a session's workspace."
    )
    service.add_endpoint("exec", subjects.SANDBOX_EXEC, ExecRequest, sandboxes.exec)
    service.add_endpoint("files", subjects.SANDBOX_FILES, FileRequest, sandboxes.files)
    service.add_endpoint("resolve", subjects.SANDBOX_RESOLVE, ResolvePaths, sandboxes.resolve)
    service.add_endpoint("check", subjects.SANDBOX_CHECK, SandboxCheck, sandboxes.check)
    service.add_endpoint("check_code", subjects.SANDBOX_CHECK_CODE, CodeCheck, sandboxes.check_code)
    service.add_endpoint("release", subjects.SANDBOX_RELEASE, SandboxRelease, sandboxes.release)
    service.add_endpoint("skill_read", subjects.SANDBOX_SKILL_READ, ReadSkill, sandboxes.skill_read)
    service.add_endpoint(
        "skill_find", subjects.SANDBOX_SKILL_FIND, FindSkills, sandboxes.skill_find
    )
    service.add_endpoint("skill_run", subjects.SANDBOX_SKILL_RUN, RunSkill, sandboxes.skill_run)
    service.add_endpoint(
        "skill_write", subjects.SANDBOX_SKILL_WRITE, WriteSkill, sandboxes.skill_write
    )
    service.add_endpoint("run_code", subjects.SANDBOX_RUN_CODE, RunCode, sandboxes.run_code)
    service.add_endpoint("task_start", subjects.SANDBOX_TASK_START, TaskStart, sandboxes.task_start)
    service.add_endpoint("task_list", subjects.SANDBOX_TASK_LIST, TaskList, sandboxes.task_list)
    service.add_endpoint(
        "task_output", subjects.SANDBOX_TASK_OUTPUT, TaskRead, sandboxes.task_output
    )
    service.add_endpoint("task_stop", subjects.SANDBOX_TASK_STOP, TaskStop, sandboxes.task_stop)
    if sandboxes.tasks is not None:
        replica = sandboxes.tasks.replica
        held = functools.partial(subjects.sandbox_task_held, replica)
        service.add_endpoint("held_output", held("output"), TaskRead, sandboxes.held_output)
        service.add_endpoint("held_stop", held("stop"), TaskStop, sandboxes.held_stop)
        service.add_endpoint(
            "held_release", held("release"), SandboxRelease, sandboxes.held_release
        )
    try:
        async with anyio.create_task_group() as group, sandboxes.tasks_running():
            group.start_soon(sandboxes.close_idle)
            yield service
            group.cancel_scope.cancel()
    finally:
        await sandboxes.aclose()
