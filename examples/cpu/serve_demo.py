"""Serve the bundled model on vLLM's CPU build with and without n-gram SD.

The plugin's core used from a plain script (no pytest): start the no-SD
reference server, then the n-gram server, send the same greedy prompts to
each, and print what came back, the decode speed and the SD counters.

    .venv/bin/python examples/cpu/serve_demo.py [--max-tokens 128] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pytest_specdec import ServerPool, ServerSpec

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
PROMPTS = {
    # Creative text: little to copy from the prompt, n-gram drafts rarely hit.
    "story": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    # Code that repeats itself: the answer copies the prompt, n-gram's best case.
    "code": (
        "Fix the typo in this code and print it again in full:\n\n"
        "def area(width, height):\n    return width * heigth\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
        "def describe(width, height):\n    return f'{width}x{height}: area {area(width, height)}, "
        "perimeter {perimeter(width, height)}'\n"
    ),
    "summary": (
        "Summarise: The town council met on Tuesday to discuss the new bridge. The bridge will "
        "connect the north and south halves of the town. Construction starts in May and ends in "
        "two years. The council said the bridge will cost four million pounds."
    ),
}


def chat(server, prompt: str, max_tokens: int) -> tuple[str, int, float]:
    began = time.monotonic()
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={
            "model": server.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
        timeout=600,
    )
    response.raise_for_status()
    body = response.json()
    return body["choices"][0]["message"]["content"], body["usage"]["completion_tokens"], time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.mkdtemp(prefix="specdec-demo-")))
    args = parser.parse_args(argv)

    pool = ServerPool("cpu", args.log_dir, on_event=lambda message: print(f"[specdec] {message}", flush=True))
    rows = []
    try:
        for spec in (ServerSpec(MODEL), ServerSpec(MODEL, speculative_config=NGRAM)):
            server = pool.get(spec)
            print(f"\n=== {spec.label()} at {server.url} (started in {server.startup_seconds:.1f} s)")
            for name, prompt in PROMPTS.items():
                before = server.spec_decode_counters()
                text, tokens, seconds = chat(server, prompt, args.max_tokens)
                sd = server.spec_decode_counters() - before
                acceptance = f"{sd.acceptance_rate:.0%}" if sd.present and sd.num_draft_tokens else "-"
                rows.append((spec.label(), name, tokens, tokens / seconds, acceptance))
                first_lines = "\n    ".join(text.strip().splitlines()[:4])
                print(f"--- {name}: {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.1f} tok/s), "
                      f"draft acceptance {acceptance}\n    {first_lines}", flush=True)
    finally:
        pool.close()

    width = max(len(row[0]) for row in rows)
    print(f"\n{'server':<{width}} {'prompt':<8} {'tokens':>6} {'tok/s':>7} {'accepted':>8}")
    for label, name, tokens, rate, acceptance in rows:
        print(f"{label:<{width}} {name:<8} {tokens:>6} {rate:>7.1f} {acceptance:>8}")
    print(f"\nserver logs: {args.log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
