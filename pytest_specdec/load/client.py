"""Load generation against an OpenAI-compatible ``/v1/completions`` endpoint.

Timing follows `vllm bench serve` (``async_request_openai_completions`` and
``calculate_metrics``) on purpose, because our numbers are checked against
vLLM's tool on the same server:

- ``start_time`` is taken after the concurrency slot is acquired, just before
  the POST, so client-side queueing is not counted in TTFT or latency;
- TTFT is the time to the first streamed event that has ``choices``; every
  later such event adds one ITL gap, however many tokens it carries (SD can
  put several in one), and the usage-only final event adds none;
- latency is the last event with ``choices`` minus ``start_time``;
- the run's duration runs from the start of the arrival schedule (offset 0)
  to the last completion, as vLLM's ``benchmark_duration`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from .patterns import AccessPattern

__all__ = ["LoadRun", "PromptLike", "RequestRecord", "generate_load", "run_load"]

_BODY_EXCERPT = 500


class PromptLike(Protocol):
    """What a request needs from a prompt (``pytest_specdec.workloads.Prompt`` fits)."""

    @property
    def text(self) -> str: ...
    @property
    def prompt_len(self) -> int: ...
    @property
    def output_len(self) -> int: ...


@dataclass
class RequestRecord:
    """One request as the client saw it; times are ``time.perf_counter`` seconds."""

    index: int
    prompt_len: int
    output_tokens: int
    start_time: float
    ttft: float
    itl: list[float]
    latency: float
    token_ids: list[int]
    text: str
    top_logprobs: list[dict[str, float]] | None
    success: bool
    error: str | None = None
    # Seconds the client itself held the request back: how late its task ran
    # after its arrival time, plus the gap between getting a concurrency slot
    # and sending.  Waiting for a slot is the pattern's; this lag is not.
    dispatch_lag: float = 0.0
    # Tokens each streamed event with choices carried (when the server streams
    # token ids): under SD one event is one engine step, so this estimates the
    # per-step acceptance where the server does not report it.
    chunk_tokens: list[int] = field(default_factory=list)
    # The server's own per-request SD figures (vLLM's `metrics.speculative_decoding`
    # with --per-request-spec-decode-metrics), from the final usage event.
    spec_decoding: dict[str, Any] | None = None


@dataclass
class LoadRun:
    records: list[RequestRecord]
    duration_s: float
    started_at: float
    # perf_counter at offset 0 of the arrival schedule: record.start_time
    # minus this is when request i actually went out.
    start_perf: float = 0.0

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.success]


class _SSEDecoder:
    """Splits a byte stream into SSE ``data:`` payloads, whatever the TCP framing.

    Works on bytes and decodes whole lines: a newline never occurs inside a
    UTF-8 multi-byte sequence, so a character split across reads is safe.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        out: list[str] = []
        if b"\n" in self._buffer:
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                self._take(line, out)
        # vLLM bench's handler dispatches a complete event before its
        # terminating newline arrives; doing the same keeps TTFT/ITL equal
        # when the server's write is split just before the "\n\n".
        tail = self._buffer.strip()
        if tail.startswith(b"data:") and (tail.endswith(b"}") or tail.endswith(b"[DONE]")):
            payload = tail[5:].strip()
            if payload == b"[DONE]" or _is_json(payload):
                out.append(payload.decode("utf-8"))
                self._buffer = b""
        return out

    def close(self) -> list[str]:
        out: list[str] = []
        if self._buffer:
            self._take(self._buffer, out)
            self._buffer = b""
        return out

    @staticmethod
    def _take(line: bytes, out: list[str]) -> None:
        line = line.strip()
        # Blank lines end events; ":" lines are comments (keep-alive pings);
        # event:/id:/retry: fields carry nothing a completion stream needs.
        if line.startswith(b"data:"):
            out.append(line[5:].strip().decode("utf-8"))


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload)
    except ValueError:
        return False
    return True


def _completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/v1/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/completions"


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "..."


async def _stream_one(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], record: RequestRecord
) -> None:
    """Fill ``record`` from one streamed completion; raises on transport errors."""
    want_logprobs = record.top_logprobs is not None
    usage: dict[str, Any] | None = None
    chunks_with_choices = 0
    texts: list[str] = []
    most_recent = record.start_time
    async with client.stream("POST", url, json=payload) as response:
        if response.status_code != 200:
            body = await response.aread()
            record.error = f"HTTP {response.status_code} {response.reason_phrase}: {_excerpt(body)}"
            return
        decoder = _SSEDecoder()

        def handle(messages: list[str]) -> None:
            nonlocal usage, chunks_with_choices, most_recent
            for message in messages:
                if message == "[DONE]" or not message:
                    continue
                data = json.loads(message)
                timestamp = time.perf_counter()
                if choices := data.get("choices"):
                    if chunks_with_choices == 0:
                        record.ttft = timestamp - record.start_time
                    else:
                        record.itl.append(timestamp - most_recent)
                    most_recent = timestamp
                    chunks_with_choices += 1
                    choice = choices[0]
                    texts.append(choice.get("text") or "")
                    if ids := choice.get("token_ids"):
                        record.token_ids.extend(ids)
                        record.chunk_tokens.append(len(ids))
                    if want_logprobs and (lp := choice.get("logprobs")):
                        record.top_logprobs.extend(t or {} for t in lp.get("top_logprobs") or [])
                if data.get("usage"):
                    usage = data["usage"]
                metrics = data.get("metrics")
                if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
                    record.spec_decoding = metrics["speculative_decoding"]
                if err := data.get("error"):
                    # vLLM reports a failure mid-stream as an error event with
                    # status 200 already sent; vLLM bench would count the
                    # request a success, but its output is truncated.
                    record.error = f"error event in stream: {_excerpt(json.dumps(err).encode())}"

        async for raw in response.aiter_bytes():
            handle(decoder.feed(raw))
        handle(decoder.close())

    record.text = "".join(texts)
    record.latency = most_recent - record.start_time
    if usage is not None:
        if usage.get("prompt_tokens") is not None:
            record.prompt_len = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
    if usage is None or usage.get("completion_tokens") is None:
        # Without a usage event, token ids are exact; a server that sends
        # neither leaves only the event count, a lower bound under SD.
        record.output_tokens = len(record.token_ids) or chunks_with_choices
    if chunks_with_choices == 0:
        record.error = record.error or "stream ended without any event carrying choices"
    elif record.error is None:
        record.success = True


