"""Where the test suite's time goes: per file and per test, from the JUnit XML of a `scripts/test` run.

    SPECDEC_TEST_REPORTS=suite-times ./scripts/test
    .venv/bin/python benchmarks/suite_durations.py suite-times/*.xml [--top 15]

Each pytest session of scripts/test writes one XML file there (logic suites, real-server suite).  The
script prints, per file, the number of tests and the seconds they took (setup, call and teardown, as
JUnit counts them; the logic suites' seconds are summed over both workers, so they exceed the wall
time), each session's wall time as pytest reported it, and the slowest tests: the table kept in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def per_file(paths: list[Path]) -> tuple[dict[str, list[float]], dict[str, float], list[tuple[float, str]]]:
    files: dict[str, list[float]] = collections.defaultdict(list)
    sessions: dict[str, float] = {}
    tests: list[tuple[float, str]] = []
    for path in paths:
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            sessions[path.name] = sessions.get(path.name, 0.0) + float(suite.get("time", 0))
            for case in suite.iter("testcase"):
                seconds = float(case.get("time", 0))
                name = case.get("classname", "").replace(".", "/") + ".py"
                files[name].append(seconds)
                tests.append((seconds, f"{name}::{case.get('name')}"))
    return files, sessions, sorted(tests, reverse=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", nargs="+", type=Path, help="JUnit XML files written by scripts/test")
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest tests to list")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.xml if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    files, sessions, tests = per_file(args.xml)
    print("| file | tests | seconds |\n|---|---|---|")
    for name, times in sorted(files.items(), key=lambda item: -sum(item[1])):
        print(f"| `{name}` | {len(times)} | {sum(times):.0f} |")
    for name, seconds in sessions.items():
        print(f"\nsession {name}: {seconds:.0f} s ({seconds / 60:.1f} min) as pytest timed it")
    print(f"\nslowest {args.top} tests:")
    for seconds, name in tests[: args.top]:
        print(f"  {seconds:7.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
