"""Running background tasks: start one in the session's warm sandbox, follow it to its end
(its log, its wall clock), stop it, read its output, list a session's, and end them when
their session closes or the service stops; at start, mark `lost` those an earlier run of
this service left unfinished. A start whose requester gives up (its call cancelled) or whose
session closes before its process is started ends there, having started nothing; a task is
never started in a closed session. A request for a task another replica runs is forwarded to it
(`Holders`); one whose replica is gone marks the task `lost` (docs/sandbox.md, "Background
tasks")."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec
import nats.errors
from anyio.abc import TaskGroup, TaskStatus

from bastion.proto.errors import ErrorReply
from bastion.proto.tasks import (
    LIVE_STATUSES,
    StoppedBy,
    TaskList,
    TaskListing,
    TaskOutput,
    TaskRead,
    TaskRecord,
    TaskStarted,
    TaskStop,
    TaskView,
)
from bastion.proto.toolinput import BgOutputInput
from bastion.sandbox.sharedslots import SharedSlots
from bastion.sandbox.tasks.holders import Holders
from bastion.sandbox.tasks.log import TaskLog, read_page
from bastion.sandbox.tasks.store import TaskClaim, TaskStore, new_task_id
from bastion.shared.cutturns import Cutter
from bastion.shared.errors import (
    BastionError,
    Cancelled,
    NoResponders,
    NotFound,
    RemoteError,
    Unavailable,
)
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing.task import SandboxTask

__all__ = ["STOP_GRACE_S", "STOP_TAKES_S", "TaskLimits", "Tasks"]

logger = logging.getLogger(__name__)

STOP_GRACE_S: Final = 3.0
"""How long a stopped task has between SIGTERM and SIGKILL."""
PAST_HEAD_PAUSE_S: Final = 0.005
"""How long the log's reader pauses after each read once the head is full: past it the
output is mostly thrown away, so it is read at a bounded pace (at most a pipe's 64 KiB per
pause, some 12 MiB/s) and a task writing faster waits on its full pipe, rather than have
the service read, and the task write, as fast as both can."""
_DRAIN_S: Final = 5.0
"""How long the log is still read once every process of the task is gone."""
STOP_TAKES_S: Final = STOP_GRACE_S + _DRAIN_S
"""The longest a stop takes: its grace, then the log drained."""
KILL_AGAIN_S: Final = 1.0
"""How often a stopped task's processes are killed again while one is left."""
KILLS: Final = 600
"""How many times they are killed at most (ten minutes): the stop gives up on a process
the kernel keeps from dying (in uninterruptible sleep), and says so in the log."""
_CLAIM_POLL_S: Final = 0.1

Starter = Callable[[int], Awaitable[SandboxTask]]
"""Starts the task's command, both its streams written to the descriptor it is given."""
Ended = Callable[[TaskRecord], Awaitable[None]]
"""Told of a task that ended on its own (succeeded, failed, its time ran out)."""
Cuts = Callable[[], Awaitable[Cutter]]
"""The session's cuts as they are now (values stored or leased since included)."""

MAX_CLOSED: Final = 4096
"""How many closed sessions this replica remembers, to refuse their starts at once (past
that, the tasks bucket's mark of the close refuses them once they have a slot)."""


_NOTE: Final = (
    "The task runs in this session's sandbox (its network too: a server it starts is "
    "reachable from later shell commands). Read its output with bg_output (offset 0, then "
    "each answer's next_offset); stop it with bg_stop. A client of the MCP front door may be "
    "told when it ends on its own (a log message naming it); do not count on it: check "
    "bg_output (eof) or bg_list."
)

KEPT_ENDED: Final = 32
"""How many ended tasks a session keeps (records and logs) for `bg_list` and `bg_output`;
starting one more forgets the oldest, and a session's close removes their logs."""


@dataclass(frozen=True)
class TaskLimits:
    """What the operator allows: `BASTION_TASKS_*`."""

    max_run_s: float = 3600.0
    max_output_bytes: int = 2 * 1024 * 1024
    per_session: int = 4
    per_tenant: int = 16
    stop_wait_s: float = 5.0
    """How long `bg_stop` waits for the task to end before answering it as it is (the
    stop goes on): `BASTION_TASKS_STOP_WAIT_S`."""
    start_wait_s: float = 90.0
    """How long a start sent again with its call id waits for its first sending's start
    to finish, to answer with its task."""


