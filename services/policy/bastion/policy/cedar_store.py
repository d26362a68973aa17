"""The operator policies in force: loaded from a directory, reloaded when its files change.

A set that does not load (a file that does not parse or validate) never replaces the
last good one: the rejection is logged and shown by `policy.status`. If no set was ever
good, every call that would run or ask is refused, since the operator meant something to
apply and it cannot.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread

from bastion.policy.cedar_engine import CompiledPolicies, PolicyRejected, compile_files, evaluate
from bastion.policy.narrowing import Verdict
from bastion.proto.policy import PolicyRequest, PolicyStatus

__all__ = ["OperatorPolicies"]

logger = logging.getLogger(__name__)

MAX_FILE_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class _State:
    """One consistent view, swapped whole: readers never see half a reload."""

    compiled: CompiledPolicies | None = None
    loaded_at: datetime | None = None
    generation: int = 0
    error: str = ""
    fingerprint: bytes | None = None


class OperatorPolicies:
    """The `.cedar` files of one directory as a `Narrowing`; a missing directory is none."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._state = _State()

    def _read(self) -> dict[str, str]:
        """Every `*.cedar` file of the directory, by name (none if it does not exist)."""
        if not self.directory.is_dir():
            return {}
        files: dict[str, str] = {}
        for path in sorted(self.directory.glob("*.cedar")):
            if not path.is_file():
                continue
            data = path.read_bytes()
            if len(data) > MAX_FILE_BYTES:
                raise PolicyRejected(
                    f"{path.name} is {len(data)} bytes, more than the {MAX_FILE_BYTES} a "
                    "policy file may hold: split it"
                )
            try:
                files[path.name] = data.decode()
            except UnicodeDecodeError:
                raise PolicyRejected(f"{path.name} is not UTF-8 text: save it as UTF-8") from None
        return files

    def _files_or_failure(self) -> dict[str, str] | PolicyRejected:
        try:
            return self._read()
        except OSError as error:
            return PolicyRejected(
                f"the policy directory {self.directory} cannot be read ({error.strerror}): "
                "make it readable by the policy service"
            )
        except PolicyRejected as rejected:
            return rejected

    def reload_if_changed(self) -> bool:
        """Load the directory's files if they changed since the last look; True if loaded."""
        state = self._state
        files = self._files_or_failure()
        digest = hashlib.sha256()
        if isinstance(files, PolicyRejected):
            digest.update(b"!" + files.message.encode())
        else:
            for name, text in files.items():
                digest.update(f"{len(name)}:{name}{len(text)}:".encode() + text.encode())
        fingerprint = digest.digest()
        if fingerprint == state.fingerprint:
            return False
        try:
            if isinstance(files, PolicyRejected):
                raise files
            compiled = compile_files(files)
        except PolicyRejected as rejected:
            if rejected.message != state.error:
                logger.warning(
                    "operator policies rejected; the last good set stays in force",
                    extra={"policy_dir": str(self.directory), "error": rejected.message},
                )
            self._state = _State(
                state.compiled, state.loaded_at, state.generation, rejected.message, fingerprint
            )
            return False
        self._state = _State(compiled, datetime.now(UTC), state.generation + 1, "", fingerprint)
        logger.info(
            "operator policies loaded",
            extra={
                "policy_dir": str(self.directory),
                "files": len(compiled.files),
                "policies": compiled.count,
            },
        )
        return True

    async def watch(self, poll_s: float) -> None:
        """Reload whenever the files change, looking every `poll_s` seconds, until cancelled."""
        while True:
            await anyio.sleep(poll_s)
            await anyio.to_thread.run_sync(self.reload_if_changed)

    def narrow(self, request: PolicyRequest) -> Verdict | None:
        """The operator policies' verdict on `request` (see `Narrowing`)."""
        state = self._state
        if state.compiled is None:
            if not state.error:
                return None
            return Verdict(
                outcome="deny",
                policy="rejected",
                reason=(
                    "the operator policies were rejected and no earlier set is in force, so "
                    f"nothing runs until they are fixed: {state.error}"
                ),
            )
        return evaluate(state.compiled, request)

    def status(self) -> PolicyStatus:
        """What this instance enforces, and why the files on disk are not, if they are not."""
        state = self._state
        compiled = state.compiled or CompiledPolicies()
        return PolicyStatus(
            policy_dir=str(self.directory),
            files=compiled.files,
            policies=compiled.count,
            loaded_at=state.loaded_at,
            generation=state.generation,
            error=state.error,
        )
