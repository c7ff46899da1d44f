"""A live progress line for measured runs, which can take minutes each.

On a terminal one line is rewritten in place ("requests done of total,
elapsed") and cleared when the run ends, leaving only the run's one-line
summary.  In a CI log, where a carriage return does not rewrite anything and
every update would become a line, nothing is printed while the run goes: the
one-line summary per run is the progress.  Under ``-q`` the plugin passes no
sink at all.
"""

from __future__ import annotations

import contextlib

import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

# The variables pytest itself reads to decide it runs on CI.
CI_VARIABLES = ("CI", "BUILD_NUMBER")


def running_on_ci(environ: Mapping[str, str] = os.environ) -> bool:
    return any(environ.get(name) for name in CI_VARIABLES)


def progress_text(what: str, done: int, total: int, elapsed: float) -> str:
    width = len(str(total))
    return f"{what}: {done:>{width}}/{total} requests, {elapsed:.0f} s elapsed"


class LiveProgress:
    """Rewrites one terminal line as requests complete (at most every `interval` seconds)."""

    def __init__(
        self,
        rewrite: Callable[[str], None],
        clear: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.5,
    ):
        self._rewrite, self._clear, self._clock, self._interval = rewrite, clear, clock, interval
        self._what, self._started, self._shown_at = "", 0.0, None

    def start(self, what: str, total: int) -> "LiveProgress":
        self._what, self._started, self._shown_at = what, self._clock(), None
        self.update(0, total)
        return self

    def update(self, done: int, total: int) -> None:
        now = self._clock()
        # Throttled so 200 concurrent streams finishing together do not flood
        # the terminal; the last request always shows.
        if self._shown_at is not None and done < total and now - self._shown_at < self._interval:
            return
        self._shown_at = now
        self._rewrite("[specdec] " + progress_text(self._what, done, total, now - self._started))

    def stop(self) -> None:
        self._clear()


class QuietProgress:
    """For CI logs and scripts: the per-run summary line is all the progress shown."""

    def start(self, what: str, total: int) -> "QuietProgress":
        return self

    def update(self, done: int, total: int) -> None:
        pass

    def stop(self) -> None:
        pass


def progress_for(rewrite, interactive: bool):
    """A live line on an interactive terminal; nothing extra in CI logs, under -q or in scripts."""
    if rewrite is None or not interactive or running_on_ci():
        return QuietProgress()
    return LiveProgress(rewrite, lambda: rewrite(""))


@dataclass
class Terminal:
    """How the session talks to the person running it (all optional: a script passes nothing)."""

    write_line: Callable[[str], None] | None = None  # a message on its own line (server starts, runs)
    rewrite: Callable[[str], None] | None = None  # one line rewritten in place (live progress)
    interactive: bool = False  # a terminal where rewriting a line works


def terminal_on(reporter, capture) -> Terminal:
    """A `Terminal` writing through pytest's terminal reporter past output capturing (`capture`, pytest's
    capture manager, may be None); a plain one when there is no reporter (quiet runs)."""
    if reporter is None:
        return Terminal()

    def uncaptured():
        return capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()

    def write_line(message: str) -> None:
        with uncaptured():
            reporter.ensure_newline()
            reporter.write_line(f"[specdec] {message}")

    def rewrite(line: str) -> None:
        with uncaptured():
            reporter.ensure_newline()
            reporter.rewrite(line, erase=True)

    return Terminal(write_line, rewrite, interactive=reporter.isatty)
