"""Streamed requests to an OpenAI-compatible ``/v1/completions`` endpoint, timed one by one.

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

Each event's time is when its bytes were read from the socket (see
`transport`, the hand-written HTTP/1.1 client this runs on, and why).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

from .collector import collector_paused_for_older_objects
from .constraints import streamed_text
from .schedule import RequestSlots, dispatch, request_slots
from .workloads import ENDPOINTS
from .transport import Transport
from ..engines.server_spec import DEFAULT_ENGINE
from ..engines.registry import engine_named
from .logprobs import position_logprobs  # noqa: F401 - re-exported: it lived here

try:  # msgspec's C decoder reads an event in a quarter of json.loads' time: the client's largest per-event cost
    from msgspec import DecodeError as _DecodeError
    from msgspec.json import Decoder as _Decoder

    _decode_event: Callable[[bytes], Any] = _Decoder().decode
except ImportError:  # pragma: no cover - msgspec is a dependency; a broken install still measures
    _DecodeError = json.JSONDecodeError  # type: ignore[assignment,misc]
    _decode_event = json.loads


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
    # Seconds the client itself held the request back: from when it could have
    # gone (its arrival time, or for a request that queued for a concurrency
    # slot, the moment a slot came free) to when it went.  Waiting for a slot
    # is the pattern's; this lag is not (`RequestSlots`).
    dispatch_lag: float = 0.0
    # Tokens each streamed event with choices carried (when the server streams
    # token ids): under SD one event is one engine step, so this estimates the
    # per-step acceptance where the server does not report it.
    chunk_tokens: list[int] = field(default_factory=list)
    # The server's own per-request SD figures (vLLM's `metrics.speculative_decoding`
    # with --per-request-spec-decode-metrics), from the final usage event.
    spec_decoding: dict[str, Any] | None = None
    # Where output_tokens came from: the usage event, the streamed token ids, or
    # nowhere yet ("text": neither was sent, and output_tokens is 0 until
    # `count_output_tokens` counts the text, then "tokenized text").
    output_tokens_from: str = "usage"
    category: str | None = None  # the prompt's category, for per-category figures
    turn: int | None = None  # a conversation's turn (0 first), for per-turn figures
    # Which prompt it sent (a digest of the prompt's text; a conversation's first turn for every turn): the
    # repeats that send one prompt again share it, and per-group tests count prompts, not requests.
    prompt_key: str | None = None
    constraint: Any = None  # the load.constraints.Constraint its output had to meet (measure.validity); None: free

    @classmethod
    def not_sent(cls, index: int, prompt_len: int, start_time: float, error: str, **fields: Any) -> RequestRecord:
        """A request that failed before it was answered (never sent, or lost on the way): nothing came back."""
        return cls(
            index=index,
            prompt_len=prompt_len,
            output_tokens=0,
            start_time=start_time,
            ttft=0.0,
            itl=[],
            latency=0.0,
            token_ids=[],
            text="",
            top_logprobs=None,
            success=False,
            error=error,
            **fields,
        )


@dataclass
class LoadRun:
    records: list[RequestRecord]
    duration_s: float
    started_at: float
    start_perf: float = 0.0  # perf_counter at offset 0: record.start_time minus this is when request i went out

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.success]


def _completions_url(base_url: str, path: str = "/v1/completions") -> str:
    base = base_url.rstrip("/")
    if path != "/v1/completions":  # another engine's own route (engines/), from the server's root
        return base.removesuffix("/v1") + path
    if base.endswith("/v1/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/completions"


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "..."


def count_output_tokens(records: list[RequestRecord], tokenizer: Callable[[], Any]) -> int:
    """Count the output of requests whose server sent neither usage nor token ids by
    tokenizing their text, as `vllm bench serve` does (vllm/benchmarks/serve.py,
    calculate_metrics); returns how many records were counted so.  `tokenizer()`
    gives the tokenizer, and is called only when a record needs it."""
    uncounted = [r for r in records if r.success and r.output_tokens_from == "text"]
    encode = tokenizer() if uncounted else None
    for record in uncounted:
        record.output_tokens = len(encode(record.text, add_special_tokens=False).input_ids)
        record.output_tokens_from = "tokenized text"
    return len(uncounted)


async def _stream_one(transport: Transport, body: bytes, record: RequestRecord, engine: Any) -> None:
    """Fill ``record`` from one streamed completion (`engine` reads its events); raises on transport errors."""
    want_logprobs = record.top_logprobs is not None
    usage: dict[str, Any] | None = None
    chunks_with_choices = 0
    texts: list[str] = []
    most_recent = record.start_time
    stream_state: dict[str, Any] = {}  # the engine's, for streams of running totals

    def handle(message: bytes, timestamp: float) -> None:
        nonlocal usage, chunks_with_choices, most_recent
        if message == b"[DONE]" or not message:
            return
        try:
            data = engine.stream_event(_decode_event(message), stream_state)
        except (_DecodeError, ValueError) as exc:
            raise ValueError(f"malformed JSON in a streamed event ({exc}): {_excerpt(message)}") from None
        if choices := data.get("choices"):
            if chunks_with_choices == 0:
                record.ttft = timestamp - record.start_time
            else:
                record.itl.append(timestamp - most_recent)
            most_recent = timestamp
            chunks_with_choices += 1
            choice = choices[0]
            # A completion chunk's text, or a chat chunk's delta (its first may hold the role alone), or a tool call's.
            texts.append(streamed_text(choice))
            # The chunk's token ids, where the engine streams them (each engine's `stream_event` puts them here).
            if ids := choice.get("token_ids"):
                record.token_ids.extend(ids)
                record.chunk_tokens.append(len(ids))
            if want_logprobs and (lp := choice.get("logprobs")):
                record.top_logprobs.extend(position_logprobs(lp))
        if data.get("usage"):
            usage = data["usage"]
        if (found := engine.request_sd(data)) is not None:  # the engine's own per-request SD figures
            record.spec_decoding = found
        if err := data.get("error"):
            # vLLM reports a failure mid-stream as an error event with
            # status 200 already sent; vLLM bench would count the
            # request a success, but its output is truncated.
            record.error = f"error event in stream: {_excerpt(json.dumps(err).encode())}"

    status, error_body = await transport.post(body, handle)
    if status != 200:
        record.error = f"HTTP {status} {_reason(status)}: {_excerpt(error_body)}"
        return
    record.text = "".join(texts)
    record.latency = most_recent - record.start_time
    if usage is not None:
        if usage.get("prompt_tokens") is not None:
            record.prompt_len = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
    if usage is None or usage.get("completion_tokens") is None:
        # Without a usage event, token ids are exact.  A server that sends neither
        # leaves the count to the tokenizer (`count_output_tokens`), as vllm bench
        # serve does: the event count would be a lower bound under SD, not a count.
        record.output_tokens = len(record.token_ids)
        record.output_tokens_from = "token_ids" if record.token_ids else "text"
    if chunks_with_choices == 0:
        record.error = record.error or "stream ended without any event carrying choices"
    elif record.error is None:
        record.success = True


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def run_cache_scope(isolate: bool = True) -> str:
    """A fresh prompt-cache namespace for one run ("" when `isolate` is false).

    A reference server is shared by every SD configuration and test of a session, so it has served many
    runs before any given one; an SD server often only its warm-up.  With the server's prefix cache shared
    between runs, a reference run whose prompts an earlier run had sent was served from cache while SD
    prefilled in full, and the TTFT speedup measured the cache, not SD (docs/benchmarks.md, "Figures the
    code once quoted").  One namespace per run keeps the cache within a run (shared
    prefixes, a conversation's turns, a distribution test's samples of one prompt) and none across runs.
    """
    return uuid.uuid4().hex if isolate else ""


@dataclass(frozen=True)
class RequestOptions:
    """What every request of a run asks for, and how long one may take."""

    ignore_eos: bool = True
    temperature: float = 0.0
    logprobs: int | None = None
    request_timeout: float = 600.0
    engine: str = DEFAULT_ENGINE  # whose response fields carry each request's SD figures (engines/)
    # The workload's `sampling.Sampling` (it replaces `temperature`), and the run's seed its per-request
    # seeds derive from; None: `temperature` alone, the body of every release before sampling settings.
    sampling: Any = None
    run_seed: int = 0
    draws: bool = False  # samples for a distribution test, untimed: the engine's `draw_payload`
    endpoint: str = "completions"  # or "chat": the prompt as the user's message (workloads.ENDPOINTS)
    # The run's own prompt-cache namespace (`run_cache_scope`), sent where the engine has one
    # (`Engine.scoped_payload`); "": the server's shared cache, as a client without one uses it.
    cache_scope: str = ""

    def __post_init__(self) -> None:
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be >= 0, got {self.logprobs}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")


def request_path(engine: Any, endpoint: str) -> str:
    """The route `engine` serves `endpoint`'s requests on (an engine without a chat route refuses chat workloads
    at collection, `Engine.check_endpoint`)."""
    return engine.chat_path if endpoint == "chat" else engine.completion_path


def completion_body(
    model: str, prompt: str | list[dict[str, str]], max_tokens: int, options: RequestOptions, index: int = 0
) -> dict[str, Any]:
    """The streamed completion body every engine starts from: OpenAI's fields and ``ignore_eos`` (which
    vLLM, trtllm-serve and llama-server all accept); an engine adds its own in `completion_payload`
    (engines/), so no engine is sent another's field (trtllm-serve refuses any it does not know).
    On the chat endpoint `prompt` is the user's message, or a conversation's messages so far."""
    if options.endpoint == "chat":
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        said: dict[str, Any] = {"messages": messages}
    else:
        said = {"prompt": prompt}
    payload: dict[str, Any] = {
        "model": model,
        **said,
        "max_tokens": max_tokens,
        "temperature": options.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": options.ignore_eos,
    }
    if options.sampling is not None:  # request `index`'s temperature, top_p, top_k and seed
        payload.update(options.sampling.request_fields(options.run_seed, index))
    if options.logprobs is not None and options.endpoint == "chat":
        # A chat request's logprobs is a switch and the count is top_logprobs (vLLM's ChatCompletionRequest:
        # `logprobs: bool`, `top_logprobs: int`): an integer there is refused, or, as 1, returns no top ones.
        payload.update(logprobs=True, top_logprobs=options.logprobs)
    elif options.logprobs is not None:
        payload["logprobs"] = options.logprobs
    return payload


def prompt_key(text: Any) -> str:
    """A short digest of a prompt's text (chat messages as their JSON), the same in every process and session."""
    data = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
    return hashlib.blake2b(data.encode(), digest_size=8).hexdigest()


