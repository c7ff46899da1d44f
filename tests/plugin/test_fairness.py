"""A fair comparison or a named flag: cold servers, drifting references and engine confounds.

Each case runs an inner suite in endpoint mode against fault servers (tests/support/fault_server.py):
a reference whose first requests are slow, one that never settles, one that slows down
mid-session, and two sides that reveal different engine facts.  The fault servers' figures
are made up; what is checked is that the plugin never reports a speedup a cold or drifting
side inflated without saying so.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fault_suite import MODEL, FaultServers

SUITE = f"""
import json, os
import pytest

URLS = json.loads(open(os.environ["FAULT_URLS"]).read())


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}},
                     endpoints=URLS)
@pytest.mark.workload("random_s", input_len=24, output_len=8)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_pair(specdec):
    result = specdec.run()
    flags = result.fairness_flags()
    print("FIGURES speedup=%.3f ttft=%.3f steady=%s rounds=%d flags=%s" % (
        result.speedup(), result.speedup("median_ttft_ms"), result.reference_runs[0].warm_up.steady,
        len(result.reference_runs[0].warm_up.rounds_ms_per_token), ",".join(sorted(f.kind for f in flags))))
    for flag in flags:
        print("FLAG", flag.describe())
    if os.environ.get("SLOW_DOWN"):  # the machine slows after the test's runs: only the closing check can see it
        import httpx
        httpx.post(URLS["reference"] + "/fault/slow", json={{}}).raise_for_status()
    if os.environ.get("REQUIRE") == "no_confounds":
        result.assert_no_confounds()
    if os.environ.get("REQUIRE") == "fair":
        result.assert_fair_comparison()
    if os.environ.get("REQUIRE") == "speedup":
        result.assert_speedup(min=0.1)
    if os.environ.get("REQUIRE") == "speedup_accepting":
        result.accept_flags("not_steady", "above_ceiling").assert_speedup(min=0.1)
    if os.environ.get("WAIT_AFTER"):  # the outer test interrupts the session here, after the measuring
        print("MEASURED", flush=True)
        import time
        time.sleep(60)
"""


@pytest.fixture
def servers():
    started = FaultServers()
    yield started
    started.stop()


def _inner(directory: Path, urls: dict, *extra: str, output_len: int = 8, **env_vars: str) -> tuple[list, dict]:
    """The inner session's command and environment."""
    (directory / "test_pair.py").write_text(SUITE.replace("output_len=8", f"output_len={output_len}"))
    (directory / "urls.json").write_text(json.dumps(urls))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env.update(FAULT_URLS=str(directory / "urls.json"), **env_vars)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-s",
        "-rA",
        "--specdec-request-timeout",
        "5",
        "--specdec-report",
        str(directory / "report"),
        f"--basetemp={directory / 'tmp'}",
        *extra,
    ]
    return command, env


def _run(
    directory: Path, urls: dict, *extra: str, require: str = "", slow_down: bool = False, output_len: int = 8
) -> tuple[subprocess.CompletedProcess, dict]:
    command, env = _inner(
        directory, urls, *extra, output_len=output_len, REQUIRE=require, SLOW_DOWN="1" if slow_down else ""
    )
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    report = directory / "report" / "results.json"
    rows = json.loads(report.read_text())["results"] if report.is_file() else []
    return run, (rows[0] if rows else {})


def _figures(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("FIGURES "))
    return dict(part.split("=", 1) for part in line[len("FIGURES ") :].split(" "))