@dataclass
class _Running:
    """A task this service follows."""

    record: TaskRecord
    handle: SandboxTask
    exited: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set once its final record is written."""
    stopping: bool = False
    """A stop of it is under way (one at a time, whoever asked)."""
    log: TaskLog | None = None

    @property
    def holds(self) -> int:
        """The most characters of its output its log holds back at a time (as its cuts
        are now)."""
        return self.log.holds if self.log is not None else 0


@dataclass
class _Starting:
    """A start under way, until its task is running (or it failed): a close of its session
    ends it while it waits for a sandbox slot, and waits for it otherwise."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    waiting: bool = True
    """It waits for a slot (a close cancels it); past that it is waited for."""


def _closed_error(session_id: str) -> Cancelled:
    return Cancelled(
        f"session {session_id} was closed before this bg_run's task started: nothing ran, "
        "and nothing runs in that session any more; open a new session to run it"
    )


def _not_started(error: str) -> Callable[[TaskRecord], TaskRecord]:
    """The change of a record whose task was never started."""
    return lambda r: msgspec.structs.replace(r, status="failed", error=error, ended_at=time.time())


def _view(record: TaskRecord) -> TaskView:
    fields = msgspec.structs.asdict(record)
    for name in ("session_id", "tenant", "owner", "replica"):
        del fields[name]
    return TaskView(**fields)


def _ended(record: TaskRecord, status: int | None, seen: int) -> TaskRecord | None:
    """The record of a task whose processes are all gone, by how it stood; None if it had
    ended already (a terminal state is never left)."""
    now = time.time()
    if record.status == "running":
        if status is None:
            return msgspec.structs.replace(
                record, status="failed", error="sandbox_ended", ended_at=now, output_bytes=seen
            )
        return msgspec.structs.replace(
            record,
            status="succeeded" if status == 0 else "failed",
            exit_code=status,
            error="" if status == 0 else "exit_status",
            ended_at=now,
            output_bytes=seen,
        )
    if record.status == "stopping":
        timed_out = record.stopped_by == "timeout"
        return msgspec.structs.replace(
            record,
            status="failed" if timed_out else "cancelled",
            error="timeout" if timed_out else "",
            exit_code=status,
            ended_at=now,
            output_bytes=seen,
        )
    return None


def _refusal(error: BastionError, redactor: Redactor | None) -> ErrorReply:
    """`error` as a task's claim keeps it, with the session's values cut."""
    message = redactor.redact(error.message) if redactor else error.message
    return ErrorReply(code=error.code, message=message[:4096])


def _gone(record: TaskRecord) -> TaskRecord | None:
    """The record of a live task whose replica is gone; None if it had ended already."""
    if record.status not in LIVE_STATUSES:
        return None
    return msgspec.structs.replace(
        record, status="lost", error="replica_gone", ended_at=time.time()
    )


