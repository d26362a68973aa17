"""Finding the processes one test started (`sleep`, or any by a word of its command line),
among every process on the machine."""

from __future__ import annotations

import secrets
from pathlib import Path

__all__ = ["processes_with", "sleeping", "unique_duration"]


def unique_duration() -> str:
    """An hour's `sleep` duration no other test (or concurrent test run) uses."""
    return f"3600.{secrets.randbelow(10**9):09d}"


def sleeping(duration: str) -> list[int]:
    """Pids of live `sleep <duration>` processes (an exited, unreaped one has no cmdline)."""
    wanted = b"sleep\0" + duration.encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes().endswith(wanted):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def processes_with(word: str) -> list[int]:
    """Pids of this machine whose command line holds `word`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if word.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
