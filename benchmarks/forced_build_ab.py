"""A builds A/B at a forced acceptance beside the same A/B on content-bound traffic: the draws each needs.

Real pytest sessions of one llama.cpp speedup gate against a baseline build (--specdec-baseline-from
build:PATH, ``--specdec-repeats auto``, 10% tolerance), one server at a time, the suites of
tests/support/builds_sessions.py:

  content-bound      n-gram k=4 on random tokens (what SD does depends on the prompts drawn);
  forced acceptance  a draft of the bundled model's first 2 layers, k=4, forced to 3.0 tokens a step.

For each traffic, in turn: the planted SD-slow build (tests/support/planted_build.py's `SD_SLOWER`: the SD
server's sampler sorts the whole vocabulary, the reference untouched) against the real build, and the real
build against itself (A/A).  Printed per session: the outcome, the speedup ratio and its interval, the draws a
side the sequential rule took, and the seconds.  The rounds alternate the traffics, so a machine that drifts
over the run drifts for both.

    .venv/bin/python benchmarks/forced_build_ab.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.builds_sessions import CHECK, SUITES, session  # noqa: E402
from tests.support.planted_build import SD_SLOWER, plant  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the four sessions (default 1)")
    args = parser.parse_args(argv)
    real = sys.executable
    work = Path(tempfile.mkdtemp(prefix="specdec-forced-ab-"))
    planted = plant(real, work / "planted-env", sd_changes=SD_SLOWER)
    rows = []
    for round_ in range(args.rounds):
        for traffic, suite in SUITES.items():
            for comparison, extra in (
                ("SD-slow build against the real one", [f"--specdec-build={planted}"]),
                ("real build against itself (A/A)", []),
            ):
                directory = work / f"{round_}-{traffic.replace(' ', '-')}-{'slow' if extra else 'aa'}"
                _, row, seconds = session(directory, *extra, f"--specdec-baseline-from=build:{real}", suite=suite)
                decision = row["decisions"].get(CHECK)
                if decision is None:
                    rows.append((round_ + 1, traffic, comparison, row["regression"], "-", "-", row["runs"], seconds))
                    continue
                low, high = decision["interval"]
                rows.append(
                    (
                        round_ + 1,
                        traffic,
                        comparison,
                        decision["outcome"],
                        f"{decision['estimate']:.3f}",
                        f"{low:.3f}-{high:.3f}",
                        decision["draws"],
                        seconds,
                    )
                )
    print("\n| round | traffic | comparison | outcome | ratio | interval | draws a side | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for round_, traffic, comparison, outcome, ratio, interval, draws, seconds in rows:
        print(f"| {round_} | {traffic} | {comparison} | {outcome} | {ratio} | {interval} | {draws} | {seconds:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
