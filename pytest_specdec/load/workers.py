"""One arrival schedule sent by several client processes, for loads one Python process cannot drive.

One process of the plugin's client follows about 100,000 streamed events per
second on one core (``benchmarks/client_overhead.py``); a fast GPU server at
hundreds of concurrent streams sends more.  Past that, one event loop reads
events late, and the ITL and TTFT it reports are the client's, not the
server's.  As GuideLLM and AIPerf do, the load is then split over worker
processes:

- the schedule is computed once, here, and dealt out in order (`assign`),
  so each worker sends its share of every phase of it;
- every worker waits until all have started, then sends its requests at the
  offsets of the one schedule from one shared start (``time.perf_counter`` is
  one clock for all processes of a machine on Linux and macOS), so arrival
  times and dispatch lag mean what they mean in one process;
- a concurrency cap of C is split into per-worker caps that add up to C (a
  worker never borrows another's idle slot, as in GuideLLM);
- a worker that dies leaves failed records that say so; none is lost and the
  caller never hangs.

Workers are started with ``spawn``: a fork of a process that runs vLLM's or
torch's threads is not safe.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

from .streaming import LoadRun, PromptLike, RequestOptions, RequestRecord, run_cache_scope, run_schedule
from .patterns import AccessPattern

__all__ = ["assign", "run_in_workers", "split_concurrency"]

# Spawning a worker imports the client (NumPy included): seconds on a busy machine, never minutes.
START_TIMEOUT_S = 120.0


class _Prompt(NamedTuple):
    text: str
    prompt_len: int
    output_len: int
    category: str | None = None


def split_concurrency(max_concurrency: int | None, workers: int) -> list[int | None]:
    """Per-worker caps that add up to ``max_concurrency``; no more workers than slots."""
    if max_concurrency is None:
        return [None] * workers
    workers = min(workers, max_concurrency)
    share, extra = divmod(max_concurrency, workers)
    return [share + (w < extra) for w in range(workers)]


def assign(offsets: Sequence[float], caps: Sequence[int | None]) -> list[list[tuple[int, float]]]:
    """Each worker's ``(index, offset)`` share of the schedule, in proportion to its cap.

    Requests are dealt in order, each to the worker with the fewest per slot
    so far, so every worker's share spans the whole schedule and a worker
    with one slot of three gets a third of the requests (round-robin would
    give it half and leave it finishing long after the others).
    """
    weights = [cap or 1 for cap in caps]
    schedules: list[list[tuple[int, float]]] = [[] for _ in caps]
    for index, offset in enumerate(offsets):
        w = min(range(len(caps)), key=lambda w: (len(schedules[w]) + 1) / weights[w])
        schedules[w].append((index, offset))
    return schedules


def _worker(
    conn: Connection,
    base_url: str,
    model: str,
    prompts: list[_Prompt],
    schedule: list[tuple[int, float]],
    cap: int | None,
    options: RequestOptions,
) -> None:
    try:
        conn.send(("ready",))
        _, start = conn.recv()
        run = asyncio.run(
            run_schedule(
                base_url, model, prompts, schedule, cap, start, options, lambda done, total: conn.send(("done",))
            )
        )
        conn.send(("finished", run.records, start + run.duration_s))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which owns the error
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        conn.close()


def run_in_workers(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    pattern: AccessPattern,
    *,
    workers: int,
    seed: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> LoadRun:
    """:func:`~pytest_specdec.load.client.run_load` over ``workers`` processes; blocks until all are done.

    The records are in request order, as from one process; the run's
    duration runs from the shared start to the last worker's last reply.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    isolate_cache = options.pop("isolate_cache", True)
    # One options object for every worker: the run's requests share one prompt-cache namespace.
    request_options = RequestOptions(  # a bad option fails here, before any process starts
        **options, run_seed=seed, cache_scope=run_cache_scope(isolate_cache)
    )
    plain = [_Prompt(p.text, p.prompt_len, p.output_len, getattr(p, "category", None)) for p in prompts]
    if not plain:
        raise ValueError("run_in_workers needs at least one prompt")
    if any(getattr(p, "turns", ()) for p in prompts):
        raise ValueError(
            "conversations are sent by one client process: each turn waits for the reply before "
            "it (use --specdec-client-workers 1)"
        )
    offsets = pattern.offsets_for(list(prompts), seed)
    caps = split_concurrency(pattern.max_concurrency, min(workers, len(offsets)))
    schedules = assign(offsets, caps)
    context = multiprocessing.get_context("spawn")
    total, done = len(offsets), 0
    conns: dict[Connection, int] = {}
    processes = []
    try:
        for w, (schedule, cap) in enumerate(zip(schedules, caps)):
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker,
                name=f"specdec-client-{w}",
                daemon=True,
                args=(child, base_url, model, plain, schedule, cap, request_options),
            )
            process.start()
            child.close()
            conns[parent] = w
            processes.append(process)
        for conn, w in conns.items():
            try:
                message = conn.recv() if conn.poll(START_TIMEOUT_S) else ("timeout",)
            except (EOFError, OSError):
                processes[w].join(5)
                message = ("exited", processes[w].exitcode)
            if message[0] != "ready":
                raise RuntimeError(
                    f"client worker {w} did not start: "
                    + (
                        f"no word within {START_TIMEOUT_S:g} s"
                        if message[0] == "timeout"
                        else f"exit code {message[1]}"
                        if message[0] == "exited"
                        else str(message[1])
                    )
                )
        # Every worker has imported what it needs: none starts late.
        start = time.perf_counter() + 0.01
        for conn in conns:
            conn.send(("start", start))
        records: dict[int, RequestRecord] = {}
        ends: list[float] = []
        pending = dict(conns)
        while pending:
            for conn in wait(list(pending)):
                w = pending[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    processes[w].join(5)
                    message = ("error", f"exited with code {processes[w].exitcode} before reporting")
                if message[0] == "done":
                    done += 1
                    if on_progress is not None:
                        on_progress(done, total)
                    continue
                del pending[conn]
                if message[0] == "finished":
                    records.update((r.index, r) for r in message[1])
                    ends.append(message[2])
                    continue
                ends.append(time.perf_counter())
                for index, offset in schedules[w]:
                    if index not in records:
                        records[index] = _failed(
                            index, plain, start + offset, f"client worker {w} failed: {message[1]}"
                        )
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(5)
        for conn in conns:
            conn.close()
    return LoadRun(
        records=[records[i] for i in range(total)],
        duration_s=max(ends) - start,
        started_at=time.time() - (time.perf_counter() - start),
        start_perf=start,
    )


def _failed(index: int, prompts: list[_Prompt], due: float, error: str) -> RequestRecord:
    return RequestRecord.not_sent(index, prompts[index % len(prompts)].prompt_len, due, error)
