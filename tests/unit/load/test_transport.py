"""The load client's HTTP/1.1 transport against raw sockets: framings, splits, reuse and failures.

A tiny asyncio server writes exactly the bytes a test gives it (in the pieces
given), so every framing a real server may use is checked byte for byte:
chunked bodies cut anywhere, Content-Length and close-delimited bodies,
keep-alive reuse, HTTP/1.0, error statuses and a connection dropped mid-body.
"""

import asyncio
import json

import pytest

from pytest_specdec.load.transport import ProtocolError, Transport

EVENTS = [b'data: {"choices": [{"text": "a"}]}\n\n', b'data: {"choices": [{"text": "b"}]}\n\n', b"data: [DONE]\n\n"]
BODY = b"".join(EVENTS)


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def read_request(reader) -> None:
    """Read one request (head and Content-Length body) off a connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    await reader.readexactly(length)


async def serve(responses, *, split=None):
    """Answer each request on a connection with the next response; `split` cuts every write into pieces."""
    served = {"requests": 0, "connections": 0}

    async def handle(reader, writer):
        served["connections"] += 1
        try:
            while responses:
                await read_request(reader)
                served["requests"] += 1
                response, close = responses.pop(0)
                for piece in split(response) if split else [response]:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions", served


async def post(url, body=b"{}"):
    transport = Transport(url)
    events = []
    try:
        status, error = await transport.post(body, lambda payload, at: events.append(payload))
    finally:
        transport.close()
    return status, error, events


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize("cut", range(1, len(HEAD_CHUNKED + chunked(*EVENTS)), 7))
def test_a_chunked_stream_cut_anywhere_gives_the_same_events(cut):
    async def main():
        raw = HEAD_CHUNKED + chunked(*EVENTS)
        server, url, _ = await serve([(raw, True)], split=lambda data: [data[:cut], data[cut:]])
        async with server:
            return await post(url)

    status, _, events = run(main())
    assert status == 200
    assert events == [e[6:-2] for e in EVENTS]


def test_byte_by_byte_content_length_and_close_delimited_bodies():
    async def main():
        with_length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
        until_close = b"HTTP/1.0 200 OK\r\n\r\n" + BODY
        results = []
        for raw in (with_length, until_close):
            server, url, _ = await serve([(raw, True)], split=lambda data: [data[i : i + 1] for i in range(len(data))])
            async with server:
                results.append(await post(url))
        return results

    for status, _, events in run(main()):
        assert status == 200 and events == [e[6:-2] for e in EVENTS]


def test_keep_alive_connections_are_reused_and_http_1_0_ones_are_not():
    async def main():
        raw = HEAD_CHUNKED + chunked(*EVENTS)
        server, url, served = await serve([(raw, False), (raw, False), (raw, True)])
        async with server:
            transport = Transport(url)
            for _ in range(3):
                status, _ = await transport.post(b"{}", lambda payload, at: None)
                assert status == 200
            transport.close()
        return served

    served = run(main())
    assert served == {"requests": 3, "connections": 1}


def test_an_error_status_returns_its_body_and_no_events():
    async def main():
        body = json.dumps({"error": "model not found"}).encode()
        raw = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        server, url, _ = await serve([(raw, True)])
        async with server:
            return await post(url)

    status, error, events = run(main())
    assert status == 404 and b"model not found" in error and events == []


def test_a_connection_dropped_mid_body_is_an_error_not_a_short_success():
    async def main():
        raw = HEAD_CHUNKED + chunked(EVENTS[0])[:-5]  # the terminating chunk never comes
        server, url, _ = await serve([(raw, True)])
        async with server:
            return await post(url)

    with pytest.raises(ProtocolError, match="closed the connection mid-response"):
        run(main())


def test_a_response_that_is_not_http_is_named():
    async def main():
        server, url, _ = await serve([(b"SSH-2.0-OpenSSH_9\r\n\r\n", True)])
        async with server:
            return await post(url)

    with pytest.raises(ProtocolError, match="not an HTTP/1.x response"):
        run(main())


def test_only_http_urls_are_taken():
    with pytest.raises(ValueError, match="http:// or https://"):
        Transport("ftp://example.org/v1/completions")


def test_a_kept_alive_connection_closed_before_answering_is_retried_once_on_a_fresh_one():
    # llama.cpp's HTTP server closes a kept-alive connection after its idle timeout or request limit without
    # saying so: the next request on it gets no byte back.  Sent again on a new connection, it succeeds; a
    # connection that dies after the response began is never retried (that is a real failure).
    async def scenario():
        connections = []

        async def handle(reader, writer):
            connections.append(writer)
            await read_request(reader)
            writer.write(HEAD_CHUNKED + chunked(BODY))
            await writer.drain()
            if len(connections) == 1:  # the first connection: read the next request, then hang up unanswered
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"
        transport = Transport(url)
        events = []
        try:
            first = await transport.post(b"{}", lambda payload, at: events.append(payload))
            second = await transport.post(b"{}", lambda payload, at: events.append(payload))
        finally:
            transport.close()
            server.close()
            await server.wait_closed()
        return first, second, events, len(connections)

    first, second, events, connections = asyncio.run(scenario())
    assert first == second == (200, b"")
    assert connections == 2 and len(events) == 2 * 3  # both responses' events, each delivered once


def test_the_last_chunks_closing_crlf_arriving_late_is_read_as_the_end_of_that_response():
    # llama.cpp's server sends the zero-size chunk and its closing CRLF in separate writes.  Finishing at the
    # size line left that CRLF to be read as the start of the next response on the kept-alive connection.
    async def scenario():
        async def handle(reader, writer):
            for _ in range(2):
                await read_request(reader)
                response = HEAD_CHUNKED + chunked(BODY)
                writer.write(response[:-2])  # ... "0\r\n"
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(b"\r\n")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"
        transport = Transport(url)
        events = []
        try:
            results = [await transport.post(b"{}", lambda payload, at: events.append(payload)) for _ in range(2)]
        finally:
            transport.close()
            server.close()
            await server.wait_closed()
        return results, events

    results, events = asyncio.run(scenario())
    assert results == [(200, b""), (200, b"")] and len(events) == 6
