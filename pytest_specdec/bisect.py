"""``pytest-specdec bisect``: the first of a row of engine builds whose specdec tests differ from the first's.

Each step is a whole pytest session (minutes to hours on real servers), so
the builds are binary-searched: the last build first (if it is like the first
there is nothing to find), then the builds between, at most
ceil(log2(n - 1)) more sessions for n builds. Every step measures its
candidate against the FIRST build in one session (``--specdec-baseline-from
build:FIRST``), never against its neighbour: each verdict answers the same
question, and no baseline file from another day or machine enters. The search
assumes one change point; a change that a later build undoes can be missed.
pytest runs in a subprocess: each step needs a fresh session (its own servers
and report), and the command it ran is one a person can rerun by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .atomic import write_atomic
from .engines import ENGINE_MODULES, engine_named
from .report.row.cells import aligned
from .report.files import ReportError, load_report
from .formatting import NOTHING

PROG = "pytest-specdec bisect"
SAME = "same as the first build"
DIFFERS = "differs"
ASSUMPTION = "assumes one change point: every build from the first that differs on differs (undone changes are missed)"
# pytest.ExitCode spelled out: only the pytest wiring may import pytest.
EXIT_MEANINGS = {2: "interrupted or collection errors", 3: "internal error", 4: "usage error", 5: "no tests collected"}
# (metric, column, one build's value): what decides an upgrade, as the builds table shows it.
FIGURES = (
    ("speedup_output_throughput", "speedup", "{:.2f}x"),
    ("acceptance_rate", "acceptance", "{:.0%}"),
    ("median_tpot_ms", "TPOT", "{:.1f} ms"),
)
HEADER = ["step", "build", "version", "verdict", "test", *(title for _, title, _ in FIGURES)]
FIGURES_NOTE = "figures: the step's build vs the first build (change, negative is worse)"
# Each step sets these; the same in PYTEST_ARGS would measure something other than the A/B asked for.
OWN_OPTIONS = ("--specdec-build", "--specdec-baseline-from", "--specdec-report")
# Folders that name no build: a venv's bin/, CMake's build/bin/Release.
GENERIC_FOLDERS = {"bin", "build", "Scripts", "Release", "Debug"}

Runner = Callable[[list[str]], int]


class UsageError(ValueError):
    """A command line the bisect refuses before running anything."""


@dataclass
class Step:
    number: int
    build: str
    argv: list[str]
    report_dir: Path
    exit_code: int | None = None
    verdict: str | None = None
    version: str | None = None
    baseline_version: str | None = None
    rows: list[dict] = field(default_factory=list)
    unavailable: str | None = None


@dataclass
class Outcome:
    builds: list[str]
    steps: list[Step] = field(default_factory=list)
    # The search's bounds: the change lies after builds[last_same] and at or before builds[first_differs].
    last_same: int = 0
    first_differs: int | None = None
    error: str | None = None

    def version(self, index: int) -> str:
        if index == 0:
            found = [step.baseline_version for step in self.steps]
        else:
            found = [step.version for step in self.steps if step.build == self.builds[index]]
        return next((v for v in found if v), "-")

    def named(self, index: int) -> str:
        return f"{self.builds[index]} ({self.version(index)})"

    def conclusion_lines(self) -> list[str]:
        if self.error:
            lines = [f"{self.error}; no verdict for that build"]
            if self.first_differs is not None:
                bounds = f"{self.named(self.last_same)} is like the first, {self.named(self.first_differs)} differs"
                lines.append(f"known so far: {bounds}")
        elif self.first_differs is None:
            last = self.named(len(self.builds) - 1)
            lines = [f"no build differs from the first: the last, {last}, measured the same as {self.named(0)}"]
        else:
            lines = [
                f"first build that differs from {self.builds[0]}: {self.named(self.first_differs)}",
                f"last build like the first: {self.named(self.first_differs - 1)}",
            ]
        return [*lines, ASSUMPTION]

    def as_dict(self) -> dict:
        found = self.first_differs if self.first_differs is not None and not self.error else None
        conclusion = {"first_differs": None, "last_like_first": None, "error": self.error}
        if found is not None:
            conclusion.update(first_differs=self.builds[found], last_like_first=self.builds[found - 1])
        steps = [{**asdict(step), "report_dir": str(step.report_dir)} for step in self.steps]
        return {"builds": self.builds, "steps": steps, "conclusion": {**conclusion, "lines": self.conclusion_lines()}}


def short_name(build: str) -> str:
    """The build's name in its step's folder: a venv's Python or an engine's own server binary (its
    `build_binaries`, llama-server's) is named by its folder."""
    path = Path(build)
    name = path.name
    binaries = tuple(binary for engine in ENGINE_MODULES for binary in engine_named(engine).build_binaries)
    if name.startswith(("python", *binaries)):
        folders = [p for p in reversed(path.parent.parts) if p not in GENERIC_FOLDERS and p.strip("/\\")]
        name = folders[0] if folders else name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "build"


def step_argv(pytest_args: Sequence[str], build: str, first: str, report_dir: Path, history: str | None) -> list[str]:
    argv = [sys.executable, "-m", "pytest", *pytest_args, "--specdec-build", build]
    argv += ["--specdec-baseline-from", "build:" + first, "--specdec-report", str(report_dir)]
    return argv + (["--specdec-history", history] if history else [])


def run_pytest(argv: list[str]) -> int:
    # Output inherited, not captured: the session's progress line and tables show as it runs.
    return subprocess.run(argv, check=False).returncode


def read_figures(step: Step) -> None:
    """The step's rows from its results.json; what cannot be read is said, never filled in."""
    try:
        document = load_report(step.report_dir)
    except (ReportError, OSError) as exc:
        step.unavailable = str(exc)
        return
    if not document["results"]:
        step.unavailable = "results.json has no rows"
    for row in document["results"]:
        builds = row.get("builds")
        entry = {"test": row["test"], "outcome": row["outcome"], "figures": None, "unavailable": None}
        if builds:
            entry["figures"] = {metric: builds["figures"].get(metric) for metric, _, _ in FIGURES}
            step.version = step.version or builds["this"].get("version")
            step.baseline_version = step.baseline_version or builds["baseline"].get("version")
        else:
            entry["unavailable"] = "the row measured no second build (ended before measuring?)"
        step.rows.append(entry)


def verdict_of(code: int) -> tuple[str, str | None]:
    """(the step's verdict, why it has none): pytest's own exit codes, nothing guessed from the rest."""
    if code in (0, 1):
        return (SAME if code == 0 else DIFFERS), None
    meaning = EXIT_MEANINGS.get(code) or (f"killed by signal {-code}" if code < 0 else "not a pytest exit code")
    return f"error: exit code {code} ({meaning})", f"exited with code {code}: {meaning}"


def bisect(builds, pytest_args, report_dir: Path, *, history=None, runner: Runner = run_pytest) -> Outcome:
    outcome = Outcome(list(builds))
    most = 1 + math.ceil(math.log2(len(builds) - 1))

    def differs(index: int) -> bool | None:
        build, number = builds[index], len(outcome.steps) + 1
        directory = Path(report_dir) / f"step-{number:02d}-{short_name(build)}"
        step = Step(number, build, step_argv(pytest_args, build, builds[0], directory, history), directory)
        outcome.steps.append(step)
        # An earlier bisect's results.json here would pass for this step's figures if this session wrote none.
        (directory / "results.json").unlink(missing_ok=True)
        print(f"bisect step {number}/{most}: {build} against {builds[0]}", flush=True)
        step.exit_code = runner(step.argv)
        read_figures(step)
        step.verdict, error = verdict_of(step.exit_code)
        if error:
            outcome.error = f"bisect stopped: step {number} ({build}) {error}"
            return None
        return step.verdict == DIFFERS

    low, high = 1, len(builds) - 1
    if not differs(high):
        return outcome
    outcome.first_differs = high
    while low < high and not outcome.error:
        middle = (low + high) // 2
        if differs(middle):
            high = outcome.first_differs = middle
        elif not outcome.error:
            low, outcome.last_same = middle + 1, middle
    return outcome


def table(outcome: Outcome) -> list[list[str]]:
    def cell(figure: dict | None, form: str) -> str:
        if not figure:
            return NOTHING
        this, base, change = (figure.get(key) for key in ("this", "baseline", "change"))
        text = " vs ".join(NOTHING if value is None else form.format(value) for value in (this, base))
        return text + ("" if change is None else f" ({change:+.1%})")

    cells = []
    for step in outcome.steps:
        head = [str(step.number), step.build, step.version or "-", step.verdict or "-"]
        if not step.rows:
            cells.append([*head, f"unavailable ({step.unavailable})", *[""] * len(FIGURES)])
        for n, row in enumerate(step.rows):
            lead = head if n == 0 else [""] * len(head)
            if row["figures"] is None:
                cells.append([*lead, row["test"], f"unavailable ({row['unavailable']})", *[""] * (len(FIGURES) - 1)])
            else:
                cells.append([*lead, row["test"], *(cell(row["figures"].get(m), f) for m, _, f in FIGURES)])
    return cells


def text_report(outcome: Outcome) -> str:
    lines = aligned([HEADER, *table(outcome)], rule=False)
    return "\n".join([*lines, FIGURES_NOTE, "", *outcome.conclusion_lines()]) + "\n"


def markdown_report(outcome: Outcome) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"# {PROG}", "", f"Builds, oldest first: {', '.join(f'`{b}`' for b in outcome.builds)}.", ""]
    out += [line(HEADER), line(["---"] * len(HEADER)), *(line(row) for row in table(outcome))]
    out += ["", f"{FIGURES_NOTE[0].upper()}{FIGURES_NOTE[1:]}.", ""]
    return "\n".join(out + [f"- {text}" for text in outcome.conclusion_lines()]) + "\n"


