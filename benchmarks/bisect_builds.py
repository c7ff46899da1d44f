"""`pytest-specdec bisect` over real llama.cpp builds, the later ones made bad by a planted change.

Builds are the Pythons of environments holding xllamacpp releases (scripts/build-env makes them), oldest
first. From --plant-from on, each is wrapped (tests/support/planted_build.py) so that its n-gram drafter looks up
5-token keys instead of the marker's 3, after which it drafts nothing on these prompts: a silent change
introduced in one build and kept in the ones after, as a bisect assumes. The suite gates acceptance on
code edits; the bisect must name the first wrapped build.

    .venv/bin/python benchmarks/bisect_builds.py --plant-from 2 \\
        --build .venv-xllamacpp-2026.4/bin/python --build envs/xllamacpp-2026.6/bin/python \\
        --build envs/xllamacpp-2026.8/bin/python --build .venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.planted_build import plant  # noqa: E402

PLANTED = {"speculative.ngram_simple.size_n": 5}
SUITE = """
import pytest

@pytest.mark.specdec(model="specdec:smollm2-135m", engine="llamacpp",
                     speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 3, "prompt_lookup_max": 3})
@pytest.mark.workload("code_edit", input_len=192, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_ngram(specdec):
    # Builds before xllamacpp 2026.5 count no steps: their acceptance length is unavailable.
    specdec.run().assert_no_regression(metrics=["acceptance_rate", "acceptance_length"],
                                       allow_unavailable=["acceptance_length"])
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True, help="a build's Python, oldest first")
    parser.add_argument("--plant-from", type=int, required=True, help="index of the first build made bad")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="specdec-bisect-builds-"))
    builds = []
    for index, build in enumerate(os.path.abspath(b) for b in args.build):  # the bisect runs elsewhere
        if index >= args.plant_from:  # named by the wrapped environment, so the table says which it was
            name = f"planted-{Path(build).parent.parent.name.lstrip('.')}"
            build = str(plant(build, work / name, PLANTED))
        builds.append(build)
    (work / "suite").mkdir()
    (work / "suite" / "test_bisect_suite.py").write_text(SUITE, encoding="utf-8")
    command = [sys.executable, "-m", "pytest_specdec", "bisect"]
    command += [part for build in builds for part in ("--build", build)]
    command += ["--report-dir", str(work / "bisect"), "--", "-q", "-p", "no:cacheprovider", "--specdec-cpu"]
    command += [f"--specdec-repeats={args.repeats}", str(work / "suite")]
    print(f"planted from build {args.plant_from} ({builds[args.plant_from]}): {PLANTED}", flush=True)
    began = time.monotonic()
    code = subprocess.run(command, cwd=work / "suite").returncode
    print(f"bisect exit {code} in {time.monotonic() - began:.0f} s; report {work / 'bisect'}")
    print((work / "bisect" / "bisect.md").read_text(encoding="utf-8"))
    return code


if __name__ == "__main__":
    sys.exit(main())
