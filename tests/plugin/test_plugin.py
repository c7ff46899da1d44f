"""The plugin end to end in pytester runs (servers replaced through the launch hook)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.support import SUPPORT

FAKE = str(SUPPORT / "fake_server.py")

# A conftest that launches the stand-in server instead of vLLM, records the
# command the plugin would have run, and can be told to misbehave per model.
FAKE_CONFTEST = f"""
import json, os, sys

def pytest_specdec_server_command(launch):
    with open("launches.jsonl", "a") as f:
        f.write(json.dumps({{"model": launch.spec.model, "device": launch.device,
                             "visible": launch.env.get("CUDA_VISIBLE_DEVICES"),
                             "default": launch.default_command()}}) + "\\n")
    mode = "exit" if launch.spec.model == "broken" else "ok"
    return [sys.executable, {FAKE!r}, "--port", str(launch.port),
            "--served-model-name", launch.spec.model, "--mode", mode]
"""

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4}'


def test_help_lists_the_options(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*--specdec-gpu*",
            "*--specdec-cpu*",
            "*--specdec-startup-timeout=SECONDS*",
            "*--specdec-kv-cache-bytes=SIZE*",
            "*--specdec-log-dir=DIR*",
        ]
    )


def test_without_a_device_flag_specdec_tests_skip_naming_both_flags(pytester):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        def test_sd(specdec):
            raise AssertionError("must not run")

        def test_specdec_server(specdec_server):
            raise AssertionError("must not run")

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*--specdec-gpu*--specdec-cpu*"] * 2)


def test_cpu_run_skips_tests_that_require_a_gpu(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.specdec(model="m", requires_gpu=True)
        def test_gpu_only(specdec):
            raise AssertionError("must not run")

        def test_factory(specdec_server):
            specdec_server(model="m", requires_gpu=True)
            raise AssertionError("must not run")
        """
    )
    result = pytester.runpytest("--specdec-cpu", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs a GPU (requires_gpu=True*--specdec-gpu*"] * 2)
    assert not Path("launches.jsonl").exists()


@pytest.mark.parametrize("flags", [[], ["--specdec-cpu"]])
def test_bad_markers_fail_their_test_naming_the_field(pytester, flags):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 0})
        def test_zero_k(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config="ngram")
        def test_not_mapping(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={"method": "ngrams", "num_speculative_tokens": 2})
        def test_unknown_method(specdec): pass

        @pytest.mark.specdec(model="m", draft="x")
        def test_unknown_argument(specdec): pass

        def test_unmarked(): pass
        """
    )
    result = pytester.runpytest(*flags)
    result.assert_outcomes(passed=1, errors=4)
    result.stdout.fnmatch_lines(
        [
            "*invalid @pytest.mark.specdec: speculative_config.num_speculative_tokens: must be an integer >= 1, got 0*",
            "*invalid @pytest.mark.specdec: speculative_config: must be a mapping*got str*",
            "*invalid @pytest.mark.specdec: speculative_config.method: unknown method 'ngrams'*",
            "*invalid @pytest.mark.specdec: draft: unknown specdec marker argument*",
        ],
        consecutive=False,
    )
    assert not Path("launches.jsonl").exists()


def test_extra_methods_ini_admits_a_new_method(pytester):
    pytester.makeini("[pytest]\nspecdec_extra_methods =\n    future_mtp\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={"method": "future_mtp", "num_speculative_tokens": 1})
        def test_new(specdec): pass
        """
    )
    pytester.runpytest("-rs").assert_outcomes(skipped=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--specdec-gpu", "--specdec-cpu"], "*--specdec-gpu and --specdec-cpu are mutually exclusive*"),
        (["--specdec-startup-timeout=0"], "*--specdec-startup-timeout: must be a finite number greater than 0*"),
        (["--specdec-kv-cache-bytes=lots"], "*--specdec-kv-cache-bytes: expected a size such as 1GiB*"),
    ],
)
def test_bad_options_are_usage_errors(pytester, args, message):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_values_name_the_setting(pytester):
    pytester.makeini("[pytest]\nspecdec_cpu_kv_cache_bytes = a lot\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini setting specdec_cpu_kv_cache_bytes: expected a size*"])


