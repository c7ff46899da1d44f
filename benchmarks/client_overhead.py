"""How much does pytest-specdec's load client cost, next to `vllm bench serve`'s own client?

Starts a streaming /v1/completions endpoint in a subprocess that sends
``--chunks`` one-token events per request (as fast as it can, or paced like a
decoding server), and drives it at several concurrency levels with the
plugin's client (``pytest_specdec.load.client.run_load``) and with vLLM's
request function (``vllm.benchmarks.lib.endpoint_request_func.
async_request_openai_completions`` on an aiohttp session, as `vllm bench
serve` runs it), interleaved level by level.  The server is a separate
process, so ``time.process_time`` here is the client's CPU alone.

Per client and level it prints client CPU per event, the TTFT and ITL the
client saw against what the server paced (added latency, p50 and p99), and
events per second; the ceiling is the most events per second a client
followed with its p50 ITL distorted by less than 1 ms.

    python benchmarks/client_overhead.py [--levels 1,32,200,500] [--chunks 64] [--paced-gap-ms 10] [--rounds 3]
        [--clients "plugin,vllm bench serve,httpx,aiohttp,plugin x2"] [--server-cpus 0] [--client-cpus 1]

The client CPU of "plugin xN" counts its worker processes, start-up included
(about half a second of imports per worker and run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.load.client import generate_load  # noqa: E402
from pytest_specdec.load.patterns import AccessPattern  # noqa: E402


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_len: int
    output_len: int


# ---------------------------------------------------------------- server side


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def _serve(chunks: int) -> None:
    # Events are encoded once: the server should cost as little as possible
    # so that, on a small machine, what is measured is the client.
    events = [
        _chunk(
            b"data: "
            + json.dumps(
                {
                    "id": "cmpl-b",
                    "object": "text_completion",
                    "choices": [
                        {"index": 0, "text": f" t{i}", "token_ids": [1000 + i], "logprobs": None, "finish_reason": None}
                    ],
                }
            ).encode()
            + b"\n\n"
        )
        for i in range(chunks)
    ]
    tail = (
        _chunk(
            b"data: "
            + json.dumps(
                {
                    "id": "cmpl-b",
                    "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": chunks, "total_tokens": 8 + chunks},
                }
            ).encode()
            + b"\n\n"
        )
        + _chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in header.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(length))
                # The client's payload is fixed, so the pacing rides in the model name.
                gap = float(body["model"].removeprefix("gap=")) / 1e3
                writer.write(head)
                for event in events:
                    writer.write(event)
                    await writer.drain()
                    # Yield (or wait) so each event leaves as its own write,
                    # interleaved with other streams, as a decoding server's would.
                    await asyncio.sleep(gap)
                writer.write(tail)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------- client side


def _cpu_seconds(pid: int) -> float:
    """user+system CPU of another process (Linux /proc); nan elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _plugin_client(url: str, level: int, num_prompts: int, chunks: int, gap_ms: float, workers: int = 1) -> list[tuple]:
    pattern = AccessPattern(f"concurrency_{level}", max_concurrency=level, num_prompts=num_prompts)
    run = generate_load(url, f"gap={gap_ms}", [Prompt("hello", 8, chunks)], pattern, workers=workers)
    failed = [r for r in run.records if not r.success]
    if failed:
        raise SystemExit(f"plugin client: {len(failed)} requests failed: {failed[0].error}")
    return [(r.ttft, r.itl) for r in run.records], run.duration_s


def _vllm_client(url: str, level: int, num_prompts: int, chunks: int, gap_ms: float) -> list[tuple]:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions

    async def drive():
        # The session as vllm bench serve builds it (benchmark() in vllm/benchmarks/serve.py).
        connector = aiohttp.TCPConnector(
            limit=level,
            limit_per_host=level,
            ttl_dns_cache=300,
            use_dns_cache=True,
            keepalive_timeout=60,
            enable_cleanup_closed=True,
            force_close=False,
        )
        semaphore = asyncio.Semaphore(level)
        request = RequestFuncInput(
            prompt="hello",
            api_url=f"{url}/v1/completions",
            prompt_len=8,
            output_len=chunks,
            model=f"gap={gap_ms}",
            ignore_eos=True,
        )
        async with aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
        ) as session:

            async def one():
                async with semaphore:
                    return await async_request_openai_completions(request, session)

            start = time.perf_counter()
            outputs = await asyncio.gather(*(one() for _ in range(num_prompts)))
            return outputs, time.perf_counter() - start

    outputs, duration = asyncio.run(drive())
    failed = [o for o in outputs if not o.success]
    if failed:
        raise SystemExit(f"vllm client: {len(failed)} requests failed: {failed[0].error}")
    return [(o.ttft, o.itl) for o in outputs], duration


