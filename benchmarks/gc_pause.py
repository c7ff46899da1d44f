"""How long a full garbage collection holds the client's process, with and without the run's freeze.

The client runs in the test session's process, which holds what the session loaded: the tokenizer
(and the libraries it imports), every earlier run's records.  A full collection walks all of it, and
while it does, the event loop that sends requests and reads their streams stands still.  This script
loads the bundled model's tokenizer as a session does, then times full collections interleaved: one as
the process stands, one inside `collector_paused_for_older_objects` (what every load run does since
2026-11-29), ``--rounds`` times each, and prints each round's pair and the medians.

    .venv/bin/python benchmarks/gc_pause.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

from pytest_specdec import Measurements, ServerPool
from pytest_specdec.load.collector import collector_paused_for_older_objects

MODEL = "specdec:smollm2-135m"


def full_collection_s() -> float:
    began = time.perf_counter()
    gc.collect()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specdec-gc-"))
    measurements = Measurements(ServerPool("cpu", work / "logs", on_event=lambda m: None), work)
    measurements.tokenizer(MODEL)  # what a session holds once it has built prompts
    print(f"objects the collector tracks: {len(gc.get_objects()):,}")
    plain, frozen = [], []
    for round_ in range(args.rounds):
        plain.append(full_collection_s())
        with collector_paused_for_older_objects():
            frozen.append(full_collection_s())
        print(f"round {round_ + 1}: full collection {plain[-1] * 1000:.1f} ms, during a run {frozen[-1] * 1000:.2f} ms")
    print(
        f"median over {args.rounds} rounds: {statistics.median(plain) * 1000:.1f} ms as the process stands, "
        f"{statistics.median(frozen) * 1000:.2f} ms during a run"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
