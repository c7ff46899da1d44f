"""Requests sent on a schedule: each at its own time, to within a millisecond, never drifting.

`RequestSlots` caps the requests in flight and says when a slot came free.
`dispatch` starts one task per schedule entry at ``start + offset`` (a
``time.perf_counter`` value: worker processes share one clock) and gathers
their records; `sleep_until` waits out each offset with the event loop's
timer, then yields for the last two milliseconds, so a trace's arrivals go
out within a millisecond of its times rather than a timer tick late.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

_SPIN_S = 0.002  # the last stretch before a request is due is waited out by yielding, not by the timer


async def sleep_until(due: float) -> None:
    """Sleep to `due` (perf_counter): the event loop's timer to within 2 ms, then yielding until it is due, so
    a trace's arrival goes out within a millisecond of its time rather than a timer tick late."""
    if (delay := due - time.perf_counter() - _SPIN_S) > 0:
        await asyncio.sleep(delay)
    while time.perf_counter() < due:
        await asyncio.sleep(0)


async def dispatch(schedule: Sequence[tuple[int, float]], start: float, one: Callable[[int, float], Any]) -> list:
    """Start ``one(index, due)`` at ``start + offset`` for each schedule entry; their results in schedule order
    (a task that returns a list, a conversation's turns, adds each item).  Every task is cancelled when one
    raises or the run is interrupted."""
    # A full garbage collection in a process that imported torch and a tokenizer
    # pauses it for 100 ms or more: requests due meanwhile would go out late
    # and the run would read as client-bound.  No cyclic collection while
    # measuring (reference counting still frees what a run allocates), and none
    # forced before it either: that would charge every run the same pause.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    tasks: list[asyncio.Task] = []
    try:
        for index, offset in schedule:
            # Sleep against the schedule, not gap by gap, so dispatch lag
            # does not accumulate over a long run.
            await sleep_until(start + offset)
            tasks.append(asyncio.create_task(one(index, start + offset)))
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    return [item for result in results for item in (result if isinstance(result, list) else [result])]


class RequestSlots:
    """At most `limit` requests in flight (None: no cap), and when a slot last came free: a request that
    queued for one could go out from then, not from its arrival time."""

    def __init__(self, limit: int | None):
        self._free = asyncio.Semaphore(limit) if limit is not None else None
        self.freed_at = 0.0

    def full(self) -> bool:
        return self._free is not None and self._free.locked()

    async def __aenter__(self) -> None:
        if self._free is not None:
            await self._free.acquire()

    async def __aexit__(self, *exc) -> None:
        if self._free is not None:
            self.freed_at = time.perf_counter()
            self._free.release()


def request_slots(max_concurrency: int | None) -> RequestSlots:
    return RequestSlots(max_concurrency)