class Tasks:
    """The background tasks of this sandbox service: those this replica runs, and the way
    to the replica running any other (`holders`; None: every task is run here)."""

    def __init__(
        self,
        store: TaskStore,
        state_dir: Path,
        owner: str,
        limits: TaskLimits,
        ended: Ended,
        *,
        holders: Holders | None = None,
        slots: SharedSlots | None = None,
    ) -> None:
        self._store = store
        self._logs = state_dir / "tasks"
        self._owner = owner
        self.replica = secrets.token_hex(8)
        """This process's id among the sandbox replicas: fresh each start."""
        self._holders = holders
        self._slots = slots
        self.limits = limits
        self._on_ended = ended
        self._running: dict[str, _Running] = {}
        self._starting: dict[str, list[_Starting]] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()
        """Sessions closed here (the latest `MAX_CLOSED`): their starts are refused."""
        self._group: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Follow tasks while the block runs; at its end, every live task is stopped
        (origin `shutdown`) and its processes are gone."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop_all(list(self._running.values()), "shutdown")
                self._group = None
                group.cancel_scope.cancel()

    def log_path(self, record: TaskRecord) -> Path:
        """Where the service keeps a task's log: under its state dir, which no sandbox sees."""
        return self._logs / record.session_id / f"{record.id}.log"

    def timeout_ms(self, asked: int | None) -> int:
        """A task's wall clock: what was asked, capped by `BASTION_TASKS_MAX_RUN_S`."""
        most = int(self.limits.max_run_s * 1000)
        return most if asked is None else min(asked, most)

    async def start(
        self,
        *,
        session_id: str,
        tenant: str,
        command: str,
        label: str,
        timeout_ms: int,
        cutter: Cutter,
        starter: Starter,
        call_id: str = "",
        cuts: Cuts | None = None,
    ) -> TaskStarted:
        """Hold one of the tenant's sandbox slots, count, record and start a task, and
        follow it to its end, its log cut with `cutter`, then with what `cuts` gives as
        the output comes (values stored or leased since it started). A start is made once
        per `call_id` (when given): sent again, it is answered with the task its first
        sending started (waiting for that start to finish), and one whose first sending
        failed is made anew. A start whose caller is cancelled before its process started
        ends having started nothing (one cancelled just as its process started stops it
        again), and so does one whose session closes meanwhile.

        Raises:
            TenantBusy: the tenant's sandboxes (commands and tasks) stayed at their cap.
            Unavailable: the session or the tenant has as many live tasks as it may, or
                the service is stopping.
            SandboxFailed: the command could not be started (its record says `failed`).
            Cancelled: the session was closed.
        """
        if self._group is None:
            raise Unavailable("the sandbox service is stopping: start the task again shortly")
        if session_id in self._closed:
            raise _closed_error(session_id)
        record = TaskRecord(
            id=new_task_id(),
            session_id=session_id,
            tenant=tenant,
            owner=self._owner,
            replica=self.replica,
            command=command,
            label=label or command[:60],
            timeout_ms=timeout_ms,
            started_at=time.time(),
        )
        while call_id:
            claim = await self._store.claim(tenant, session_id, call_id, record.id)
            if claim is None:
                break
            answered = await self._started_before(tenant, session_id, call_id, claim)
            if answered is not None:
                return answered
        try:
            await self._forget_oldest(tenant, session_id)
            started: TaskStarted = await self._group.start(
                self._run, record, cutter, starter, call_id, cuts
            )
        except BastionError as error:
            if call_id:
                with anyio.CancelScope(shield=True):
                    await self._settle_claim(record, call_id, _refusal(error, cutter.redactor))
            raise
        except BaseException:
            if call_id:
                with anyio.CancelScope(shield=True):
                    await self._settle_claim(record, call_id, None)
            raise
        return started

    async def _started_before(
        self, tenant: str, session_id: str, call_id: str, claim: TaskClaim
    ) -> TaskStarted | None:
        """The task an earlier sending of the call started, once it has started; None if
        that start was cancelled, having started nothing (this sending starts it then).

        Raises:
            RemoteError: that start was refused (the same refusal).
            Unavailable: it is still being started after `start_wait_s`.
        """
        found: TaskClaim | None = claim
        with anyio.move_on_after(self.limits.start_wait_s):
            while found is not None and not found.started and found.refused is None:
                await anyio.sleep(_CLAIM_POLL_S)
                found = await self._store.claimed(tenant, session_id, call_id)
        if found is None:
            return None
        if found.refused is not None:
            raise RemoteError(found.refused.code, found.refused.message)
        if not found.started:
            raise Unavailable(
                f"this bg_run call (call id {call_id}) was sent before and its task is still "
                "being started: send it again with the same call id to be answered with its "
                "task, or look for it with bg_list"
            )
        record = await self._store.get(tenant, session_id, found.task_id)
        return TaskStarted(
            id=record.id,
            label=record.label,
            status=record.status,
            timeout_ms=record.timeout_ms,
            note=(
                "This call was sent before and its first sending started this task (that "
                "answer was lost on the way); it was not started again. " + _NOTE
            ),
        )

    async def _settle_claim(
        self, record: TaskRecord, call_id: str, refusal: ErrorReply | None
    ) -> None:
        """The call's start failed, having started nothing: its claim keeps the refusal a
        sending of it again is answered with, or (cancelled, no refusal to give) goes, so a
        sending again starts it."""
        tenant, session_id = record.tenant, record.session_id
        try:
            if refusal is not None:
                await self._store.refused(tenant, session_id, call_id, refusal)
            else:
                await self._store.unclaim(tenant, session_id, call_id)
        except (BastionError, nats.errors.Error) as error:
            logger.warning(
                "a failed task start's claim was not settled: a sending again waits for it",
                extra={"session": session_id, "error_type": type(error).__name__},
            )

    def _slot(self, tenant: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One of the tenant's sandbox slots (`BASTION_MAX_SANDBOXES_PER_TENANT`), held while
        the task lives: a task is a process tree with a command's limits, so it counts among
        the tenant's sandboxes."""
        return self._slots.slot(tenant) if self._slots is not None else contextlib.nullcontext()

    async def _run(
        self,
        record: TaskRecord,
        cutter: Cutter,
        starter: Starter,
        call_id: str,
        cuts: Cuts | None,
        *,
        task_status: TaskStatus[TaskStarted],
    ) -> None:
        """Take a sandbox slot, count, record and start the task, answer it started, and
        follow it to its end; the slot is given back once its processes are gone. Until
        its process is started, a close of its session ends the start (`release_here`)."""
        starting = _Starting()
        session_id = record.session_id
        self._starting.setdefault(session_id, []).append(starting)
        try:
            with starting.scope:
                async with self._slot(record.tenant):
                    starting.waiting = False
                    await self._begin(
                        record,
                        cutter=cutter,
                        starter=starter,
                        call_id=call_id,
                        cuts=cuts,
                        starting=starting,
                        task_status=task_status,
                    )
            if starting.scope.cancelled_caught:
                raise _closed_error(session_id)
        finally:
            self._started(session_id, starting)

    def _started(self, session_id: str, starting: _Starting) -> None:
        """The start is over: its task runs (and is followed), or it failed."""
        starting.done.set()
        under_way = self._starting.get(session_id, [])
        if starting in under_way:
            under_way.remove(starting)
        if not under_way:
            self._starting.pop(session_id, None)

    async def _begin(
        self,
        record: TaskRecord,
        *,
        cutter: Cutter,
        starter: Starter,
        call_id: str,
        cuts: Cuts | None,
        starting: _Starting,
        task_status: TaskStatus[TaskStarted],
    ) -> None:
        """With the slot held: count and record the task (refused if its session closed
        meanwhile, on whichever replica), start its process (shielded: a started process
        is never left unfollowed), and follow it; stopped at once, and the start refused,
        if its caller gave up or its session closed while it was started."""
        session_id = record.session_id
        if session_id in self._closed:
            raise _closed_error(session_id)
        await self._store.admit(
            record, per_session=self.limits.per_session, per_tenant=self.limits.per_tenant
        )
        try:  # the close's mark is read once the record is there for a close to find
            if session_id in self._closed or await self._store.closed(record.tenant, session_id):
                raise _closed_error(session_id)
            log = TaskLog(self.log_path(record), self.limits.max_output_bytes, cutter.redactor)
        except BaseException as error:
            with anyio.CancelScope(shield=True):
                gone = "session_closed" if isinstance(error, Cancelled) else "not_started"
                await self._store.change(record, _not_started(gone))
            raise
        read_end, write_end = os.pipe()
        try:
            with anyio.CancelScope(shield=True):  # bounded; a cancel is looked at after it
                handle = await starter(write_end)
        except BaseException:
            os.close(read_end)
            log.close()
            with anyio.CancelScope(shield=True):
                await self._store.change(record, _not_started("not_started"))
            raise
        finally:
            os.close(write_end)
        running = _Running(record, handle, log=log)
        self._running[record.id] = running
        self._started(session_id, starting)
        given_up: BaseException | None = None
        if session_id not in self._closed:
            try:
                await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class() as cancel:
                given_up = cancel
        if given_up is not None or session_id in self._closed:
            # its caller gave up, or its session closed, while its process was started: it
            # is stopped now, its slot held until its processes are gone
            self._begin_stop(running, "model" if given_up is not None else "session_closed")
            with anyio.CancelScope(shield=True):
                await self._follow(running, log, read_end, cutter, cuts)
            if given_up is not None:
                raise given_up
            raise _closed_error(session_id)
        if call_id:
            with anyio.CancelScope(shield=True):  # the task runs: follow it whatever
                await self._claim_started(record, call_id)
        task_status.started(
            TaskStarted(
                id=record.id,
                label=record.label,
                status="running",
                timeout_ms=record.timeout_ms,
                note=_NOTE,
            )
        )
        await self._follow(running, log, read_end, cutter, cuts)

    async def _claim_started(self, record: TaskRecord, call_id: str) -> None:
        """Say on the call's claim that its task started; a failure is logged, never
        raised: the task runs, so its start must be answered, not made again."""
        try:
            await self._store.started(record.tenant, record.session_id, call_id)
        except (BastionError, nats.errors.Error) as error:
            logger.warning(
                "a started task's claim was not marked started: its call sent again waits",
                extra={"session": record.session_id, "error_type": type(error).__name__},
            )

    async def _follow(
        self, running: _Running, log: TaskLog, read_end: int, cutter: Cutter, cuts: Cuts | None
    ) -> None:
        """Log the task's output, stop it when its time runs out, and record its end."""
        status: int | None = None
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_drain, read_end, log, cutter, cuts)
                async with anyio.create_task_group() as clocked:
                    clocked.start_soon(self._clock, running)
                    status = await running.handle.wait()
                    running.exited.set()
                    clocked.cancel_scope.cancel()
                group.cancel_scope.deadline = anyio.current_time() + _DRAIN_S
        finally:
            with anyio.CancelScope(shield=True):
                os.close(read_end)
                await cutter.run(log.at_close(), log.close)
                written = await self._store.change(
                    running.record, lambda r: _ended(r, status, log.seen)
                )
                self._running.pop(running.record.id, None)
                running.settled.set()
                if written is not None and written.stopped_by in (None, "timeout"):
                    with contextlib.suppress(Exception):
                        await self._on_ended(written)

    async def _clock(self, running: _Running) -> None:
        await anyio.sleep(running.record.timeout_ms / 1000)
        self._begin_stop(running, "timeout")

    def _begin_stop(self, running: _Running, origin: StoppedBy) -> None:
        """Stop the task in the tasks' own group, once: whoever asked for it may give up
        waiting, the stop goes on until every process of it is gone."""
        if running.stopping or self._group is None:
            return
        running.stopping = True
        self._group.start_soon(self._stop, running, origin)

    async def _stop(self, running: _Running, origin: StoppedBy) -> None:
        """Mark the task `stopping` (if it still runs), SIGTERM its process group, and
        SIGKILL every process of it `STOP_GRACE_S` later, then again every `KILL_AGAIN_S`
        while it has not ended (`KILLS` times at most). A record that cannot be marked does
        not keep the task from being stopped."""

        def stopping(record: TaskRecord) -> TaskRecord | None:
            if record.status != "running":
                return None
            return msgspec.structs.replace(record, status="stopping", stopped_by=origin)

        if running.exited.is_set():
            return
        try:
            await self._store.change(running.record, stopping)
        except (BastionError, nats.errors.Error) as error:
            logger.warning(
                "a stopped task's record was not marked stopping: it is stopped all the same",
                extra={"session": running.record.session_id, "error_type": type(error).__name__},
            )
        running.handle.terminate()
        with anyio.move_on_after(STOP_GRACE_S):
            await running.exited.wait()
        for _ in range(KILLS):
            if running.exited.is_set():
                return
            running.handle.kill()
            with anyio.move_on_after(KILL_AGAIN_S):
                await running.exited.wait()
        logger.error(
            "a stopped task's processes did not die after %d kills",
            KILLS,
            extra={"session": running.record.session_id},
        )

    async def _stop_all(self, tasks: list[_Running], origin: StoppedBy) -> None:
        for running in tasks:
            self._begin_stop(running, origin)
        for running in tasks:
            await running.settled.wait()

    def _elsewhere(self, record: TaskRecord) -> Holders | None:
        """The way to the replica running `record` when it is another one; else None."""
        if record.replica in ("", self.replica):
            return None
        return self._holders

    async def stop(self, request: TaskStop) -> TaskView:
        """`bg_stop`: the task as it is after the stop (`cancelled`, stopped by the model,
        unless it had ended already), made by the replica that runs it; `lost` if that
        replica is gone."""
        record = await self._store.get(request.tenant, request.session_id, request.input.id)
        holders = self._elsewhere(record)
        if holders is None or record.status not in LIVE_STATUSES:
            return await self.stop_here(request)
        try:
            return await holders.stop(record.replica, request)
        except NoResponders:
            await self._store.change(record, _gone)
        return _view(await self._store.get(request.tenant, request.session_id, record.id))

    async def stop_here(self, request: TaskStop) -> TaskView:
        """`bg_stop` of a task this replica runs (or one that has ended): the task once it
        ended, or, when it has not within `stop_wait_s`, as it is then, saying it may still
        run and that the stop goes on."""
        record = await self._store.get(request.tenant, request.session_id, request.input.id)
        running = self._running.get(record.id)
        if running is not None and running.record.session_id == request.session_id:
            self._begin_stop(running, "model")
            with anyio.move_on_after(self.limits.stop_wait_s):
                await running.settled.wait()
            if not running.settled.is_set():
                now = await self._store.get(request.tenant, request.session_id, record.id)
                return msgspec.structs.replace(
                    _view(now),
                    note=(
                        f"the task has not ended within {self.limits.stop_wait_s:g} s of being "
                        "stopped and may still run: the sandbox service goes on stopping it "
                        "(SIGKILL to every process of it until none is left); bg_list shows "
                        "it cancelled once it has ended"
                    ),
                )
        elif record.status in LIVE_STATUSES:
            raise Unavailable(
                f"task {record.id} is run by another sandbox service instance, which this "
                "one cannot stop: call bg_stop again"
            )
        return _view(await self._store.get(request.tenant, request.session_id, record.id))

    async def release(self, tenant: str, session_id: str) -> None:
        """The session closed: it is marked closed (no replica starts a task of it any
        more: a start waiting for a slot here ends, one elsewhere is refused once it has
        its slot), each of its live tasks ends `cancelled` (origin `session_closed`), its
        processes gone, here and on every replica that ran one (a gone replica's are
        marked `lost`), and each of them removes the logs it keeps of the session's tasks,
        which no session may read any more (their records go with the bucket's age
        limit)."""
        self._close(session_id)
        await self._store.close(tenant, session_id)
        records = await self._store.of_session(tenant, session_id)
        live = [r for r in records if r.status in LIVE_STATUSES]
        async with anyio.create_task_group() as group:
            group.start_soon(self.release_here, session_id)
            if self._holders is not None:
                for replica in {r.replica for r in records if r.replica not in ("", self.replica)}:
                    held = [r for r in live if r.replica == replica]
                    group.start_soon(self._release_at, self._holders, replica, session_id, held)

    async def _forget_oldest(self, tenant: str, session_id: str) -> None:
        """Keep the session's last `KEPT_ENDED` ended tasks: forget the older ones' records
        and logs, those whose log this replica can remove (its own, one on its state dir, a
        gone replica's). Another live replica's are left to it: its record is what brings
        the session's close there to remove its log."""
        records = await self._store.of_session(tenant, session_id)  # newest first
        ended = [r for r in records if r.status not in LIVE_STATUSES]
        for record in ended[KEPT_ENDED - 1 :]:
            here = self._elsewhere(record) is None or record.owner == self._owner
            if not here and record.status != "lost":
                continue
            self.log_path(record).unlink(missing_ok=True)
            await self._store.forget(record)

    async def _release_at(
        self, holders: Holders, replica: str, session_id: str, held: list[TaskRecord]
    ) -> None:
        """Have `replica` release the session; if it is gone, its tasks there are lost."""
        try:
            await holders.release(replica, session_id)
        except NoResponders:
            for record in held:
                await self._store.change(record, _gone)

    def _close(self, session_id: str) -> None:
        """Remember the session closed here, and end its starts waiting for a slot."""
        self._closed[session_id] = None
        self._closed.move_to_end(session_id)
        while len(self._closed) > MAX_CLOSED:
            self._closed.popitem(last=False)
        for starting in self._starting.get(session_id, []):
            if starting.waiting:
                starting.scope.cancel()

    async def release_here(self, session_id: str) -> None:
        """The session closed: its starts under way here end (one waiting for a slot at
        once, one starting its process once it is started, stopped), each of its live
        tasks this replica runs ends `cancelled`, and the logs it keeps of the session's
        tasks are removed."""
        self._close(session_id)
        for starting in list(self._starting.get(session_id, [])):
            await starting.done.wait()
        mine = [r for r in self._running.values() if r.record.session_id == session_id]
        await self._stop_all(mine, "session_closed")
        await anyio.to_thread.run_sync(
            lambda: shutil.rmtree(self._logs / session_id, ignore_errors=True)
        )

    async def list(self, request: TaskList) -> TaskListing:
        """`bg_list`: the session's tasks, newest first."""
        records = await self._store.of_session(request.tenant, request.session_id)
        wanted = request.input.status
        shown = [_view(r) for r in records if wanted is None or r.status == wanted]
        return TaskListing(tasks=tuple(shown[: request.input.limit]))

    async def read(self, request: TaskRead, cutter: Cutter) -> TaskOutput:
        """`bg_output`, answered by the replica that runs (or ran) the task, which keeps its
        log.

        Raises:
            NotFound: no such task, or the replica that ran it is gone, its log with it
                (the task is marked `lost` if it was live).
        """
        record = await self._store.get(request.tenant, request.session_id, request.input.id)
        holders = self._elsewhere(record)
        if holders is None:
            return await self.read_here(request, cutter)
        try:
            return await holders.output(record.replica, request)
        except NoResponders:
            lost = await self._store.change(record, _gone)
        if record.owner == self._owner:  # the same state dir: the log is here too
            return await self.read_here(request, cutter)
        raise NotFound(
            f"background task {record.id} ran on a sandbox replica that is gone (stopped or "
            "restarted), and its output went with it"
            + (": the task is marked lost (bg_list shows it)" if lost is not None else "")
            + "; start the command again with bg_run if it is still needed"
        )

    async def read_here(self, request: TaskRead, cutter: Cutter) -> TaskOutput:
        """`bg_output` from this replica's log: from the asked offset, at most the asked
        limit (more only to end after a value's form that starts there, `read_page`)."""
        given = request.input
        record = await self._store.get(request.tenant, request.session_id, given.id)
        ended = record.status not in LIVE_STATUSES
        text, read, size = await cutter.in_thread(
            functools.partial(
                read_page, self.log_path(record), given.offset, given.limit, cutter.redactor
            )
        )
        next_offset = min(given.offset, size) + read
        running = self._running.get(record.id)
        held = running.holds if running is not None and next_offset >= size else 0
        return TaskOutput(
            id=record.id,
            status=record.status,
            exit_code=record.exit_code,
            text=text,
            next_offset=next_offset,
            eof=ended and next_offset >= size,
            output_truncated=size > self.limits.max_output_bytes,
            note=(
                f"up to the last {held} characters the task printed may be held back until it "
                "prints more or ends (they could begin a secret's value, which is never shown "
                "or kept uncut): read again then"
                if held and not ended
                else ""
            ),
        )

    async def mark_lost(self) -> int:
        """Mark `lost` every task an earlier run of this service left unfinished (its
        processes were ended by the sweep of its sandboxes); how many. A task whose replica
        still answers (another replica on the same state dir) is left to it."""
        count = 0
        for record in await self._store.unfinished(self._owner):
            if record.id in self._running or await self._answers(record):
                continue
            if await self._store.change(record, _gone) is not None:
                count += 1
        return count

    async def _answers(self, record: TaskRecord) -> bool:
        """Whether the replica running `record` is another one that still answers for it."""
        holders = self._elsewhere(record)
        if holders is None:
            return False
        asked = TaskRead(
            session_id=record.session_id,
            tenant=record.tenant,
            input=BgOutputInput(id=record.id, limit=1),
        )
        try:
            await holders.output(record.replica, asked)
        except NoResponders:
            return False
        except BastionError:
            return True  # it answered, if with an error: it runs
        return True


