"""Record real histories on the CPU build: one test, many sessions, with and without a change.

Each session is a whole pytest run (`pytest --specdec-cpu`) of one n-gram test
on random tokens, with fresh reference and SD servers, recorded with
``--specdec-history`` and gated by a baseline file recorded in its first
session (the fixed-baseline gate at its default tolerance, 15% on the
speedup).  Two histories come out:

- ``unchanged.db``: every session at k=4;
- ``changed.db``: the same first ``--step`` sessions, then the draft length
  cut to k=2 (a real configuration change) for the rest.

The changed history starts as a copy of the unchanged one after ``--step``
sessions (the sessions before a change are the same sessions), so 20 + 20
sessions cost 30 runs.  `history_analysis.py` reads both.

    .venv/bin/python benchmarks/history_series.py OUT_DIR [--sessions 20] [--step 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TEST_FILE = '''
import os
import pytest

K = int(os.environ["SERIES_K"])


@pytest.mark.specdec(model="specdec:smollm2-135m", server_args=["--enforce-eager"],
                     speculative_config={"method": "ngram", "num_speculative_tokens": K,
                                         "prompt_lookup_max": 4, "prompt_lookup_min": 2})
@pytest.mark.workload("random_s", input_len=192, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_ngram_series(specdec):
    result = specdec.run()
    result.assert_no_regression(metrics=["speedup_output_throughput", "acceptance_rate"])
'''


def run_session(project: Path, history: Path, baselines: Path, commit: str, k: int, update: bool) -> dict:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "test_series.py",
        "--specdec-cpu",
        "-p",
        "no:cacheprovider",
        "-q",
        "--specdec-history",
        str(history),
        "--specdec-history-commit",
        commit,
        "--specdec-history-branch",
        "main",
        "--specdec-baseline-dir",
        str(baselines),
    ]
    if update:
        command.append("--specdec-update-baselines")
    started = time.monotonic()
    done = subprocess.run(command, cwd=project, env={**os.environ, "SERIES_K": str(k)}, capture_output=True, text=True)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    return {
        "commit": commit,
        "k": k,
        "exit": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "last_line": tail[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--step", type=int, default=10, help="sessions before the change")
    parser.add_argument("--changed-k", type=int, default=2)
    options = parser.parse_args()
    out = options.out.resolve()
    project = out / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "test_series.py").write_text(TEST_FILE)
    (project / "pytest.ini").write_text("[pytest]\n")
    log = out / "sessions.jsonl"
    series = {
        "unchanged": (out / "unchanged.db", out / "baselines-unchanged"),
        "changed": (out / "changed.db", out / "baselines-changed"),
    }
    for number in range(1, options.sessions + 1):
        if number == options.step + 1:  # the change's history continues from the same first sessions
            shutil.copy(series["unchanged"][0], series["changed"][0])
            shutil.copytree(series["unchanged"][1], series["changed"][1], dirs_exist_ok=True)
        names = ["unchanged"] if number <= options.step else ["unchanged", "changed"]
        for name in names:
            history, baselines = series[name]
            k = options.changed_k if name == "changed" else 4
            entry = run_session(project, history, baselines, f"s{number:02d}-k{k}", k, update=number == 1)
            entry.update(series=name, session=number)
            with log.open("a") as handle:
                handle.write(json.dumps(entry) + "\n")
            print(json.dumps(entry), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
