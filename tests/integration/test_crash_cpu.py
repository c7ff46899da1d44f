"""An SD server killed mid-run on the real CPU build: the test fails fast, saying so, and leaves nothing behind.

The inner run measures the reference, starts the n-gram server, and a timer
sends it SIGKILL while the SD run streams.  The failure must name the server,
its exit status and its log within 30 s of the kill; afterwards no server
process may remain, and the report and baseline directories must hold only
whole files.
"""

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_specdec.report.files import load_report
from pytest_specdec.serving.server import SERVER_TAG_ENV

INNER = '''
import os, signal, threading, time
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.mark.specdec(model="specdec:smollm2-135m", speculative_config=NGRAM, server_args=["--enforce-eager"])
@pytest.mark.workload("code_edit", input_len=128, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_killed_mid_run(specdec):
    server = specdec.server()  # the reference runs are measured first, then the SD server starts

    def kill():
        time.sleep(6)  # in the warm-up or the measured run: either way the run must fail naming the dead server
        print(f"KILLED_AT {time.time():.3f} pid {server.pid}", flush=True)
        os.kill(server.pid, signal.SIGKILL)

    threading.Thread(target=kill, daemon=True).start()
    try:
        result = specdec.run()  # raises: the SD server dies mid-run
    finally:
        print(f"FAILED_AT {time.time():.3f}", flush=True)
    result.assert_no_regression()  # never reached; a gate must not be queued from a dead run
'''


RUN_ENV = "SPECDEC_CRASH_TEST_RUN"


def _server_processes(*, run: str | None = None, parent: int | None = None) -> list[int]:
    """Live server processes of this test only: those whose environment carries
    the inner run's mark, or whose parent is `parent`.  Another session's
    servers on a shared machine are not this test's business."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if stat[0] == "Z" or not any(item.startswith(f"{SERVER_TAG_ENV}=".encode()) for item in environ):
                continue
            if (run and f"{RUN_ENV}={run}".encode() in environ) or (parent and int(stat[1]) == parent):
                found.append(int(entry.name))
    return found


@pytest.mark.own_servers
def test_a_killed_sd_server_fails_the_test_fast_and_leaves_nothing_behind(specdec_pool, tmp_path):
    specdec_pool.stop_running()  # one server at a time on this machine
    assert not _server_processes(parent=os.getpid())
    (tmp_path / "test_killed.py").write_text(INNER)
    run = uuid.uuid4().hex  # inherited by the inner session's servers: how this test knows its own
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")}
    env[RUN_ENV] = run
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--specdec-cpu",
            # One draw of the reference: its runs only come first, as in any session, and judge nothing here.
            "--specdec-repeats",
            "1",
            "-s",
            "-p",
            "no:cacheprovider",
            "--specdec-update-baselines",
            "--specdec-report",
            "report",
            f"--basetemp={tmp_path / 'inner'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = completed.stdout
    print(out[-5000:])
    assert completed.returncode == 1, completed.stderr[-3000:]
    killed_at = float(re.search(r"KILLED_AT ([\d.]+)", out).group(1))
    failed_at = float(re.search(r"FAILED_AT ([\d.]+)", out).group(1))
    print(f"CRASH_FIGURES failed {failed_at - killed_at:.1f} s after the kill")
    assert failed_at - killed_at < 30, f"the failure took {failed_at - killed_at:.1f} s"
    assert re.search(
        r"the vLLM server for specdec:smollm2-135m \[ngram k=4.*died during the run "
        r"\(killed by SIGKILL\)",
        out,
    )
    log = re.search(r"server log: (\S+server-02-\S+\.log)", out)
    assert log and Path(log.group(1)).is_file()
    assert not _server_processes(run=run), "a server process outlived the session"
    # Whole files only: the report is valid JSON of the schema, and no temporary file is left anywhere.
    document = load_report(tmp_path / "report")
    (row,) = document["results"]
    assert row["outcome"] == "failed" and row["speedup_output_throughput"] is None
    leftovers = [p for p in tmp_path.rglob("*.tmp") if "inner" not in p.parts]
    assert not leftovers, leftovers
    assert not list((tmp_path / "baselines").glob("*.json")) if (tmp_path / "baselines").exists() else True
    assert json.loads((tmp_path / "report" / "tests.json").read_text())["tests"] == [
        "test_killed.py::test_killed_mid_run"
    ]