async def _drain(fd: int, log: TaskLog, cutter: Cutter, cuts: Cuts | None) -> None:
    """Feed `log` from the pipe `fd` until every writer has closed it: each chunk cut with
    the session's cuts as they are when it comes (`cuts`: a value stored or leased since
    the task started is never written raw), a large chunk in a worker thread, in the
    tenant's turn (past the head nothing is cut until the end), and whole (a chunk read is
    never lost to a cancel); past the head, one read each `PAST_HEAD_PAUSE_S`."""
    os.set_blocking(fd, False)
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        with anyio.CancelScope(shield=True):
            fresh = await _now(cuts, cutter)
            if fresh.redactor is not None and fresh.redactor is not cutter.redactor:
                cutter = fresh
                log.recut(cutter.redactor)
            if not chunk:
                return
            await cutter.run(log.to_cut(len(chunk)), functools.partial(log.feed, chunk))
        if log.cut:
            await anyio.sleep(PAST_HEAD_PAUSE_S)


async def _now(cuts: Cuts | None, cutter: Cutter) -> Cutter:
    """The session's cuts now, or `cutter` when they cannot be had (the vault's values
    already known are kept by the lookup itself)."""
    if cuts is None:
        return cutter
    try:
        return await cuts()
    except (BastionError, nats.errors.Error) as error:
        logger.warning(
            "a task's output was cut with the values known before: the session's cuts could "
            "not be had",
            extra={"error_type": type(error).__name__},
        )
        return cutter