async def send_request(
    transport: Transport,
    engine: Any,
    model: str,
    index: int,
    prompt: PromptLike,
    options: RequestOptions,
    slots: RequestSlots,
    due: float,
    text: str | list[dict[str, str]] | None = None,
) -> RequestRecord:
    """One streamed request for `prompt` (its `text` unless given: a conversation's turn, as text or chat
    messages), timed from the moment a concurrency slot is free; never raises for a failing request (the
    record says why)."""
    payload = completion_body(model, prompt.text if text is None else text, prompt.output_len, options, index)
    shaped = (engine.draw_payload if options.draws else engine.completion_payload)(payload)
    if options.cache_scope:
        shaped = engine.scoped_payload(shaped, options.cache_scope)
    if (constraint := getattr(prompt, "constraint", None)) is not None:
        shaped = engine.constrain(shaped, constraint.kind, constraint.value, options.endpoint)
    body = json.dumps(shaped).encode()
    queued = slots.full()  # no slot free now: this request waits for one whatever the client does
    async with slots:
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
            top_logprobs=[] if options.logprobs is not None else None,
            success=False,
            category=getattr(prompt, "category", None),
            prompt_key=prompt_key(prompt.text),
            constraint=constraint,
        )
        # Late from when it could have gone: its arrival time (so how late its task woke, and the client's
        # work on its body, both count), or, queued behind a concurrency slot, when a slot came free.  A
        # queued request's late wake is not lag: a concurrency-1 run's later requests woke late behind the
        # first's body and connection, then waited seconds for the slot anyway, and 3-request runs could
        # read client-bound.
        ready = slots.freed_at if queued else due
        record.dispatch_lag = max(0.0, record.start_time - ready)
        try:
            await asyncio.wait_for(_stream_one(transport, body, record, engine), options.request_timeout)
        except asyncio.TimeoutError:
            record.success = False
            record.error = f"timed out after {options.request_timeout:g} s"
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the run
            record.success = False
            record.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return record


