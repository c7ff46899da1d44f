"""Whether the way the xllamacpp shim is launched changes how fast llama.cpp decodes, on real servers.

A builds A/B (``--specdec-baseline-from build:PATH``) launches the baseline build's shim by its file under
that environment's Python.  This environment's shim used to run as a module (``python -m
pytest_specdec.engines.llamacpp_serve``), which imports the whole plugin into the server's process first.
This script starts the bundled model's server both ways, one at a time, interleaved (the order reversed
every other round), each on one thread (``-t 1``, as the builds tests run), and sends the same random-number
prompts one at a time, greedy, decoding 48 tokens each; the first two requests warm it and are not counted.

Printed per start: llama.cpp's own decode time per token (the median request's ``predicted_per_token_ms``);
then each launch's median and its starts, and the module launch's ratio to the file launch.

    .venv/bin/python benchmarks/shim_launch.py --rounds 6
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planted_sd_slowdown import BUNDLED, free_port, post, running  # noqa: E402

from pytest_specdec.engines.llamacpp import SHIM_MODULE, SHIM_PATH  # noqa: E402
from pytest_specdec.serving.gguf_models import resolve_gguf  # noqa: E402

LAUNCHES = {"module": [sys.executable, "-m", SHIM_MODULE], "file": [sys.executable, SHIM_PATH]}
WARM, OUTPUT_LEN = 2, 48


def decode_ms(launch: str, requests: int) -> float:
    """Start one server the `launch` way, send `requests` prompts one at a time, stop it: the median
    counted request's decode time per token (ms)."""
    port = free_port()
    command = LAUNCHES[launch] + ["-m", resolve_gguf(BUNDLED), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-np", "4", "-c", "4096", "-t", "1"]
    # Run from another directory than the repository, as an installed plugin is: the module launch then
    # imports the installed package, not the working tree by accident.
    with running(command, port, cwd="/") as base:
        rng, counted = random.Random(0), []
        for i in range(requests):
            prompt = " ".join(str(rng.randint(0, 9999)) for _ in range(20))
            payload = {"prompt": prompt, "n_predict": OUTPUT_LEN, "temperature": 0.0, "ignore_eos": True}
            answer = post(base + "/completion", {**payload, "cache_prompt": False})
            if i >= WARM:
                counted.append(answer["timings"]["predicted_per_token_ms"])
        return statistics.median(counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="starts of each launch (default 6)")
    parser.add_argument("--requests", type=int, default=8, help="requests a start, the first two not counted")
    args = parser.parse_args()
    if args.requests <= WARM:
        parser.error(f"--requests must be over {WARM}: the first {WARM} only warm the server")
    measured: dict[str, list[float]] = {name: [] for name in LAUNCHES}
    for r in range(args.rounds):
        for launch in ("module", "file") if r % 2 == 0 else ("file", "module"):
            measured[launch].append(decode_ms(launch, args.requests))
            print(f"round {r + 1} {launch:>6}: {measured[launch][-1]:.2f} ms per token", flush=True)
    for launch, values in measured.items():
        print(
            f"{launch:>6}: median {statistics.median(values):.2f} ms per token; "
            + ", ".join(f"{v:.1f}" for v in values)
        )
    ratio = statistics.median(measured["module"]) / statistics.median(measured["file"])
    print(f"module / file: {ratio:.3f} (above 1: the module launch decodes slower)")


if __name__ == "__main__":
    main()
