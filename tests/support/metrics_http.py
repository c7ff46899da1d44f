"""A metrics page served over HTTP/1.1 keep-alive, as vLLM's and llama.cpp's servers serve theirs.

`serve_metrics(text)` yields ``(url, seen)``: ``seen["connections"]`` counts the connections made to it and
``seen["paths"]`` the paths asked for; any path but ``/metrics`` answers 404.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve_metrics(text: str):
    seen = {"connections": 0, "paths": []}
    page = text.encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            seen["connections"] += 1
            super().setup()

        def do_GET(self):
            seen["paths"].append(self.path)
            status, body = (200, page) if self.path == "/metrics" else (404, b"not found")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
