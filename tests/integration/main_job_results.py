"""A pytest plugin the suite loads into the README's main job (``-p``; see conftest.py's `main_job`).

It keeps what each example measured, as the example's own `specdec` fixture holds it, in the folder
named by $SPECDEC_TEST_KEEP_RESULTS: one pickle per test, its results in order (a sweep has one per
level).  Integration tests then check the servers' own figures (per-step arrays, counters, timings)
on those very runs instead of measuring the same configurations on the same traffic a second time.
Never loaded by users' sessions: the main job's report and exit status are the same with or without it.
"""

import dataclasses
import os
import pickle
from pathlib import Path

import pytest

KEEP_ENV = "SPECDEC_TEST_KEEP_RESULTS"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    directory = os.environ.get(KEEP_ENV)
    specdec = getattr(item, "funcargs", {}).get("specdec")
    if call.when != "call" or not directory or specdec is None:
        return
    # The gate holds the session's baselines and files: not part of what was measured.
    results = [dataclasses.replace(result, gate=None) for result in specdec.results]
    target = Path(directory) / f"{item.name}.pickle"
    partial = target.with_suffix(".tmp")
    partial.write_bytes(pickle.dumps(results))
    partial.replace(target)
