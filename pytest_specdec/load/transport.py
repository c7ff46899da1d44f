"""Streamed completions over HTTP/1.1 on asyncio's Protocol API: the load client's transport.

Why by hand: the load client must cost less per streamed event than the
server it measures, or a fast server's TTFT and ITL measure the client.
`benchmarks/client_overhead.py` compares this transport with httpx (what
the client used before), with `vllm bench serve`'s aiohttp request function
and with aiohttp doing this client's own per-event work, against the same
streaming server, and prints the figures (docs/benchmarks.md keeps the
ones measured).  A general HTTP library does work a token stream does not need (header
objects, a reader abstraction per read, per-chunk bookkeeping), and that is
most of its cost per event.

What it does: http and https, keep-alive connections reused within a run,
chunked, Content-Length or close-delimited bodies, and Server-Sent Events:
``data:`` lines become events; comments, ``event:``/``id:`` fields and
blank lines are skipped; LF or CRLF line ends.  As `vllm bench serve`'s
handler does, a complete JSON event is dispatched before its terminating
blank line arrives, so a server's write split just before ``\\n\\n`` does not
move TTFT or ITL.  Every event carries the time its bytes were read.
What it does not: proxies (a hop would distort every latency), redirects,
compression (it asks for none), HTTP/2.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Callable
from urllib.parse import urlsplit

EventSink = Callable[[bytes, float], None]  # (the event's data payload, perf_counter when it was read)
MAX_HEAD_BYTES = 64 * 1024


class ProtocolError(ConnectionError):
    """The server's bytes are not the HTTP/1.1 response this client can read."""


class _SSE:
    """Splits a body into SSE ``data:`` payloads, whatever the framing of the reads."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes, out: list[bytes]) -> None:
        buffer = self._buffer + data if self._buffer else data
        if b"\n" in buffer:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    out.append(line[5:].strip())
        tail = buffer.strip()
        if tail.startswith(b"data:") and (tail.endswith(b"}") or tail.endswith(b"[DONE]")):
            payload = tail[5:].strip()
            if payload == b"[DONE]" or _is_json(payload):
                out.append(payload)
                buffer = b""
        self._buffer = buffer

    def close(self, out: list[bytes]) -> None:
        line = self._buffer.strip()
        self._buffer = b""
        if line.startswith(b"data:"):
            out.append(line[5:].strip())


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload)
    except ValueError:
        return False
    return True


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._done: asyncio.Future | None = None
        self._state = "idle"  # idle, head, body, done

    # --- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._done is None or self._done.done():
            return
        if self._state == "body" and not self._chunked and self._remaining is None:
            self._finish()  # the body ran to the end of the connection
        elif self._state == "body" and self._chunked and self._chunk_left == -1:
            self._finish()  # the last chunk arrived; only its closing CRLF did not
        else:
            self._done.set_exception(exc or ProtocolError("the server closed the connection mid-response"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._done is None or self._done.done():
            return  # bytes nobody asked for (a server talking after its response): ignored
        try:
            self._parse(self._buffer + data if self._buffer else data, now)
        except Exception as exc:  # noqa: BLE001 - a bad frame, or the event handler's own error (bad JSON)
            if not self._done.done():
                self._done.set_exception(exc)
            self.transport.close()

    # --- one request -----------------------------------------------------------------------

    async def request(self, head: bytes, body: bytes, on_event: EventSink) -> tuple[int, bytes]:
        """Send a request; stream a 200's events to `on_event`; return (status, body of a non-200)."""
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._state, self._buffer, self._status = "head", b"", 0
        self._chunked, self._remaining, self._chunk_left, self._crlf = False, None, None, 0
        self._keep_alive, self._error_body = True, bytearray()
        self._sse, self._on_event, self._events = _SSE(), on_event, []
        self.transport.write(head + body)
        return await self._done

    def _parse(self, buffer: bytes, now: float) -> None:
        if self._state == "head":
            buffer = buffer.lstrip(b"\r\n")  # empty lines before a status line are ignored (RFC 9112, 2.2)
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError("response headers over 64 KiB")
                self._buffer = buffer
                return
            self._head(buffer[:end])
            buffer = buffer[end + 4 :]
            self._state = "body"
            if self._remaining == 0:
                self._finish()
                return
        self._buffer = b""
        if self._chunked:
            self._dechunk(buffer, now)
        elif self._remaining is not None:
            take = buffer[: self._remaining]
            self._remaining -= len(take)
            self._feed(take, now)
            if self._remaining == 0:
                self._finish()
        else:
            self._feed(buffer, now)

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
        self._status = int(parts[1])
        connection = b""
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self._chunked = True
            elif name == b"content-length":
                self._remaining = int(value)
            elif name == b"connection":
                connection = value
        # HTTP/1.1 keeps the connection unless told to close; 1.0 closes unless told to keep it.
        self._keep_alive = connection != b"close" if parts[0] == b"HTTP/1.1" else connection == b"keep-alive"
        if self._chunked:
            self._remaining = None

    def _dechunk(self, buffer: bytes, now: float) -> None:
        while buffer:
            if self._chunk_left == -1:  # after the last chunk: trailer lines up to an empty one
                end = buffer.find(b"\r\n")
                if end < 0:
                    self._buffer = buffer
                    return
                if end == 0:
                    # The response ends here, not at the last chunk's size line: a CRLF left unread would
                    # be taken for the start of the next response on this connection.
                    self._finish()
                    return
                buffer = buffer[end + 2 :]  # a trailer field: not used
                continue
            if self._crlf:  # the CRLF that ends a chunk's data
                skip = min(self._crlf, len(buffer))
                self._crlf -= skip
                buffer = buffer[skip:]
                continue
            if self._chunk_left is None:  # a size line
                end = buffer.find(b"\r\n")
                if end < 0:
                    self._buffer = buffer
                    return
                size = int(buffer[:end].split(b";", 1)[0], 16)
                buffer = buffer[end + 2 :]
                if size == 0:
                    self._chunk_left = -1  # the last chunk: trailers and the final CRLF follow
                    continue
                self._chunk_left = size
                continue
            take = buffer[: self._chunk_left]
            buffer = buffer[len(take) :]
            self._chunk_left -= len(take)
            if self._chunk_left == 0:
                self._chunk_left, self._crlf = None, 2
            self._feed(take, now)

    def _feed(self, data: bytes, now: float) -> None:
        if self._status != 200:
            self._error_body += data
            return
        events = self._events
        self._sse.feed(data, events)
        if events:
            for payload in events:
                self._on_event(payload, now)
            events.clear()

    def _finish(self) -> None:
        if self._status == 200:
            self._sse.close(self._events)
            for payload in self._events:
                self._on_event(payload, time.perf_counter())
            self._events.clear()
        self._state = "done"
        if not self._keep_alive:
            self.transport.close()
        if not self._done.done():
            self._done.set_result((self._status, bytes(self._error_body)))

    @property
    def reusable(self) -> bool:
        return not self.closed and self._state == "done" and self._keep_alive

    @property
    def unanswered(self) -> bool:
        """The connection ended before a single byte of the response: the request can be sent again."""
        return self._state == "head" and not self._buffer.strip()


