"""How much slower tests/support/planted_build.py's SD-only plant makes llama.cpp's SD server, on real servers.

Rounds of four servers, one at a time (the order reversed every other round, so drift on a shared box
falls on both builds alike): the real build's SD server, the planted build's SD server, and each build's
reference (no speculation; the plant must leave it alone).  Each serves the same code-edit prompts one at a
time (the gate's ``throughput_low`` traffic: concurrency 1), greedy, on llama.cpp's native ``/completion``
endpoint with the plugin's settings (``cache_prompt`` false, every request to its ``n_predict``).

Printed per round: output tok/s of each server (output tokens over the requests' wall time), the planted
build's ratio to the real one for SD and for the reference, and the speedup's change; then whether the
planted SD server's tokens and drafts equal the real one's (outputs and acceptance the same), and the
ratios' median and range over the rounds.

    .venv/bin/python benchmarks/planted_sd_slowdown.py --rounds 4
    .venv/bin/python benchmarks/planted_sd_slowdown.py --sd-changes '{"cpuparams_batch.poll": 0}'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_specdec.engines.llamacpp import DEFAULT_CONTEXT, DEFAULT_SLOTS, SHIM_PATH  # noqa: E402
from pytest_specdec.load.workloads import resolve_workload  # noqa: E402
from pytest_specdec.serving.gguf_models import resolve_gguf  # noqa: E402
from pytest_specdec.serving.models import resolve_model  # noqa: E402
from tests.support.planted_build import SD_SLOWER, plant  # noqa: E402

BUNDLED = "specdec:smollm2-135m"
# The n-gram settings of tests/integration/test_builds_sequential_cpu.py (k=4, n-gram length 3).
NGRAM = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "4"]
NGRAM += ["--spec-ngram-simple-min-hits", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, payload: dict, timeout: float = 300) -> dict:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def running(command: list[str], port: int, cwd: str | None = None):
    """A server started from `command` on `port`, once its /health answers: its base URL; stopped after."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {' '.join(command)}")
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def serve(python: str, sd: bool, prompts, output_len: int, extra: list[str]) -> dict:
    """Start one server, send `prompts` one at a time, stop it: tok/s, tokens and drafts per prompt."""
    port = free_port()
    command = [python, SHIM_PATH, "-m", resolve_gguf(BUNDLED), "--alias", BUNDLED, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--metrics", "-np", str(DEFAULT_SLOTS), "-c", str(DEFAULT_CONTEXT), "--kv-unified"]
    command += (NGRAM if sd else []) + extra
    with running(command, port) as base:
        settings = {"temperature": 0.0, "ignore_eos": True, "cache_prompt": False, "return_tokens": True}
        post(base + "/completion", {"prompt": "def warm_up():", "n_predict": 8, **settings})  # not timed
        tokens, drafts, seconds, count = [], [], 0.0, 0
        for prompt in prompts:
            start = time.perf_counter()
            answer = post(base + "/completion", {"prompt": prompt.text, "n_predict": output_len, **settings})
            seconds += time.perf_counter() - start
            timings = answer.get("timings") or {}
            count += timings.get("predicted_n", len(answer.get("tokens") or []))
            tokens.append(answer.get("tokens"))
            drafts.append((timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)))
        return {"tok_s": count / seconds, "tokens": tokens, "drafts": drafts}


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f}, n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=3, help="code-edit prompts per server (default 3)")
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-args", default="", help="more flags for every server, e.g. '-t 1'")
    parser.add_argument("--sd-changes", default=json.dumps(SD_SLOWER), help="the plant's SD-only settings (JSON)")
    args = parser.parse_args()
    sd_changes = json.loads(args.sd_changes)
    real = sys.executable

    from transformers import AutoTokenizer

    workload = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    prompts = workload.build(AutoTokenizer.from_pretrained(resolve_model(BUNDLED)), args.prompts, args.seed)
    with open("/proc/cpuinfo") as info:
        model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "?")
    print(f"box: {model}, {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    print(f"plant (SD server only): {json.dumps(sd_changes)}; server flags: {args.server_args or 'none'}")
    print(f"{args.prompts} code_edit prompts of {args.input_len} tokens, {args.output_len} out each, one at a time")
    print(f"{args.rounds} rounds, the order reversed every other one")
    sd_ratio, ref_ratio, speedup_change, same_tokens, same_drafts = [], [], [], True, True
    with tempfile.TemporaryDirectory() as work:
        planted = str(plant(real, work, sd_changes=sd_changes))
        order = [("real", real, True), ("planted", planted, True), ("planted", planted, False), ("real", real, False)]
        heads = ("SD real", "SD plant", "ref real", "ref plnt")
        print(f"{'round':>5} " + " ".join(f"{h:>8}" for h in heads) + "  SD ratio  ref ratio  speedup")
        for round_ in range(args.rounds):
            got = {}
            for name, python, sd in order if round_ % 2 == 0 else order[::-1]:
                got[name, sd] = serve(python, sd, prompts, args.output_len, args.server_args.split())
            sd_ratio.append(got["planted", True]["tok_s"] / got["real", True]["tok_s"])
            ref_ratio.append(got["planted", False]["tok_s"] / got["real", False]["tok_s"])
            speedups = [got[b, True]["tok_s"] / got[b, False]["tok_s"] for b in ("real", "planted")]
            speedup_change.append(speedups[1] / speedups[0] - 1)
            same_tokens &= got["planted", True]["tokens"] == got["real", True]["tokens"]
            same_drafts &= got["planted", True]["drafts"] == got["real", True]["drafts"]
            print(
                f"{round_ + 1:>5} "
                + " ".join(f"{got[k]['tok_s']:8.1f}" for k in (("real", True), ("planted", True)))
                + " "
                + " ".join(f"{got[k]['tok_s']:8.1f}" for k in (("real", False), ("planted", False)))
                + f"  {sd_ratio[-1]:8.3f}  {ref_ratio[-1]:9.3f}  {speedup_change[-1]:+7.1%}"
                + f"   (speedups {speedups[0]:.2f}x real, {speedups[1]:.2f}x planted)"
            )
            drafted = got["real", True]["drafts"]
        print(f"planted SD tok/s over real SD tok/s: {spread(sd_ratio)}")
        print(f"planted reference over real reference: {spread(ref_ratio)}")
        print(f"speedup change (planted against real): {spread(speedup_change)}")
        print(f"SD tokens the same on both builds in every round: {same_tokens}")
        print(f"SD drafts the same in every round: {same_drafts}; the real build's (drafted, accepted): {drafted}")
        print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
