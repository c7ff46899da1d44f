"""A speedup check when the machine slows down between the reference's runs and SD's: the figures
docs/deciding.md quotes for the machine's move.

Real pytest sessions of one llama.cpp speedup check (n-gram on code edits, --specdec-repeats auto), one
server at a time, alternating:

  quiet      nothing else runs;
  neighbour  a neighbour process (a busy loop for a share of every 20 ms, on one core) starts as SD's server
             is launched, after the reference's runs, and runs to the session's end: the machine, not SD,
             gets slower.

Each session writes the check's decision (its speedup, interval, runs, and the machine's move where the
reference was sent again after SD); the script prints them as a table.  `--code DIR` runs the sessions on
another checkout of the plugin (an earlier commit, for before and after).

    .venv/bin/python benchmarks/machine_move.py [--sessions 2] [--duty 0.05] [--output-len 128] [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOUND = 0.95  # near n-gram's speedup on llama.cpp's CPU build (about 1.0x), so a few percent decide it

TEST = f'''
import json, math, os
import pytest

OUTPUT_LEN = int(os.environ.get("SPECDEC_MOVE_OUTPUT_LEN", "128"))
CONFIGS = {{
    "ngram": {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}},
    "draft": {{"method": "draft_model", "model": "specdec:smollm2-135m@layers=16", "num_speculative_tokens": 3}},
}}
WORKLOADS = {{"ngram": "code_edit", "draft": "random_s"}}
CONFIG = os.environ.get("SPECDEC_MOVE_CONFIG", "ngram")


@pytest.mark.specdec(model="specdec:smollm2-135m", engine="llamacpp", speculative_config=CONFIGS[CONFIG])
@pytest.mark.workload(WORKLOADS[CONFIG], input_len=192, output_len=OUTPUT_LEN)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_speedup(specdec):
    result = specdec.run()
    bound = float(os.environ.get("SPECDEC_MOVE_BOUND", "{BOUND}"))
    if bound <= 0:  # adaptive: 3% above the speedup against the reference's first runs, at the zone's edge
        bound = result.speedup() * 1.03
    try:
        result.assert_speedup(min=bound)
        outcome = "passed"
    except AssertionError:
        outcome = "failed"
    decision = next(iter(result.decisions.values()))
    low, high = decision.ratio_interval
    moved = getattr(decision, "move_measured", None)
    refs = [run.metrics.output_throughput for run in result.reference_runs]
    again = [run.metrics.output_throughput for run in getattr(result, "reference_again_runs", [])]
    with open(os.environ["SPECDEC_MOVE_OUT"], "w") as out:
        json.dump({{"outcome": decision.outcome, "asserted": outcome, "speedup": decision.ratio, "low": low,
                   "high": high, "runs": decision.runs, "stopped": decision.stopped, "why": decision.why,
                   "moved": None if moved is None else math.expm1(moved), "reference": refs,
                   "reference_again": again, "bound": bound}}, out)
'''

CONFTEST = '''
import atexit, os, subprocess, sys

NEIGHBOUR = """
import sys, time
duty, period = float(sys.argv[1]), 0.02
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < duty * period:
        pass
    time.sleep(period * (1 - duty))
"""
_started = []


_launched = []


def pytest_specdec_server_command(launch):
    # The first SD server launched after the reference's: the reference's runs are done (the plugin may
    # start the test's SD server before it, at set-up).
    duty = float(os.environ.get("SPECDEC_NEIGHBOUR_DUTY", "0"))
    sd = bool(launch.spec.speculative_config)
    if duty > 0 and sd and not sd_started() and "reference" in _launched:
        _started.append(subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(duty)]))
    _launched.append(("sd" if sd else "reference") + (" (neighbour running)" if _started else ""))
    with open(os.environ["SPECDEC_MOVE_OUT"] + ".launches", "w") as out:
        out.write(", ".join(_launched))
    return None


def sd_started():
    return bool(_started)


@atexit.register
def _stop():
    for process in _started:
        process.kill()
        process.wait()
'''


def session(kind, duty, code, work, index, output_len, config="ngram", bound=BOUND) -> dict:
    suite = work / f"{kind}-{index}"
    suite.mkdir()
    (suite / "test_move.py").write_text(TEST)
    (suite / "conftest.py").write_text(CONFTEST)
    out = suite / "decision.json"
    env = {
        **os.environ,
        "SPECDEC_MOVE_OUT": str(out),
        "SPECDEC_NEIGHBOUR_DUTY": str(duty if kind == "neighbour" else 0),
        "SPECDEC_MOVE_OUTPUT_LEN": str(output_len),
        "SPECDEC_MOVE_CONFIG": config,
        "SPECDEC_MOVE_BOUND": str(bound),
    }
    if code is not None:
        env["PYTHONPATH"] = str(code)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--specdec-cpu", str(suite / "test_move.py")],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
    )
    if not out.exists():
        raise SystemExit(f"{kind} session {index} wrote no decision:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    launches = Path(str(out) + ".launches").read_text()
    return {**json.loads(out.read_text()), "kind": kind, "seconds": time.monotonic() - started, "launches": launches}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2, help="sessions of each kind (default 2)")
    parser.add_argument("--duty", type=float, default=0.05, help="the neighbour's busy share of one core")
    parser.add_argument("--code", type=Path, help="a checkout of the plugin to run the sessions on")
    parser.add_argument("--output-len", type=int, default=128, help="output tokens a request (default 128)")
    parser.add_argument(
        "--config",
        choices=("ngram", "draft"),
        default="ngram",
        help="n-gram on code edits, or a 16-layer draft model on random tokens",
    )
    parser.add_argument(
        "--bound",
        type=float,
        default=BOUND,
        help="the check's min; 0: 3%% above the speedup "
        "against the reference's first runs (the zone's edge, where the move decides)",
    )
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for index in range(args.sessions):
            for kind in ("quiet", "neighbour"):
                rows.append(
                    session(kind, args.duty, args.code, Path(work), index, args.output_len, args.config, args.bound)
                )
                row = rows[-1]
                print(
                    f"| {row['kind']} | {row['bound']:.3f} | {row['speedup']:.3f} | {row['low']:.3f}-{row['high']:.3f} | {row['runs']} | "
                    f"{row['outcome']} | {'-' if row['moved'] is None else format(row['moved'], '+.1%')} | "
                    f"{' '.join(f'{v:.1f}' for v in row['reference'])} | "
                    f"{' '.join(f'{v:.1f}' for v in row['reference_again']) or '-'} | {row['seconds']:.0f} s | "
                    f"{row['launches']} | {row['why'][:160]} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