def check_usage(builds: Sequence[str], pytest_args: Sequence[str]) -> None:
    if len(builds) < 3:
        raise UsageError(f"at least three --build paths are needed (the first known-good), got {len(builds)}")
    for build in builds:
        if not os.path.exists(build):
            raise UsageError(f"--build {build}: no such file")
        if not os.path.isfile(build):
            raise UsageError(f"--build {build}: not a file (give the environment's bin/python or llama-server)")
        if not os.access(build, os.X_OK):
            raise UsageError(f"--build {build}: not executable")
    twice = sorted({b for b in builds if list(builds).count(b) > 1})
    if twice:
        raise UsageError(f"--build {twice[0]} is listed twice")
    if not pytest_args:
        raise UsageError("no PYTEST_ARGS: give pytest's arguments after --, e.g. -- perf/ --specdec-gpu")
    own = [arg for arg in pytest_args if arg.split("=")[0] in OWN_OPTIONS]
    if own:
        raise UsageError(f"PYTEST_ARGS: {own[0]} is set by each step, leave it out")


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} --build PATH --build PATH --build PATH [...] [--report-dir DIR] [--history URL] "
        "-- PYTEST_ARGS...",
        description="Find the first of a row of engine builds (oldest first, at least three, the first known good) "
        "whose specdec tests differ from the first build's: each step runs pytest with PYTEST_ARGS on one build "
        "against the first (--specdec-baseline-from build:FIRST); the last build first, then a binary search.",
        epilog=f"Note: {ASSUMPTION}. Exit status: 0 a first differing build found or none differs, "
        "2 usage error, 3 a step ended in an error (no verdict) or the bisect's files could not be written.",
    )
    out.add_argument("--build", action="append", required=True, metavar="PATH", help="a venv's Python or llama-server")
    out.add_argument("--report-dir", type=Path, default="specdec-bisect", metavar="DIR", help="default: %(default)s")
    out.add_argument("--history", metavar="URL", help="passed to each step as --specdec-history")
    return out


def bisect_main(argv: Sequence[str], runner: Runner = run_pytest) -> int:
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    options, pytest_args = parser().parse_args(argv[:cut]), argv[cut + 1 :]
    try:
        check_usage(options.build, pytest_args)
        options.report_dir.mkdir(parents=True, exist_ok=True)
    except (UsageError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    outcome = bisect(options.build, pytest_args, options.report_dir, history=options.history, runner=runner)
    print(text_report(outcome), end="")
    try:
        for name, text in (
            ("bisect.md", markdown_report(outcome)),
            ("bisect.json", json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False) + "\n"),
        ):
            print(f"written: {write_atomic(options.report_dir / name, text)}")
    except OSError as exc:
        print(f"{PROG}: error: cannot write to {options.report_dir}: {exc}", file=sys.stderr)
        return 3
    if outcome.error:
        print(f"{PROG}: error: {outcome.error}", file=sys.stderr)
        return 3
    return 0
