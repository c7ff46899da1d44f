"""The drift learned from a results history, on real CPU servers: one llama.cpp test recorded session after
session, then gated with the drift its own sessions show, and a planted slower engine that still fails.

Real pytest sessions of one test (llama.cpp n-gram k=4 on code edits, its speedup, tok/s and TPOT gated against
a stored baseline, ``--specdec-repeats auto``), each recorded into one SQLite history (``--specdec-history``):

1. the baseline recorded (``--specdec-update-baselines``);
2. `--sessions` more sessions gated against it, each printing the drift it used: the built-in figure until the
   history holds three sessions of the test on this machine, the learned one after;
3. the same llama.cpp made slower (one thread, a token a step of prefill, a sampler through the whole
   vocabulary: tests/support/planted_build.py's site, as tests/integration/test_gate_cpu.py plants it), gated
   with the learned drift: it must fail.

Printed per session: its outcome, the speedup, the drift of ``speedup_output_throughput`` it used and the
smallest measured drop that drift lets the gate fail, and the seconds.

With ``--measured`` no history is kept: every gated session runs with ``--specdec-measure-drift``, so its gate
reads the drift from the test's two servers started anew in that session (measure.start_drift), the planted
slower engine's too.

    .venv/bin/python benchmarks/learned_drift_cpu.py [--sessions 6] [--measured]
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
sys.path.insert(0, str(ROOT))

from pytest_specdec.history.changepoints import OTAVA_ENV_VAR, otava_python  # noqa: E402
from tests.support.planted_build import PLANTED_CHANGES_ENV, SD_SLOWER, planted_site  # noqa: E402

SUITE = """
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 3}


@pytest.mark.specdec(model="specdec:smollm2-135m", engine="llamacpp", speculative_config=NGRAM)
@pytest.mark.workload("code_edit", input_len=128, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
@pytest.mark.specdec_tolerance(output_throughput=0.3, median_tpot_ms=0.3)
def test_ngram_gate(specdec):
    result = specdec.run()
    result.assert_no_regression(metrics=["speedup_output_throughput", "output_throughput", "median_tpot_ms"])
"""
# What tests/integration/test_gate_cpu.py plants: every forward step slower, the same greedy tokens.
ENGINE_SLOWER = {
    "cpuparams.n_threads": 1,
    "cpuparams_batch.n_threads": 1,
    "n_ubatch": 1,
    **SD_SLOWER,
    "sampling.min_keep": 49152,
}


def session(work: Path, number: int, *args: str, env: dict | None = None, history: bool = True) -> dict:
    report = work / f"report-{number}"
    command = [sys.executable, "-m", "pytest", "--specdec-cpu", "-p", "no:cacheprovider", "-q"]
    command += [f"--specdec-history={work / 'history.db'}"] if history else []
    command += [f"--specdec-report={report}", *args]
    began = time.monotonic()
    run = subprocess.run(command, cwd=work, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    rows = json.loads((report / "results.json").read_text())["results"] if (report / "results.json").is_file() else []
    row = rows[0] if rows else {}
    drift = (row.get("drift") or {}).get("speedup_output_throughput") or {}
    return {
        "session": number,
        "outcome": row.get("outcome") or f"exit {run.returncode}",
        "regression": row.get("regression"),
        "speedup": row.get("speedup_output_throughput"),
        "drift": drift.get("describe", "-"),
        "floor": drift.get("smallest_failable_drop"),
        "seconds": time.monotonic() - began,
        "tail": (run.stdout + run.stderr)[-3000:],
    }


def line(found: dict) -> str:
    speedup = "-" if found["speedup"] is None else f"{found['speedup']:.3f}x"
    floor = "-" if found["floor"] is None else f"{found['floor']:.1%}"
    return (
        f"| {found['session']} | {found['outcome']} / {found['regression']} | {speedup} | {found['drift']} | "
        f"{floor} | {found['seconds']:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6, help="gated sessions after the recording (default 6)")
    parser.add_argument(
        "--measured", action="store_true", help="no history: each gated session measures its drift from starts anew"
    )
    args = parser.parse_args(argv)
    gated = ("--specdec-measure-drift",) if args.measured else ()
    history = not args.measured
    work = Path(tempfile.mkdtemp(prefix="specdec-learned-drift-"))
    (work / "test_gated.py").write_text(SUITE)
    os.environ[OTAVA_ENV_VAR] = otava_python(None, (ROOT,))  # the sessions run outside the repository
    print("| session | outcome / gate | speedup | drift of speedup_output_throughput | no drop under | s |")
    print("|---|---|---|---|---|---|")
    found = session(work, 0, "--specdec-update-baselines", history=history)
    print(line(found), flush=True)
    for number in range(1, args.sessions + 1):
        found = session(work, number, *gated, history=history)
        print(line(found), flush=True)
    slower = session(
        work,
        args.sessions + 1,
        *gated,
        env={"PYTHONPATH": str(planted_site(work)), PLANTED_CHANGES_ENV: json.dumps(ENGINE_SLOWER)},
        history=history,
    )
    print(line(slower), flush=True)
    if slower["regression"] != "failed":
        print(f"the slower engine was not failed:\n{slower['tail']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