def test_a_cold_reference_is_warmed_until_steady_and_inflates_nothing(tmp_path, servers):
    # 10 ms between chunks once warm: long enough that scheduling jitter stays well under 5%.
    run, row = _run(
        tmp_path,
        {"reference": servers.start("cold-start", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    figures = _figures(run.stdout)
    # Settling from 10x slower takes rounds until two agree within 5%.
    assert figures["steady"] == "True" and int(figures["rounds"]) >= 4, figures
    # Both servers decode alike once warm: a speedup far from 1 would be the cold start's.
    # (Warmed for a fixed two requests, as before, the reference's measured requests 3-6
    # were still 1.1-2.4x slow: a "speedup" of about 1.6x.)
    assert 0.6 < float(figures["speedup"]) < 1.6, figures
    assert row["warm_up"]["reference"]["steady"] is True
    assert len(row["warm_up"]["reference"]["rounds_ms_per_token"]) >= 4


def test_a_reference_that_never_settles_is_flagged_and_fails_a_fair_comparison(tmp_path, servers):
    run, row = _run(
        tmp_path,
        {"reference": servers.start("cold-forever"), "speculative": servers.start("ok")},
        require="fair",
        output_len=24,
    )
    assert run.returncode == 1, run.stdout[-3000:]
    assert "not_steady" in _figures(run.stdout)["flags"]
    assert "not a fair comparison" in run.stdout and "warm-up never settled" in run.stdout
    assert any(flag["kind"] == "not_steady" for flag in row["fairness_flags"])


def test_engine_facts_that_differ_are_confounds_in_the_table_summary_and_results(tmp_path, servers):
    reference = servers.start("ok", facts={"version": "0.32.0", "enable_prefix_caching": "True", "block_size": "16"})
    speculative = servers.start("ok", facts={"version": "0.32.0", "enable_prefix_caching": "False", "block_size": "16"})
    run, row = _run(tmp_path, {"reference": reference, "speculative": speculative}, require="no_confounds")
    assert run.returncode == 1, run.stdout[-3000:]
    assert "ran different engine paths" in run.stdout
    assert "enable_prefix_caching: reference True, SD False" in run.stdout
    assert [c["fact"] for c in row["confounds"]] == ["enable_prefix_caching"]
    assert row["engine_facts"]["reference"]["version"] == "0.32.0"  # read from /version
    assert row["engine_facts"]["reference"]["block_size"] == "16"  # read from vllm:cache_config_info
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "enable_prefix_caching" in summary
    assert "enable_prefix_caching" in run.stdout.split("specdec")[-1] or "confound" in run.stdout


def test_a_reference_that_drifts_mid_session_is_flagged_by_the_closing_drift_check(tmp_path, servers):
    run, row = _run(
        tmp_path,
        {"reference": servers.start("drift", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)},
        "--specdec-drift-check",
        "on",
        slow_down=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "specdec drift check" in run.stdout
    assert "DRIFT: reference" in run.stdout and "MOVED beyond" in run.stdout
    assert any(flag["kind"] == "drift" for flag in row["fairness_flags"]), row["fairness_flags"]


def test_a_steady_reference_passes_the_drift_check_unflagged(tmp_path, servers):
    run, row = _run(
        tmp_path,
        {"reference": servers.start("drift", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)},
        "--specdec-drift-check",
        "on",
    )  # never told to slow down
    assert run.returncode == 0, run.stdout[-3000:]
    assert "specdec drift check" in run.stdout and "DRIFT:" not in run.stdout
    assert not any(flag["kind"] == "drift" for flag in row["fairness_flags"])


def test_an_interrupted_session_skips_the_drift_check_and_says_so(tmp_path, servers):
    # Stopping means stopping: the closing drift check measures the references again (on a device it starts
    # the reference's server again), and a GPU run stopped at its time limit did just that after the signal.
    command, env = _inner(
        tmp_path,
        {"reference": servers.start("drift", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)},
        "--specdec-drift-check",
        "on",
        WAIT_AFTER="1",
    )
    run = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_as_from_a_shell,
    )
    try:
        lines = []
        for line in run.stdout:  # the session measured both sides and is waiting in the test
            lines.append(line)
            if line.startswith("MEASURED"):
                break
        run.send_signal(signal.SIGINT)
        output = "".join(lines) + run.communicate(timeout=60)[0]
    finally:
        run.kill()
    assert "MEASURED" in output and run.returncode != 0, output[-3000:]
    assert "specdec drift check" in output, output[-3000:]
    assert "not run: the session was interrupted" in output and "KeyboardInterrupt" in output, output[-3000:]
    assert "drift check:" not in output and "reference again (drift check)" not in output, output[-3000:]


def _as_from_a_shell():
    # Signals as a user's shell gives them: an ignored SIGINT is inherited through exec.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_a_side_cold_for_one_run_is_measured_again_before_any_verdict(tmp_path, servers):
    # The reference's first measured run waits 80 ms before each first token (warm-up requests do not):
    # n-gram cannot change TTFT one request at a time, so the comparison is flagged and measured again.
    run, row = _run(
        tmp_path,
        {
            "reference": servers.start("ttft-slow-first-run", chunk_s=0.01),
            "speculative": servers.start("ok", chunk_s=0.01),
        },
        require="speedup",
        output_len=24,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "measuring both sides again before any verdict: ttft_at_concurrency_1: TTFT speedup" in run.stdout
    assert "measured again: no longer flagged" in run.stdout
    figures = _figures(run.stdout)
    assert figures["flags"] == "" and 0.7 < float(figures["ttft"]) < 1.25, figures  # the warm runs replaced it
    assert row["remeasured"] and row["remeasured"][0].startswith("ttft_at_concurrency_1")
    assert row["speedup_output_throughput"] is not None and "speedup_output_throughput" not in row["unavailable"]


# A client that fell behind once: the first run whose dispatch lag the plugin reads reports a p99 over the
# limit (the reference's first repeat); every run after it is the real client's. Injected, because no fake
# server can make this process's own client late on demand.
LATE_CLIENT_CONFTEST = """
import pytest_specdec.analysis.metrics as metrics

_real = metrics.RunMetrics.client_bound
_late = []


def client_bound(self, limit_ms):
    # The first run is flagged by injection; the rest are held to a loose limit, because what is under test
    # is the second measurement, and on a busy 2-core box a real 12 ms lag flagged it again in CI.
    if not _late:
        _late.append(id(self))
    return id(self) == _late[0] or _real(self, max(limit_ms, 250.0))


metrics.RunMetrics.client_bound = client_bound
"""


def test_a_client_bound_run_is_measured_again_before_any_verdict(tmp_path, servers):
    (tmp_path / "conftest.py").write_text(LATE_CLIENT_CONFTEST)
    run, row = _run(
        tmp_path,
        {"reference": servers.start("ok", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)},
        require="speedup",
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "measuring both sides again before any verdict: client-bound: the reference run (repeat 1)" in run.stdout
    assert "measured again: no longer flagged" in run.stdout
    assert row["remeasured"] and row["remeasured"][0].startswith("client-bound")
    assert row["speedup_output_throughput"] is not None and row["client_bound"] is None, row["unavailable"]


def test_a_side_still_cold_after_measuring_again_has_its_speedups_not_compared(tmp_path, servers):
    run, row = _run(
        tmp_path,
        {"reference": servers.start("cold-forever"), "speculative": servers.start("ok")},
        require="speedup",
        output_len=24,
    )
    assert run.returncode == 1, run.stdout[-3000:]
    assert re.search(r"measured again: still flagged, its speedups are not compared: .*not_steady", run.stdout)
    assert (
        "speedup_output_throughput: unavailable: not compared: measured again (both sides warmed and run "
        "again) and still flagged: not_steady"
    ) in run.stdout
    assert "result.accept_flags('not_steady'" in run.stdout
    assert row["unavailable"]["speedup_output_throughput"].startswith("not compared: measured again")
    # A test that accepts the flag gets its speedup compared.
    accepted, _ = _run(
        tmp_path,
        {"reference": servers.start("cold-forever"), "speculative": servers.start("ok")},
        require="speedup_accepting",
        output_len=24,
    )
    assert accepted.returncode == 0, accepted.stdout[-3000:]
