"""How much does pytest-specdec's load client cost per request and per chunk?

Starts a streaming /v1/completions endpoint in a subprocess that answers at
once (``--chunks`` one-token events per request, no decode delay), drives it
with ``pytest_specdec.client.run_load`` at several concurrency levels and
prints what the client achieved and what it spent. The server is a separate
process so ``time.process_time`` here is the client's CPU alone.

Read "client tok/s per CPU-s" against real decode: ~30 tok/s per stream on
vLLM's CPU build, a few thousand tok/s in aggregate on a GPU. While that
figure is well above the server's real output rate, the client cannot be what
limits a measurement.

    python benchmarks/client_overhead.py [--levels 1,32,200] [--chunks 64] [--waves 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.client import run_load  # noqa: E402
from pytest_specdec.patterns import AccessPattern  # noqa: E402


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
        _chunk(b"data: " + json.dumps({"id": "cmpl-b", "object": "text_completion", "choices": [
            {"index": 0, "text": f" t{i}", "token_ids": [1000 + i], "logprobs": None, "finish_reason": None}
        ]}).encode() + b"\n\n")
        for i in range(chunks)
    ]
    tail = (
        _chunk(b"data: " + json.dumps({"id": "cmpl-b", "choices": [], "usage": {
            "prompt_tokens": 8, "completion_tokens": chunks, "total_tokens": 8 + chunks}}).encode() + b"\n\n")
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


def _measure(url: str, level: int, waves: int, chunks: int, server_pid: int, gap_ms: float = 0.0) -> dict:
    num_prompts = max(16, waves * level)
    pattern = AccessPattern(f"concurrency_{level}", max_concurrency=level, num_prompts=num_prompts)
    prompts = [Prompt("hello", 8, chunks)]
    server_cpu0, cpu0, wall0 = _cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    run = asyncio.run(run_load(url, f"gap={gap_ms}", prompts, pattern))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    server_cpu = _cpu_seconds(server_pid) - server_cpu0
    failed = [r for r in run.records if not r.success]
    itls = sorted(g for r in run.records for g in r.itl)
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0].error}")
    total_chunks = sum(len(r.itl) + 1 for r in run.records)
    return {
        "streams": level,
        "requests": num_prompts,
        "wall_s": wall,
        "req_per_s": num_prompts / run.duration_s,
        "chunks_per_s": total_chunks / run.duration_s,
        "wall_ms_per_req": 1e3 * wall / num_prompts,
        "cpu_ms_per_req": 1e3 * cpu / num_prompts,
        "cpu_us_per_chunk": 1e6 * cpu / total_chunks,
        "client_tok_per_cpu_s": total_chunks / cpu,
        "client_cpu_share": cpu / wall,
        "server_cpu_share": server_cpu / wall,
        "median_ttft_ms": 1e3 * statistics.median(r.ttft for r in run.records),
        "median_itl_ms": 1e3 * statistics.median(itls),
        "p99_itl_ms": 1e3 * itls[int(0.99 * (len(itls) - 1))],
    }


COLUMNS = [
    ("streams", "streams", "{:d}"),
    ("requests", "requests", "{:d}"),
    ("req_per_s", "req/s", "{:.1f}"),
    ("chunks_per_s", "chunks/s", "{:,.0f}"),
    ("wall_ms_per_req", "wall ms/req", "{:.2f}"),
    ("cpu_ms_per_req", "client CPU ms/req", "{:.2f}"),
    ("cpu_us_per_chunk", "CPU us/chunk", "{:.1f}"),
    ("client_tok_per_cpu_s", "client tok/CPU-s", "{:,.0f}"),
    ("client_cpu_share", "client CPU", "{:.0%}"),
    ("server_cpu_share", "server CPU", "{:.0%}"),
    ("median_ttft_ms", "p50 TTFT ms", "{:.2f}"),
    ("median_itl_ms", "p50 ITL ms", "{:.2f}"),
    ("p99_itl_ms", "p99 ITL ms", "{:.2f}"),
]


def _table(rows: list[dict]) -> str:
    cells = [[title for _, title, _ in COLUMNS]]
    cells += [[fmt.format(row[key]) for key, _, fmt in COLUMNS] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,32,200", help="concurrent streams, comma-separated")
    parser.add_argument("--chunks", type=int, default=64, help="one-token events per response")
    parser.add_argument("--waves", type=int, default=4, help="requests per level = max(16, waves * streams)")
    parser.add_argument("--paced-gap-ms", type=float, default=10.0,
                        help="second table: the server waits this long between events (0: skip it)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.chunks))
        return 0

    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--chunks", str(args.chunks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        _measure(url, 4, 1, args.chunks, server.pid)  # warm-up: imports, first connections
        rows = [_measure(url, level, args.waves, args.chunks, server.pid) for level in levels]
        paced = [_measure(url, level, args.waves, args.chunks, server.pid, args.paced_gap_ms)
                 for level in levels] if args.paced_gap_ms > 0 else []
    finally:
        server.terminate()
        server.wait(10)
    print(f"client overhead: {args.chunks} one-token chunks per request, instant server in pid {server.pid}, "
          f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print("instant server (events as fast as it can write them; the client may read several per read):")
    print(_table(rows))
    if paced:
        per_stream = 1e3 / args.paced_gap_ms
        print(f"\npaced server ({args.paced_gap_ms:g} ms between events = {per_stream:.0f} tok/s per stream, "
              "one event per read, as from a decoding server):")
        print(_table(paced))
    print("client tok/CPU-s = chunks the client parses per second of its own CPU (an upper bound on the "
          "token rate it can follow with one core); compare ~30 tok/s per stream on vLLM CPU, "
          "thousands of tok/s per GPU.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