def test_the_old_server_fixture_and_class_names_still_work_with_a_warning(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest_specdec

        def test_old(vllm_server):
            server = vllm_server(model="m")
            assert isinstance(server, pytest_specdec.VllmServer) and pytest_specdec.VllmServer is pytest_specdec.ManagedServer
        """
    )
    result = pytester.runpytest("--specdec-cpu", "-W", "default")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*SpecdecDeprecationWarning: the vllm_server fixture is now specdec_server*",
            "*SpecdecDeprecationWarning: VllmServer is now ManagedServer*",
        ]
    )


def test_options_and_ini_reach_the_launch(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makeini("[pytest]\nspecdec_cpu_kv_cache_bytes = 512MiB\nspecdec_startup_timeout = 30\n")
    pytester.makepyfile(
        """
        def test_a(specdec_server):
            specdec_server(model="m")
        """
    )
    pytester.runpytest("--specdec-cpu", "--specdec-log-dir=logs").assert_outcomes(passed=1)
    import json

    (launch,) = [json.loads(line) for line in Path("launches.jsonl").read_text().splitlines()]
    default = launch["default"]
    assert launch["device"] == "cpu"
    assert default[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert default[default.index("--kv-cache-memory-bytes") + 1] == str(512 << 20)
    assert len(list(Path("logs").glob("server-01-*.log"))) == 1
    # Command-line options win over the ini; the flag has its ini key's name.
    Path("launches.jsonl").unlink()
    pytester.runpytest("--specdec-cpu", "--specdec-cpu-kv-cache-bytes=1GiB").assert_outcomes(passed=1)
    (launch,) = [json.loads(line) for line in Path("launches.jsonl").read_text().splitlines()]
    assert launch["default"][launch["default"].index("--kv-cache-memory-bytes") + 1] == str(1 << 30)
    # The old spelling still works, and says what replaced it.
    Path("launches.jsonl").unlink()
    result = pytester.runpytest("--specdec-cpu", "--specdec-kv-cache-bytes=2GiB")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*SpecdecDeprecationWarning: --specdec-kv-cache-bytes is deprecated: use --specdec-cpu-kv-cache-bytes*"]
    )
    (launch,) = [json.loads(line) for line in Path("launches.jsonl").read_text().splitlines()]
    assert launch["default"][launch["default"].index("--kv-cache-memory-bytes") + 1] == str(2 << 30)


def test_the_old_price_flag_still_prices_with_a_warning(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--specdec-gpu-price", "2.5")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*--specdec-gpu-price is deprecated: use --specdec-gpu-usd-per-hour*"])


def fake_gpus(pytester, monkeypatch, count, total_mib=81920, free_mib=81000):
    """An `nvidia-smi` on PATH that lists `count` GPUs (this machine has none)."""
    bin_dir = pytester.path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        for i in range({count}):
            print(f"{{i}}, NVIDIA H100 80GB HBM3, {total_mib}, {free_mib}, 550.54.15")
        """)
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_gpu_flag_builds_vllm_serve_commands(pytester, monkeypatch):
    fake_gpus(pytester, monkeypatch, 2)
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="org/target", tensor_parallel_size=2, requires_gpu=True,
                             speculative_config={NGRAM}, server_args=["--async-scheduling"])
        def test_gpu(specdec):
            assert specdec.server().url.startswith("http://127.0.0.1:")
        """
    )
    pytester.runpytest("--specdec-gpu").assert_outcomes(passed=1)
    import json

    (launch,) = [json.loads(line) for line in Path("launches.jsonl").read_text().splitlines()]
    default = launch["default"]
    assert default[1:3] == ["serve", "org/target"] and default[0].endswith("vllm")
    assert default[default.index("--tensor-parallel-size") + 1] == "2"
    assert json.loads(default[default.index("--speculative-config") + 1]) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
    }
    assert default[-1] == "--async-scheduling" and "--kv-cache-memory-bytes" not in default
    assert launch["visible"] == "0,1"


GPU_SUITE = f"""
import os, pytest