def _payload(chunks: int, gap_ms: float) -> dict:
    return {
        "model": f"gap={gap_ms}",
        "prompt": "hello",
        "max_tokens": chunks,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


class _Stamps:
    """One stream's TTFT and ITL, stamped as vLLM's client does: once per event with choices."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.ttft: float | None = None
        self.itl: list[float] = []

    def event(self, now: float) -> None:
        if self.ttft is None:
            self.ttft = now - self.start
        else:
            self.itl.append(now - self.last)
        self.last = now


async def _streams(stream_one, level: int, num_prompts: int):
    """``num_prompts`` streams, ``level`` at a time; each ``stream_one()`` fills and returns its _Stamps."""
    semaphore = asyncio.Semaphore(level)

    async def one():
        async with semaphore:
            stamps = await stream_one()
            return stamps.ttft, stamps.itl

    start = time.perf_counter()
    outputs = await asyncio.gather(*(one() for _ in range(num_prompts)))
    return outputs, time.perf_counter() - start


def _httpx_client(url: str, level: int, num_prompts: int, chunks: int, gap_ms: float) -> list[tuple]:
    """A streaming client on httpx (what the plugin used before its own transport), done the library's way:
    one AsyncClient with a pool as large as the concurrency, ``aiter_lines`` and ``json.loads`` per event."""
    import httpx

    async def drive():
        limits = httpx.Limits(max_connections=level, max_keepalive_connections=level)
        async with httpx.AsyncClient(limits=limits, timeout=None, trust_env=False) as client:

            async def stream_one():
                stamps = _Stamps()
                async with client.stream("POST", f"{url}/v1/completions", json=_payload(chunks, gap_ms)) as response:
                    async for line in response.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        data = json.loads(line[6:])
                        if data.get("choices"):
                            stamps.event(time.perf_counter())
                return stamps

            return await _streams(stream_one, level, num_prompts)

    return asyncio.run(drive())


def _aiohttp_client(url: str, level: int, num_prompts: int, chunks: int, gap_ms: float) -> list[tuple]:
    """The plugin's work per event (split SSE lines, msgspec decode, stamp) on aiohttp's transport instead of
    the plugin's own: what replacing the hand-written HTTP/1.1 reader with the library would cost."""
    import aiohttp
    import msgspec

    decode = msgspec.json.Decoder().decode

    async def drive():
        connector = aiohttp.TCPConnector(limit=level, limit_per_host=level, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:

            async def stream_one():
                stamps, pending = _Stamps(), b""
                async with session.post(f"{url}/v1/completions", json=_payload(chunks, gap_ms)) as response:
                    async for data in response.content.iter_any():
                        now = time.perf_counter()
                        *events, pending = (pending + data).split(b"\n\n")
                        for event in events:
                            if (
                                event.startswith(b"data: ")
                                and event != b"data: [DONE]"
                                and decode(event[6:]).get("choices")
                            ):
                                stamps.event(now)
                return stamps

            return await _streams(stream_one, level, num_prompts)

    return asyncio.run(drive())


CLIENTS = {
    "plugin": _plugin_client,
    "vllm bench serve": _vllm_client,
    "httpx": _httpx_client,
    "aiohttp": _aiohttp_client,
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # worker processes, once they have been joined
    return usage.ru_utime + usage.ru_stime


def _client(name: str):
    """A client by name; "plugin x3" is the plugin's client over three worker processes."""
    if name.startswith("plugin x"):
        workers = int(name.removeprefix("plugin x"))
        return lambda *args: _plugin_client(*args, workers=workers)
    return CLIENTS[name]


def _measure(client: str, url: str, level: int, waves: int, chunks: int, server_pid: int, gap_ms: float) -> dict:
    num_prompts = max(16, waves * level)
    server_cpu0, cpu0, wall0 = _cpu_seconds(server_pid), time.process_time() + _children_cpu(), time.perf_counter()
    timings, duration = _client(client)(url, level, num_prompts, chunks, gap_ms)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() + _children_cpu() - cpu0
    server_cpu = _cpu_seconds(server_pid) - server_cpu0
    ttfts = sorted(ttft for ttft, _ in timings)
    itls = sorted(g for _, itl in timings for g in itl)
    events = sum(len(itl) + 1 for _, itl in timings)
    gap_s = gap_ms / 1e3
    return {
        "client": client,
        "streams": level,
        "requests": num_prompts,
        "events_per_s": events / duration,
        "cpu_us_per_event": 1e6 * cpu / events,
        "client_cpu_share": cpu / wall,
        "server_cpu_share": server_cpu / wall,
        "p50_ttft_ms": 1e3 * statistics.median(ttfts),
        "p99_ttft_ms": 1e3 * ttfts[int(0.99 * (len(ttfts) - 1))],
        "p50_added_itl_ms": 1e3 * (statistics.median(itls) - gap_s),
        "p99_added_itl_ms": 1e3 * (itls[int(0.99 * (len(itls) - 1))] - gap_s),
    }


COLUMNS = [
    ("client", "client", "{}"),
    ("streams", "streams", "{:d}"),
    ("requests", "requests", "{:d}"),
    ("events_per_s", "events/s", "{:,.0f}"),
    ("cpu_us_per_event", "client CPU us/event", "{:.1f}"),
    ("client_cpu_share", "client CPU", "{:.0%}"),
    ("server_cpu_share", "server CPU", "{:.0%}"),
    ("p50_ttft_ms", "p50 TTFT ms", "{:.2f}"),
    ("p99_ttft_ms", "p99 TTFT ms", "{:.2f}"),
    ("p50_added_itl_ms", "p50 ITL added ms", "{:.2f}"),
    ("p99_added_itl_ms", "p99 ITL added ms", "{:.2f}"),
]


def _median_row(measured: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    row = dict(measured[0])
    for key, value in row.items():
        if isinstance(value, float):
            row[key] = statistics.median(m[key] for m in measured)
    return row


def _table(rows: list[dict]) -> str:
    cells = [[title for _, title, _ in COLUMNS]]
    cells += [[fmt.format(row[key]) for key, _, fmt in COLUMNS] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cpus(spec: str) -> set[int]:
    """ "0,2-3" -> {0, 2, 3}; "" -> no pinning."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus & set(range(os.cpu_count() or 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,32,200,500", help="concurrent streams, comma-separated")
    parser.add_argument("--chunks", type=int, default=64, help="one-token events per response")
    parser.add_argument("--waves", type=int, default=2, help="requests per level = max(16, waves * streams)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level; figures are medians")
    parser.add_argument(
        "--paced-gap-ms",
        type=float,
        default=10.0,
        help="the server waits this long between events, as a decoding server would",
    )
    parser.add_argument(
        "--clients",
        default="plugin,vllm bench serve,httpx",
        help=f"which clients, comma-separated, of {', '.join(CLIENTS)}; 'plugin x2' is the plugin's "
        "client over two worker processes (--specdec-client-workers 2)",
    )
    parser.add_argument("--server-cpus", default="0", help="CPUs the server is pinned to (taskset style: 0 or 0,1)")
    parser.add_argument("--client-cpus", default="1", help="CPUs this process (the clients) is pinned to")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        try:  # the server must not be what limits a ceiling: uvloop (a vLLM dependency) halves its cost
            import uvloop

            uvloop.run(_serve(args.chunks))
        except ImportError:
            asyncio.run(_serve(args.chunks))
        return 0

    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    server_cpus, client_cpus = _cpus(args.server_cpus), _cpus(args.client_cpus)
    # The server and the clients on separate cores, so neither's cost is the other's latency.
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--chunks", str(args.chunks)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, server_cpus)) if server_cpus else None,
    )
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    rows = {"instant": [], "paced": []}
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        for client in clients:  # warm-up: imports, first connections
            _measure(client, url, 4, 1, args.chunks, server.pid, 0.0)
        for level in levels:
            for kind, gap in (("instant", 0.0), ("paced", args.paced_gap_ms)):
                rounds: dict[str, list[dict]] = {client: [] for client in clients}
                for _ in range(args.rounds):
                    for client in clients:  # interleaved, so drift of the machine falls on every client
                        rounds[client].append(_measure(client, url, level, args.waves, args.chunks, server.pid, gap))
                        print(f"  {kind} {client} at {level} streams done", file=sys.stderr, flush=True)
                rows[kind] += [_median_row(measured) for measured in rounds.values()]
    finally:
        server.terminate()
        server.wait(10)
    print(
        f"client overhead: {args.chunks} one-token events per request, medians of {args.rounds} interleaved rounds, "
        f"server in its own process on CPUs "
        f"{sorted(server_cpus) or 'any'}, clients on CPUs {sorted(client_cpus) or 'any'} of {os.cpu_count()}, "
        f"python {sys.version.split()[0]}"
    )
    print("\ninstant server (events as fast as it writes them; added ITL is the whole gap):")
    print(_table(rows["instant"]))
    print(
        f"\npaced server ({args.paced_gap_ms:g} ms between events, {1e3 / args.paced_gap_ms:.0f} events/s per "
        "stream; added ITL is what the client saw beyond that):"
    )
    print(_table(rows["paced"]))
    # A client that falls behind reads several events at once: their gaps shrink to 0 and the p50 drops below
    # the server's pace, so a distortion is one of either sign.
    print("\nceiling (most events/s followed with the p50 ITL within 1 ms of the server's pace):")
    for client in clients:
        fine = [r for r in rows["paced"] if r["client"] == client and abs(r["p50_added_itl_ms"]) < 1.0]
        best = max(fine, key=lambda r: r["events_per_s"], default=None)
        print(
            f"  {client}: "
            + (
                f"{best['events_per_s']:,.0f} events/s ({best['streams']} streams)"
                if best
                else "below the lowest level measured"
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