class _ConnectionPool:
    """One single-connection httpx client per request in flight, reused when free.

    One shared AsyncClient would do, but httpcore's pool scans every
    connection on every request and stream event (O(connections) each), which
    at 200 streams cost ~4x more CPU per request than at 1 (see
    benchmarks/client_overhead.py). Leasing a client per in-flight request
    keeps that scan at one connection and, as there is always a free
    connection, nothing queues inside httpx after start_time.
    """

    def __init__(self, request_timeout: float) -> None:
        # The total deadline is enforced per request with wait_for; httpx's
        # timeouts are per read, and a slow but live stream must not be cut.
        self._timeout = httpx.Timeout(request_timeout, pool=None)
        self._limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        # Building a verifying SSL context costs ~15 ms; share one.
        make_ssl = getattr(httpx, "create_ssl_context", None) or ssl.create_default_context
        self._ssl = make_ssl()
        self._free: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []

    def _new_client(self) -> httpx.AsyncClient:
        # Environment proxies would put a hop between us and a local
        # server and distort every latency: endpoints are reached directly.
        client = httpx.AsyncClient(limits=self._limits, timeout=self._timeout, verify=self._ssl, trust_env=False)
        self._all.append(client)
        return client

    def prepare(self, count: int) -> None:
        """Build `count` clients before the schedule starts: building one costs milliseconds that
        would otherwise hold back the first requests (and count as dispatch lag)."""
        while len(self._free) < count:
            self._free.append(self._new_client())

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        client = self._free.pop() if self._free else self._new_client()
        try:
            yield client
        finally:
            self._free.append(client)

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self._all), return_exceptions=True)
        self._all.clear()
        self._free.clear()


async def run_load(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    pattern: AccessPattern,
    *,
    seed: int = 0,
    ignore_eos: bool = True,
    temperature: float = 0.0,
    logprobs: int | None = None,
    request_timeout: float = 600.0,
    on_progress: Callable[[int, int], None] | None = None,
) -> LoadRun:
    """Send ``pattern.num_prompts`` streamed completions and time each one.

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
    if logprobs is not None and logprobs < 0:
        raise ValueError(f"logprobs must be >= 0, got {logprobs}")
    total = pattern.num_prompts
    offsets = pattern.arrival_offsets(seed)
    url = _completions_url(base_url)
    cap = pattern.max_concurrency
    slots: contextlib.AbstractAsyncContextManager[Any]
    slots = asyncio.Semaphore(cap) if cap is not None else contextlib.nullcontext()
    connections = _ConnectionPool(request_timeout)
    done = 0

    async def one(index: int, due: float) -> RequestRecord:
        nonlocal done
        woke = time.perf_counter()  # the event loop ran this task: late by woke - due
        prompt = prompts[index % len(prompts)]
        payload: dict[str, Any] = {
            "model": model,
            "prompt": prompt.text,
            "max_tokens": prompt.output_len,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": ignore_eos,
            "return_token_ids": True,
        }
        if logprobs is not None:
            payload["logprobs"] = logprobs
        async with slots:
            slot_at = time.perf_counter()
            async with connections.lease() as client:
                record = RequestRecord(
                    index=index,
                    prompt_len=prompt.prompt_len,
                    output_tokens=0,
                    start_time=time.perf_counter(),
                    ttft=0.0,
                    itl=[],
                    latency=0.0,
                    token_ids=[],
                    text="",
                    top_logprobs=[] if logprobs is not None else None,
                    success=False,
                )
                record.dispatch_lag = max(0.0, woke - due) + (record.start_time - slot_at)
                try:
                    await asyncio.wait_for(_stream_one(client, url, payload, record), request_timeout)
                except asyncio.TimeoutError:
                    record.success = False
                    record.error = f"timed out after {request_timeout:g} s"
                except Exception as exc:  # noqa: BLE001 - one bad request must not end the run
                    record.success = False
                    record.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        done += 1
        if on_progress is not None:
            on_progress(done, total)
        return record

    connections.prepare(min(cap or total, total))
    # A full garbage collection in a process that imported torch and a tokenizer
    # pauses it for 10-20 ms: requests due meanwhile would go out late and the
    # run would read as client-bound.  Collect now, then not while measuring
    # (reference counting still frees what a run allocates).
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    started_at = time.time()
    start = time.perf_counter()
    tasks: list[asyncio.Task[RequestRecord]] = []
    try:
        for index, offset in enumerate(offsets):
            # Sleep against the schedule, not gap by gap, so dispatch lag
            # does not accumulate over a long run.
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(index, start + offset)))
        records = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        duration = time.perf_counter() - start
        if gc_was_enabled:
            gc.enable()
        await connections.aclose()
    return LoadRun(records=list(records), duration_s=duration, started_at=started_at, start_perf=start)


def generate_load(base_url: str, model: str, prompts: Sequence[PromptLike], pattern: AccessPattern,
                  **options: Any) -> LoadRun:
    """Blocking :func:`run_load` (same keyword options); usable from inside a running event loop too."""

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
