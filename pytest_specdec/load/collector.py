"""The garbage collector while a load run is in flight: it walks only what the run itself makes."""

from __future__ import annotations

import contextlib
import gc
import threading

_FROZEN_LOCK = threading.Lock()
_FROZEN_RUNS = 0


@contextlib.contextmanager
def collector_paused_for_older_objects():
    """While a run is in flight, the cyclic garbage collector sees only the objects the run itself makes.

    A full collection walks every object the process holds, and the client's process is the test
    session's: its tokenizer, the libraries it imported, every earlier run's records.  A full collection
    there holds the event loop for seconds on a slow box (docs/benchmarks.md, "Figures the code once
    quoted"), so requests went late and runs read client-bound, or a stall landed inside a TTFT or an
    inter-token gap.  Freezing what existed before the run keeps every collection during it small;
    young garbage is still collected.  Runs at once (threads) share one freeze, lifted by the last.
    """
    global _FROZEN_RUNS
    with _FROZEN_LOCK:
        if _FROZEN_RUNS == 0:
            gc.freeze()
        _FROZEN_RUNS += 1
    try:
        yield
    finally:
        with _FROZEN_LOCK:
            _FROZEN_RUNS -= 1
            if _FROZEN_RUNS == 0:
                gc.unfreeze()