async def run_schedule(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    schedule: Sequence[tuple[int, float]],
    max_concurrency: int | None,
    start: float,
    options: RequestOptions,
    on_progress: Callable[[int, int], None] | None = None,
) -> LoadRun:
    """Send request ``index`` at ``start + offset`` for each ``(index, offset)`` of ``schedule``.  ``start`` is
    a ``time.perf_counter`` value: worker processes (`workers`) share one schedule on the machine's one clock."""
    engine = engine_named(options.engine)
    total = len(schedule)
    slots = request_slots(max_concurrency)
    transport = Transport(_completions_url(base_url, request_path(engine, options.endpoint)))
    done = 0

    async def one(index: int, due: float) -> RequestRecord:
        nonlocal done
        record = await send_request(transport, engine, model, index, prompts[index % len(prompts)], options, slots, due)
        done += 1
        if on_progress is not None:
            on_progress(done, total)
        return record

    return await dispatched(transport, schedule, start, one)


async def dispatched(
    transport: Transport, schedule: Sequence[tuple[int, float]], start: float, one: Callable[[int, float], Any]
) -> LoadRun:
    """`dispatch` over one transport, closed at the end: the run's records, duration and wall-clock start."""
    started_at = time.time() - (time.perf_counter() - start)
    try:
        with collector_paused_for_older_objects():
            records = await dispatch(schedule, start, one)
            duration = time.perf_counter() - start
    finally:
        transport.close()
    return LoadRun(records=records, duration_s=duration, started_at=started_at, start_perf=start)
