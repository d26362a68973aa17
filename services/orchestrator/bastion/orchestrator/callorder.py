"""The order of one session's calls within this orchestrator: reads side by side, the rest
one at a time, each call in the order it arrived.

A call takes a place in the session's queue the moment it arrives, before anything is
awaited, and is told later whether it reads (shared) or not (exclusive). The head of the
queue is let in while it fits: a shared place while no exclusive one is in and fewer than
the bound are, an exclusive place when nobody is. So a write waits for the reads that
arrived before it, and reads that arrived after it wait for it (docs/architecture.md §9).
A place that is not yet told what it is holds everything behind it.
"""

from __future__ import annotations

from collections import deque

import anyio

__all__ = ["CallOrder", "NeedsTurnAlone", "Place"]


class NeedsTurnAlone(Exception):
    """Raised in a shared turn by a read that turns out to need the session alone (the
    policy asks about it, or its call id's first sending still runs): nothing was
    recorded yet, and it is made again in the exclusive turn."""


class Place:
    """One call's place in its session's queue: shared or not (None until told), and
    whether it was let in."""

    def __init__(self) -> None:
        self.shared: bool | None = None
        self.let_in = anyio.Event()
        self.gone = False


class CallOrder:
    """One session's queue of calls, at most `max_shared` reads let in at once."""

    def __init__(self, max_shared: int) -> None:
        self._max_shared = max_shared
        self._queue: deque[Place] = deque()
        self._shared_in = 0
        self._exclusive_in = False

    @property
    def idle(self) -> bool:
        """Whether no call is queued or let in."""
        return not self._queue and not self._shared_in and not self._exclusive_in

    def enter(self) -> Place:
        """A place at the back of the queue, not yet told what it is."""
        place = Place()
        self._queue.append(place)
        return place

    async def wait(self, place: Place, *, shared: bool) -> None:
        """Tell `place` what it is and wait until it is let in; cancelled, it leaves."""
        place.shared = shared
        self._let_in()
        if place.let_in.is_set():  # let in at once: no turn of the event loop to wait
            return
        try:
            await place.let_in.wait()
        except BaseException:
            self.leave(place)
            raise

    def leave(self, place: Place) -> None:
        """`place` is done (or gave up waiting): the next in line may go in. Leaving twice
        is leaving once."""
        self._out(place)
        self._let_in()

    def again_exclusive(self, place: Place) -> None:
        """`place`, let in shared, turns out to need the session alone: it leaves and is
        first in line again, exclusive, ahead of every call that arrived after it."""
        self._out(place)
        place.shared = False
        place.let_in = anyio.Event()
        place.gone = False
        self._queue.appendleft(place)
        self._let_in()

    def _out(self, place: Place) -> None:
        if place.gone:
            return
        place.gone = True
        if not place.let_in.is_set():
            self._queue.remove(place)
        elif place.shared:
            self._shared_in -= 1
        else:
            self._exclusive_in = False

    def _let_in(self) -> None:
        while self._queue:
            head = self._queue[0]
            if head.shared is None or self._exclusive_in:
                return
            if head.shared:
                if self._shared_in >= self._max_shared:
                    return
                self._shared_in += 1
            elif self._shared_in:
                return
            else:
                self._exclusive_in = True
            self._queue.popleft()
            head.let_in.set()
