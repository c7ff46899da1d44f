"""Inner pytest sessions of one llama.cpp speedup gate against a baseline build (--specdec-baseline-from
build:PATH), on real servers: tests/integration/test_builds_sequential_cpu.py and
benchmarks/forced_build_ab.py run them.

Two suites of one check each, gating only ``speedup_output_throughput`` at a 10% tolerance with the default
auto repeats: n-gram on random tokens (content-bound: what SD does depends on the prompts drawn), and a draft
model at a forced acceptance (docs/engines.md: the engine accepts a set mean length whatever the drafts say,
so only the machinery is compared).  Every server runs one thread (``-t 1``): see the test module.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BUNDLED = "specdec:smollm2-135m"
CHECK = "speedup_output_throughput against the baseline build"
# What these tests check is the sequential decision, not the client.  In two CI runs of the A/A test
# (2026-11-28) the baseline build's second reference run read client-bound, a p99 dispatch lag of 10.0 and
# 12.9 ms against the 10 ms default, which leaves the speedup not compared (undecided); a probe of one
# session saw a whole run start 8 ms late, its first two requests alike.  With three requests a run the p99
# is the largest lag, and 50 ms is still under 2% of a run's three seconds.  The cause is not found (noted).
CLIENT_LAG = "--specdec-max-dispatch-lag-ms=50"
# The cap on draws a side (--specdec-max-repeats), above the default 8.  On the slowest 2-core boxes one run's
# timing spreads 8-11%, and a check whose zone is 10% wide then needs more than 8 draws to narrow its interval
# into it: CI ended the A/A undecided at the cap (2026-12-01) and, in whole runs here, the SD-slow build
# (0.907, 0.750-1.096).  The rule spends its error rates over every look up to the cap (verdict.sequential.rule,
# Bonferroni), so a higher cap keeps them; a quiet box still stops at 2-4 draws, and only an undecided check
# pays for the draws beyond 8.
MAX_DRAWS = 12
# The suite accepts the TTFT flag (`result.accept_flags`, which holds for both builds' comparisons): n-gram does
# not touch prefill, so a TTFT ratio beyond 25% one request at a time reads as a cold side, but one thread
# prefilling fresh 32-token prompts spreads TTFT more than that by itself.  Measured on the slow CI box
# (2026-11-29): six interleaved rounds of three requests, each side's median TTFT 276-485 ms and the per-round
# ratio 0.72x-1.44x with both servers warm; two CI runs in a row ended one of these tests undecided on that
# flag alone, still standing after both sides were measured again.  What these tests decide is the output
# throughput's speedup; a cold side still shows in its warm-up and in the ceiling check.

SUITE = f"""
import pytest

NGRAM = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}}


@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp", speculative_config=NGRAM, server_args=["-t", "1"])
@pytest.mark.workload("random_s", input_len=32, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=6)
def test_ngram_speedup(specdec):
    result = specdec.run()
    result.accept_flags("ttft_at_concurrency_1")  # one thread prefilling fresh 32-token prompts: see above
    result.assert_no_regression(metrics=["speedup_output_throughput"], tolerance=0.10)
"""


# The same gate at a forced acceptance (docs/engines.md): a draft model of the bundled model's first two layers,
# its drafts accepted at a mean of 3 tokens a step whatever they say, so a draw's speedup no longer depends on
# its prompts.  Only the machinery is compared; both builds force the same length.
FORCED_SUITE = f"""
import pytest

FORCED = {{
    "method": "draft_model", "model": "{BUNDLED}@layers=2", "num_speculative_tokens": 4,
    "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0,
}}


@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp", speculative_config=FORCED, server_args=["-t", "1"])
@pytest.mark.workload("random_s", input_len=32, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=6)
def test_forced_speedup(specdec):
    result = specdec.run()
    result.accept_flags("ttft_at_concurrency_1")  # as in the n-gram suite: one thread prefilling fresh prompts
    result.assert_no_regression(metrics=["speedup_output_throughput"], tolerance=0.10)
"""
SUITES = {"content-bound": SUITE, "forced acceptance": FORCED_SUITE}

# Each inner session's client on one core and every server it starts on the other.  A server runs one
# thread; left to the scheduler, that thread and the client's (which reads every streamed token) met on one
# core in some server starts and not in others, so a server's speed depended on where its start landed, and
# the A/A's pairs spread wider than the 10% zone allows within the cap; pinned, they agree far better
# (docs/benchmarks.md, "The builds A/A on a box whose speed moves between draws").
PINNED = """
import os

os.sched_setaffinity(0, {0})  # this session's client


def pytest_specdec_server_command(launch):
    return ["taskset", "-c", "1", *launch.default_command()]  # every server, on the other core
"""


def can_pin() -> bool:
    """Whether this box has the two cores and the `taskset` the pinned sessions need."""
    return {0, 1} <= os.sched_getaffinity(0) and shutil.which("taskset") is not None


def session(directory: Path, *args: str, suite: str = SUITE):
    """One inner pytest session of `suite` in `directory`: (completed process, its one row, seconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "test_builds_sequential.py").write_text(suite)
    if can_pin():
        (directory / "conftest.py").write_text(PINNED)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--specdec-cpu", CLIENT_LAG]
    command += [f"--specdec-max-repeats={MAX_DRAWS}"]
    command += [f"--specdec-report={directory / 'report'}", f"--basetemp={directory / 'tmp'}", *args]
    start = time.monotonic()
    # 12 draws a side, 37 server starts, each warmed until steady: minutes on the slowest boxes.
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.monotonic() - start
    report = directory / "report" / "results.json"
    assert report.is_file(), run.stdout[-4000:] + run.stderr[-2000:]
    (row,) = json.loads(report.read_text())["results"]
    decided = [
        f"{d['outcome']} {d['estimate']:.3f} {d['interval']} {d['stopped']}; {d['basis']}"
        for d in row["decisions"].values()
    ]
    print(f"inner session: {seconds:.0f} s, runs {row['runs']!r}, regression {row['regression']!r}, {decided}")
    return run, row, seconds
