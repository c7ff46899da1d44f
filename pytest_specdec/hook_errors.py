"""Exceptions inside pytest hooks, turned into a test's failure or a line of the summary.

pytest ends the whole session with INTERNALERROR, and no summary, when a hook
raises: one broken report row (the plugin's own bug, a full disk, a missing
package) would then hide every other test's result.  Hooks that work for one
test turn the exception into that test's failure (:func:`test_failure`);
session-level hooks run under :meth:`HookErrors.guard` and the terminal
summary names what went wrong.
"""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path
from typing import Any, Iterator


def describe(exc: BaseException) -> str:
    """The exception in one line, with the last frame of this package that it passed through."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "pytest_specdec" in f.filename]
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def test_failure(what: str, exc: BaseException, earlier: Any = None) -> str:
    """A test's failure text for an exception raised while the plugin reported on that test."""
    text = f"pytest-specdec failed while {what}: {describe(exc)}"
    if earlier:
        text += f"\n\nthe test's own outcome before that:\n{earlier}"
    return text


def failure_text(report: Any) -> str | None:
    """What a failed test report says went wrong: the exception's message (pytest's crash line, which
    holds the whole message of an AssertionError), else the report's text; None when it did not fail."""
    if getattr(report, "outcome", None) != "failed":
        return None
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = getattr(crash, "message", None)
    return message if message else str(getattr(report, "longrepr", "") or "") or None


class HookErrors:
    """Errors caught in session-level hooks, in the order they happened."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self.messages.append(f"pytest-specdec failed while {what}: {describe(exc)}")

    def __bool__(self) -> bool:
        return bool(self.messages)

    def sections(self) -> list[tuple[str, list[str]]]:
        """The terminal summary's section for the errors caught (none when there were none)."""
        return [("specdec errors", [f"ERROR: {message}" for message in self.messages])] if self.messages else []