def sd(tp, model):
    return pytest.mark.specdec(model=model, tensor_parallel_size=tp, requires_gpu=True, speculative_config={NGRAM})

@pytest.mark.parametrize("model", [pytest.param(m, marks=sd(2, m)) for m in ("a", "b", "c", "d")])
def test_tp2(specdec, model):
    specdec.server()

@sd(4, "big")
def test_tp4(specdec):
    specdec.server()
"""


def test_xdist_workers_get_disjoint_gpu_shares_and_too_big_servers_skip(pytester, monkeypatch):
    fake_gpus(pytester, monkeypatch, 4)
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_gpu_shares=GPU_SUITE)
    result = pytester.runpytest_subprocess("--specdec-gpu", "-n", "2", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*needs 4 GPUs (tensor_parallel_size / draft_tensor_parallel_size), this worker "
            "has 2: GPUs 0,1,2,3 split over 2 xdist workers*"
        ]
    )
    launches = [json.loads(line) for line in (pytester.path / "launches.jsonl").read_text().splitlines()]
    assert sorted(launch["model"] for launch in launches) == ["a", "b", "c", "d"]
    assert {launch["visible"] for launch in launches} == {"0,1", "2,3"}  # two TP=2 servers at once, never sharing

    alone = pytester.runpytest_subprocess("--specdec-gpu", "--specdec-devices", "0-3", "-p", "no:cacheprovider")
    alone.assert_outcomes(passed=5)  # one process with all four GPUs fits TP=4 too


def test_a_server_waits_for_gpu_memory_and_fails_with_the_numbers(pytester, monkeypatch):
    fake_gpus(pytester, monkeypatch, 1, total_mib=81920, free_mib=50000)  # someone else holds 30 GB
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.specdec(model="a", requires_gpu=True, speculative_config={NGRAM},
                             server_args=["--gpu-memory-utilization", "0.5"])
        def test_fits(specdec):
            specdec.server()  # 0.5 x 81920 = 40960 MiB needed, 50000 free

        @pytest.mark.specdec(model="b", requires_gpu=True, speculative_config={NGRAM})
        @pytest.mark.specdec_gpu_memory(60000)
        def test_too_big(specdec):
            specdec.server()

        @pytest.mark.specdec(model="c", requires_gpu=True, speculative_config={NGRAM})
        @pytest.mark.specdec_gpu_memory("lots")
        def test_bad_marker(specdec):
            pass
        """)
    result = pytester.runpytest_subprocess("--specdec-gpu", "--specdec-startup-timeout", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    out = result.stdout.str()
    assert (
        "not enough free GPU memory to start the server after 1 s (needs 60000 MiB per GPU; GPU 0: 50000 MiB free)"
        in out
    )
    assert "invalid @pytest.mark.specdec_gpu_memory: takes one whole number of MiB per GPU" in out
    launches = [json.loads(line)["model"] for line in (pytester.path / "launches.jsonl").read_text().splitlines()]
    assert launches == ["a"]  # the one that did not fit never started


def test_no_gpus_fails_the_gpu_tests_with_a_hint(pytester, monkeypatch):
    monkeypatch.setenv("PATH", str(pytester.path / "empty-bin"))  # no nvidia-smi anywhere
    pytester.makepyfile(test_no_gpus=GPU_SUITE)
    result = pytester.runpytest(f"--rootdir={pytester.path}", "--specdec-gpu", "-p", "no:cacheprovider", "-k", "tp4")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--specdec-gpu: could not list GPUs with nvidia-smi*pass --specdec-devices*"])
    assert "During handling" not in result.stdout.str()


def test_hook_replaces_the_launch_command_and_configs_start_once_in_grouped_order(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        f"""
        import httpx, pytest

        def record(specdec, name):
            server = specdec.server()
            assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == server.model
            with open("order.txt", "a") as f:
                f.write(f"{{name}} {{server.pid}}\\n")

        @pytest.mark.specdec(model="a", speculative_config={NGRAM})
        def test_a1(specdec): record(specdec, "a1")

        @pytest.mark.specdec(model="b")
        def test_b(specdec): record(specdec, "b")

        @pytest.mark.specdec(model="a", speculative_config={NGRAM})
        def test_a2(specdec): record(specdec, "a2")
        """
    )
    result = pytester.runpytest("--specdec-cpu", "-v")
    result.assert_outcomes(passed=3)
    lines = [line.split() for line in Path("order.txt").read_text().splitlines()]
    assert [name for name, _ in lines] == ["a1", "a2", "b"]
    assert lines[0][1] == lines[1][1] != lines[2][1]
    assert len(Path("launches.jsonl").read_text().splitlines()) == 2
    result.stdout.fnmatch_lines(
        ["*specdec servers*", "a [[]ngram k=4[]]: ready in * s; log *", "b [[]no SD[]]: ready in*"]
    )
    for _, pid in lines:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_server_that_fails_to_start_fails_the_test_with_its_log(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.specdec(model="broken")
        def test_one(specdec):
            specdec.server()

        @pytest.mark.specdec(model="broken")
        def test_two(specdec):
            specdec.server()
        """
    )
    result = pytester.runpytest("--specdec-cpu")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*exited with code 3 during start-up*",
            "*fake complaint about the speculative config*",
            "*failed earlier in this session*",
            "broken [[]no SD[]]: FAILED: *",
        ]
    )
    assert len(Path("launches.jsonl").read_text().splitlines()) == 1


def test_specdec_fixture_without_marker_says_so(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile("def test_x(specdec): pass")
    result = pytester.runpytest("--specdec-cpu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the specdec fixture needs @pytest.mark.specdec*"])


def test_collection_imports_neither_vllm_nor_torch(pytester):
    pytester.makeconftest(
        """
        import sys

        def pytest_collection_finish(session):
            print("HEAVY:", sorted(m for m in ("vllm", "torch", "transformers") if m in sys.modules))
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.specdec(model="specdec:smollm2-135m",
                             speculative_config={"method": "draft_model", "num_speculative_tokens": 3,
                                                  "model": "specdec:smollm2-135m@layers=8"})
        def test_draft(specdec): pass
        """
    )
    for flags in ([], ["--specdec-cpu"], ["--specdec-gpu"]):
        result = pytester.runpytest_subprocess("--collect-only", "-s", *flags)
        result.stdout.fnmatch_lines(["HEAVY: []", "*1 test collected*"])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_stops_its_servers(pytester, signum):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import time

        def test_long(specdec_server):
            specdec_server(model="m")
            time.sleep(120)
        """
    )
    pidfile = pytester.path / "pids"
    env = {**os.environ, "FAKE_SERVER_PIDFILE": str(pidfile)}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--specdec-cpu", "-p", "no:cacheprovider"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_as_from_a_shell,
    )
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)  # let the server become ready and the test reach its sleep
        (server_pid,) = map(int, pidfile.read_text().split())
        run.send_signal(signum)
        output = run.communicate(timeout=60)[0].decode()
    finally:
        run.kill()
    assert run.returncode != 0, output
    deadline = time.monotonic() + 5
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server_pid), output


