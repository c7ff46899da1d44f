"""A stand-in server process for lifecycle tests (port, readiness, stop).

Speaks just enough of vLLM's API (/health, /v1/models, /metrics) to exercise
the plugin's process handling in a second instead of a minute and a half.
It never stands in for a measurement: tests of what vLLM serves use vLLM.

    python fake_server.py --port P --served-model-name NAME [--mode MODE]

Modes: ok, exit (log a complaint and exit 3), exit-late (root cause far above
the last 40 lines), hang (never healthy),
ignore-term (ignore SIGTERM), slow (healthy after 1.5 s), child (also fork a
child that keeps running, like vLLM's engine core), wrong-model.
"""

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--mode", default="ok")
    args, rest = parser.parse_known_args()
    print(f"fake server argv: {json.dumps(sys.argv[1:])}", flush=True)
    if os.environ.get("FAKE_SERVER_PIDFILE"):
        with open(os.environ["FAKE_SERVER_PIDFILE"], "a") as handle:
            handle.write(f"{os.getpid()}\n")
    if args.mode == "exit":
        print("ValueError: fake complaint about the speculative config", flush=True)
        return 3
    if args.mode == "exit-late":
        print("WARNING 11-22 [x.py:1] OSError: [Errno 24] is only a warning", flush=True)
        print("ERROR 11-22 [worker.py:9] ValueError: the real root cause", flush=True)
        for line in range(60):
            print(f"  File traceback noise line {line}", flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return 1
    if args.mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.mode == "child" and os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    started = time.monotonic()
    model = "someone-else" if args.mode == "wrong-model" else args.served_model_name

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            healthy = args.mode != "hang" and (args.mode != "slow" or time.monotonic() - started > 1.5)
            if self.path == "/health":
                self._send(200 if healthy else 503, b"")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": model}]}).encode())
            elif self.path == "/metrics":
                body = f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} 5.0\n'
                self._send(200, body.encode())
            else:
                self._send(404, b"")

        def _send(self, code, body):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
