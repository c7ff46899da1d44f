"""A streamed /v1/completions server on a socket of its own, for the client's tests: events, chunks and
their timing set by each test."""

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class P:
    text: str
    prompt_len: int
    output_len: int


@dataclass
class Event:
    delay: float  # seconds before the first piece is written
    pieces: list  # bytes, each written as its own HTTP chunk
    piece_gap: float = 0.02


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    events: list = field(default_factory=list)


def sse(obj) -> bytes:
    # Raw UTF-8 like vLLM's pydantic JSON, so characters can be split across writes.
    data = obj if isinstance(obj, bytes) else json.dumps(obj, ensure_ascii=False).encode()
    return b"data: " + data + b"\n\n"


def token_event(ids, text=None, logprobs=False):
    choice = {"index": 0, "text": text if text is not None else "".join(f"<{i}>" for i in ids), "token_ids": ids}
    if logprobs:
        choice["logprobs"] = {
            "tokens": [f"<{i}>" for i in ids],
            "token_logprobs": [-0.1 * i for i in ids],
            "top_logprobs": [{f"<{i}>": -0.1 * i, "alt": -5.0} for i in ids],
        }
    return {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}


def usage_event(prompt_tokens, completion_tokens):
    return {
        "id": "cmpl-1",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream(chunks, *, first=0.0, gap=0.0, usage=(11, None), logprobs=False):
    """Events for token chunks: `first` s before the first, `gap` s between the rest."""
    events = [
        Event(first if i == 0 else gap, [sse(token_event(ids, logprobs=logprobs))]) for i, ids in enumerate(chunks)
    ]
    if usage is not None:
        prompt_tokens, completion = usage
        total = completion if completion is not None else sum(len(c) for c in chunks)
        events.append(Event(0.0, [sse(usage_event(prompt_tokens, total))]))
    events.append(Event(0.0, [sse(b"[DONE]")]))
    return Reply(events=events)


class StreamServer:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0), self.loop
        ).result(5)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.reset()

    def reset(self):
        # A reply of the last test can end on the server's thread after the client has its last byte and the next
        # test has reset the count: its decrement must not land on the new count (it read one too few in flight).
        self._generation = getattr(self, "_generation", 0) + 1
        self.respond = lambda payload: stream([[1], [2]])
        self.requests = []  # (perf_counter at arrival, path, payload)
        self.in_flight = 0
        self.max_in_flight = 0
        # Replies wait (up to hold_timeout s) until this many requests have been in flight at once, so a test of
        # a concurrency cap reads the cap the client allows, not how fast a loaded machine sent the next request.
        self.hold_until_in_flight = None
        self.hold_timeout = 10.0
        self._reached = None

    async def _connection(self, reader, writer):
        try:
            while True:  # keep-alive: several requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.perf_counter()
                request_line, *header_lines = head.decode().split("\r\n")
                headers = dict(h.split(": ", 1) for h in header_lines if ": " in h)
                body = await reader.readexactly(int(headers.get("Content-Length", headers.get("content-length", 0))))
                payload = json.loads(body)
                self.requests.append((arrived, request_line.split()[1], payload))
                generation = self._generation
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    await self._hold()
                    await self._reply(writer, self.respond(payload))
                finally:
                    if generation == self._generation:
                        self.in_flight -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _hold(self):
        if self.hold_until_in_flight is None:
            return
        if self._reached is None:
            self._reached = asyncio.Event()
        if self.in_flight >= self.hold_until_in_flight:
            self._reached.set()
        try:
            await asyncio.wait_for(self._reached.wait(), self.hold_timeout)
        except asyncio.TimeoutError:
            pass  # never reached: the replies go out and the test reads the smaller max_in_flight

    async def _reply(self, writer, reply):
        if reply.status != 200:
            writer.write(
                f"HTTP/1.1 {reply.status} Internal Server Error\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(reply.body)}\r\n\r\n".encode()
                + reply.body
            )
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        for event in reply.events:
            if event.delay:
                await asyncio.sleep(event.delay)
            for i, piece in enumerate(event.pieces):
                if i:
                    await asyncio.sleep(event.piece_gap)
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def close(self):
        async def shutdown():
            self.server.close()
            # Connections still streaming (e.g. after a client timeout) end here,
            # not as "Task was destroyed but it is pending" at interpreter exit.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