def _as_from_a_shell():
    # An ignored SIGINT is inherited through exec, and something earlier in a
    # full suite run leaves this process ignoring it (CI saw the SIGINT case
    # hang): start the inner run with the signals a user's shell gives it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_xdist_workers_claim_distinct_ports(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("model", ["a", "b", "c", "d"])
        def test_server(specdec_server, model):
            server = specdec_server(model=model)
            with open(f"port-{model}", "w") as f:
                f.write(str(server.port))
        """
    )
    pytester.runpytest("--specdec-cpu", "-n", "2", "-p", "xdist").assert_outcomes(passed=4)
    ports = {Path(f"port-{m}").read_text() for m in "abcd"}
    assert len(ports) == 4


def test_server_starts_are_announced_on_the_terminal_but_not_under_quiet(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile("def test_a(specdec_server):\n    specdec_server(model='m')\n")
    result = pytester.runpytest("--specdec-cpu")
    result.stdout.fnmatch_lines(
        [
            "[[]specdec[]] starting vLLM (cpu) for m [[]no SD[]] on http://127.0.0.1:*; log: *",
            "[[]specdec[]] ready in * s: m [[]no SD[]]",
        ]
    )
    quiet = pytester.runpytest("--specdec-cpu", "-q")
    quiet.assert_outcomes(passed=1)
    assert "[specdec]" not in quiet.stdout.str()


def test_workload_and_pattern_markers_are_validated_at_collection(pytester):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_q")
        def test_unknown_workload(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_s", input_len=0)
        def test_bad_override(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_s", prompt_len=5)
        def test_unknown_override(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("sharegpt")
        def test_no_data_path(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.access_pattern("burstiness_extreme")
        def test_unknown_pattern(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.access_pattern("burstiness_mid", max_concurrency=0)
        def test_bad_pattern_override(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_s", "random_m")
        def test_two_workloads(specdec): pass

        @pytest.mark.workload("random_s")
        def test_workload_without_specdec(): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_s", input_len=64, output_len=16)
        @pytest.mark.access_pattern("throughput_low", num_prompts=2)
        def test_fine(specdec): pass
        """
    )
    result = pytester.runpytest("-rs")
    # A missing data file is the environment's gap, not a marker mistake: like
    # every specdec test it is skipped without a device flag, and fails with one.
    result.assert_outcomes(errors=7, skipped=2)
    assert "PYTEST_SPECDEC_SHAREGPT_PATH" not in result.stdout.str()
    result = pytester.runpytest("-rs", "--specdec-cpu", "-k", "not test_fine")
    result.assert_outcomes(errors=8)
    out = result.stdout.str()
    assert "invalid @pytest.mark.workload: unknown workload 'random_q'" in out
    for name in ("random_s", "random_x", "code_edit", "sharegpt", "spec_bench", "burstgpt", "custom"):
        assert name in out.split("unknown workload 'random_q'")[1].splitlines()[0]
    assert "input_len" in out and "prompt_len" in out
    assert "PYTEST_SPECDEC_SHAREGPT_PATH" in out and "specdec_sharegpt_path" in out
    assert "invalid @pytest.mark.access_pattern:" in out and "burstiness_extreme" in out
    assert "max_concurrency" in out
    assert "takes one catalog name" in out
    assert "@pytest.mark.workload, access_pattern, specdec_tolerance and specdec_slo need @pytest.mark.specdec" in out


