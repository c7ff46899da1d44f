"""Load generation: a workload's prompts sent at an access pattern's arrivals, timed as `vllm bench serve` does.

The requests themselves, and how each is timed, are `streaming`; conversations
(turn after turn) are `conversations`; several client processes are `workers`.
This module picks among them and is the one a caller uses.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .conversations import run_conversations
from .patterns import AccessPattern
from .streaming import (
    LoadRun,
    PromptLike,
    RequestOptions,
    RequestRecord,
    completion_body,
    count_output_tokens,
    dispatched,
    request_slots,
    run_cache_scope,
    run_schedule,
    send_request,
)
from .workers import run_in_workers
from ..engines.registry import engine_named
from ..engines.server_spec import DEFAULT_ENGINE

# Re-exported: the request-level names callers have imported from here.
__all__ = [
    "LoadRun",
    "PromptLike",
    "RequestOptions",
    "RequestRecord",
    "completion_body",
    "count_output_tokens",
    "dispatched",
    "generate_load",
    "request_slots",
    "run_load",
    "run_schedule",
    "send_request",
]


async def run_load(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    pattern: AccessPattern,
    *,
    seed: int = 0,
    ignore_eos: bool = True,
    temperature: float = 0.0,
    sampling: Any = None,
    logprobs: int | None = None,
    request_timeout: float = 600.0,
    on_progress: Callable[[int, int], None] | None = None,
    engine: str = DEFAULT_ENGINE,
    draws: bool = False,
    endpoint: str = "completions",
    isolate_cache: bool = True,
) -> LoadRun:
    """Send ``pattern.num_prompts`` streamed completions (chat completions with ``endpoint="chat"``) and time
    each one.

    Request ``i`` uses ``prompts[i % len(prompts)]`` (a short prompt list is
    cycled, as vLLM bench oversamples a small dataset) and is sent at
    ``pattern.arrival_offsets(seed)[i]``, then waits for a slot if
    ``pattern.max_concurrency`` requests are in flight. A failing request
    becomes a record with ``success=False`` and its error; only a bad
    argument or an exception from ``on_progress`` propagates.
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("run_load needs at least one prompt")
    schedule = list(enumerate(pattern.offsets_for(prompts, seed)))
    options = RequestOptions(
        ignore_eos,
        temperature,
        logprobs,
        request_timeout,
        engine,
        sampling,
        seed,
        draws,
        endpoint=endpoint,
        cache_scope=run_cache_scope(isolate_cache),
    )
    # The engine's module is imported on first use (engines.registry): before the schedule's clock starts, not
    # after it, where the import made the first request and the one due after it late.
    engine_named(engine)
    if any(getattr(p, "turns", ()) for p in prompts):
        return await run_conversations(
            base_url, model, prompts, schedule, pattern, time.perf_counter(), options, on_progress
        )
    return await run_schedule(
        base_url, model, prompts, schedule, pattern.max_concurrency, time.perf_counter(), options, on_progress
    )


def generate_load(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    pattern: AccessPattern,
    *,
    workers: int = 1,
    **options: Any,
) -> LoadRun:
    """Blocking :func:`run_load` (same keyword options); usable from inside a running event loop too.
    ``workers`` > 1 spreads the requests over that many client processes
    (`workers.run_in_workers`), for loads one process cannot follow.
    """
    if workers > 1:
        return run_in_workers(base_url, model, prompts, pattern, workers=workers, **options)

    def run() -> LoadRun:
        return asyncio.run(run_load(base_url, model, prompts, pattern, **options))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    # Called from async code (e.g. an async test): asyncio.run would refuse,
    # so run on a private loop in a thread and block this one, as asked.
    result: list[LoadRun] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(run())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target, name="specdec-load", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