class Transport:
    """Connections to one endpoint for one run: reused when free, closed at the end."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the endpoint URL must be http:// or https://, got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        path = parts.path or "/"
        host = self.host if ":" not in self.host else f"[{self.host}]"
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{self.port}\r\nUser-Agent: pytest-specdec\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            "Accept-Encoding: identity\r\nConnection: keep-alive\r\n"
        )
        self._free: list[_Connection] = []
        self._all: list[_Connection] = []

    async def post(self, body: bytes, on_event: EventSink) -> tuple[int, bytes]:
        """POST `body` (JSON); a 200's SSE events go to `on_event`; returns (status, a non-200's body)."""
        head = (self._head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
        connection = None
        while self._free and connection is None:
            candidate = self._free.pop()
            connection = candidate if not candidate.closed else None
        if connection is not None:
            try:
                return await self._send(connection, head, body, on_event)
            except ConnectionError:  # ProtocolError, or a reset
                if not connection.unanswered:
                    raise
                # A kept-alive connection the server closed before answering (its keep-alive timeout or
                # request limit, as llama.cpp's HTTP server does): nothing reached the caller; send it
                # again on a fresh connection, as HTTP clients do for a stale keep-alive connection.
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        self._all.append(connection)
        return await self._send(connection, head, body, on_event)

    async def _send(self, connection: "_Connection", head: bytes, body: bytes, on_event: EventSink):
        try:
            result = await connection.request(head, body, on_event)
        except BaseException:
            connection.transport.close()  # half-read or cancelled: never reused
            raise
        if connection.reusable:
            self._free.append(connection)
        return result

    def close(self) -> None:
        for connection in self._all:
            if connection.transport is not None:
                connection.transport.close()
        self._all.clear()
        self._free.clear()