def test_data_paths_come_from_env_then_ini(pytester, monkeypatch):
    data = pytester.path / "data"
    data.mkdir()
    (data / "mine.jsonl").write_text('{"prompt": "hi"}\n')
    pytester.makeini("[pytest]\nspecdec_custom_path = data/mine.jsonl\nspecdec_spec_bench_path = data/nope.jsonl\n")
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("custom")
        @pytest.mark.access_pattern("throughput_low")
        def test_custom(specdec):
            assert specdec.workload.path == {str(data / "mine.jsonl")!r}

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("spec_bench")
        @pytest.mark.access_pattern("throughput_low")
        def test_spec_bench(specdec):
            assert specdec.workload.path == "/elsewhere/sb.jsonl"

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("spec_bench", path="/marker/wins.jsonl")
        @pytest.mark.access_pattern("throughput_low")
        def test_marker_path(specdec):
            assert specdec.workload.path == "/marker/wins.jsonl"
        """
    )
    pytester.makeconftest(FAKE_CONFTEST)
    monkeypatch.setenv("PYTEST_SPECDEC_SPEC_BENCH_PATH", "/elsewhere/sb.jsonl")
    pytester.runpytest("--specdec-cpu").assert_outcomes(passed=3)


def test_workloads_and_patterns_register_through_hooks(pytester):
    pytester.makeconftest(
        FAKE_CONFTEST
        + """
from pytest_specdec import AccessPattern, Prompt, Workload

def build(tokenizer, num_prompts, seed):
    return [Prompt("hello", 1, 4)] * num_prompts

def pytest_specdec_workloads(config):
    return [Workload("greetings", kind="custom_builder", builder=build)]

def pytest_specdec_access_patterns(config):
    return {"trickle": AccessPattern("trickle", request_rate=1.0, max_concurrency=2, num_prompts=3)}
"""
    )
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("greetings", output_len=2)
        @pytest.mark.access_pattern("trickle", num_prompts=5)
        def test_registered(specdec):
            assert specdec.workload.name == "greetings"
            assert specdec.workload.build(None, 2, 0)[0].output_len == 2
            assert (specdec.pattern.request_rate, specdec.pattern.num_prompts) == (1.0, 5)
        """
    )
    pytester.runpytest("--specdec-cpu").assert_outcomes(passed=1)


def test_run_without_traffic_markers_says_which_are_missing(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.workload("random_s")
        def test_run(specdec):
            specdec.run()
        """
    )
    result = pytester.runpytest("--specdec-cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*specdec.run() needs @pytest.mark.access_pattern(...)*"])


@pytest.mark.parametrize(
    "args, ini, message",
    [
        (["--specdec-repeats=0"], "", "*--specdec-repeats: expected auto or a whole number >= 1, got '0'*"),
        ([], "[pytest]\nspecdec_repeats = many\n", "*ini setting specdec_repeats: expected auto or a whole number*"),
        (["--specdec-repeats=auto", "--specdec-max-repeats=1"], "", "*--specdec-max-repeats 1 is below the 2 draws*"),
        (["--specdec-session-false-fail=50%"], "", "*--specdec-session-false-fail: must be between 0 and 0.5*'50%'*"),
        (["--specdec-false-fail=often"], "", "*--specdec-false-fail: expected a rate between 0 and 0.5*'often'*"),
        ([], "[pytest]\nspecdec_false_pass = 0\n", "*ini setting specdec_false_pass: must be between 0 and 0.5*"),
    ],
)
def test_bad_repeats_are_usage_errors(pytester, monkeypatch, args, ini, message):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # a --specdec-repeats there would win over the ini
    if ini:
        pytester.makeini(ini)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_tolerance_marker_is_validated(pytester):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.specdec_tolerance(10)
        def test_percent(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.specdec_tolerance(0.1, median_tpot_ms=0.2)
        def test_both(specdec): pass

        @pytest.mark.specdec(model="m", speculative_config={NGRAM})
        @pytest.mark.specdec_tolerance(median_tpot_ms=0.2, acceptance_rate=0.03)
        def test_fine(specdec): pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*invalid @pytest.mark.specdec_tolerance:*0.10 for 10%*",
            "*invalid @pytest.mark.specdec_tolerance: takes one tolerance for all metrics*",
        ],
        consecutive=False,
    )


@pytest.mark.parametrize(
    "ini, message",
    [
        ("specdec_tolerances = lots", "*ini setting specdec_tolerances: expected a fraction or 'metric = fraction'*"),
        ("specdec_tolerances =\n    median_tpot_ms = 15", "*ini setting specdec_tolerances:*median_tpot_ms*"),
        (
            "specdec_tolerances =\n    median_tpot_ms = 0.1\n    p99_ttft_ms 0.3",
            "*expected 'metric = fraction', got 'p99_ttft_ms 0.3'*",
        ),
    ],
)
def test_bad_ini_tolerances_are_usage_errors(pytester, ini, message):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_failing_test_under_x_still_stops_the_server(pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        def test_fails(specdec_server):
            server = specdec_server(model="m")
            with open("pid.txt", "w") as f:
                f.write(str(server.pid))
            assert False, "an ordinary failure of this test"

        def test_never_runs():
            pass
        """
    )
    result = pytester.runpytest_subprocess("--specdec-cpu", "-x", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: an ordinary failure of this test*"])
    pid = int((pytester.path / "pid.txt").read_text())
    assert not _alive(pid)
