"""Choosing an engine: the marker and ini field, identities, the one vocabulary's refusals, the gate's guard.

The per-engine command lines and metric formats have tests of their own
(test_engines_sglang_trtllm.py, test_engine_llamacpp.py); here is what every
engine shares.
"""

import dataclasses

import pytest

from pytest_specdec.config.settings import parse_engine
from pytest_specdec.config.spec import MarkerError, ServerSpec, parse_specdec_marker
from pytest_specdec.engines import ENGINE_MODULES, engine_named
from pytest_specdec.engines.base import LaunchRequest
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.serving.pool import ServerPool
from pytest_specdec.serving.server import ServerStartError
from pytest_specdec.verdict.gate.baselines import Baseline, write_baseline
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


def test_every_engine_module_loads_and_names_itself():
    for name in ENGINE_MODULES:
        engine = engine_named(name)
        assert engine.name == name and engine.title and engine.devices
    with pytest.raises(ValueError, match="unknown engine 'tgi'; known engines: vllm, sglang, trtllm, llamacpp"):
        engine_named("tgi")


def test_the_marker_field_and_the_ini_default_choose_the_engine():
    assert parse_specdec_marker((), {"model": "m"}).engine == "vllm"
    assert parse_specdec_marker((), {"model": "m"}, default_engine="llamacpp").engine == "llamacpp"
    # The marker wins over the ini.
    assert parse_specdec_marker((), {"model": "m", "engine": "vllm"}, default_engine="llamacpp").engine == "vllm"
    with pytest.raises(MarkerError, match=r"^engine: unknown engine 'llama.cpp'; known engines: vllm, sglang"):
        parse_specdec_marker((), {"model": "m", "engine": "llama.cpp"})
    assert parse_engine(" sglang ") == "sglang"
    with pytest.raises(Exception, match="unknown engine 'tensorrt'"):
        parse_engine("tensorrt")


def test_vllm_keeps_its_identity_and_other_engines_get_their_own():
    plain = ServerSpec("m", NGRAM)
    vllm = parse_specdec_marker((), {"model": "m", "speculative_config": NGRAM})
    sglang = parse_specdec_marker((), {"model": "m", "speculative_config": NGRAM, "engine": "sglang"})
    # Existing keys (and so server reuse, xdist groups and baseline names) do not move for vLLM tests.
    assert vllm.key == plain.key and '"engine"' not in vllm.key
    assert sglang.key != vllm.key and sglang.target != vllm.target and sglang.reference().engine == "sglang"
    assert sglang.label() == "m [ngram k=4] on sglang" and vllm.label() == "m [ngram k=4]"


def test_what_an_engine_cannot_run_fails_at_collection_naming_engine_and_field():
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker(
            (),
            {"model": "m", "engine": "sglang", "speculative_config": {"method": "suffix", "num_speculative_tokens": 4}},
        )
    assert refused.value.field == "speculative_config.method" and "SGLang" in str(refused.value)
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker(
            (),
            {"model": "m", "engine": "trtllm", "speculative_config": {"method": "suffix", "num_speculative_tokens": 4}},
        )
    assert refused.value.field == "speculative_config.method" and "TensorRT-LLM" in str(refused.value)


def test_a_gpu_only_engine_is_refused_on_the_cpu_build_before_anything_starts(tmp_path):
    launched = []
    pool = ServerPool("cpu", tmp_path, launcher=lambda launch: launched.append(launch) or ["true"])
    spec = parse_specdec_marker(
        (), {"model": "m", "engine": "sglang", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}
    )
    with pytest.raises(ServerStartError, match=r"SGLang runs on gpu here, not on cpu \(--specdec-cpu\)"):
        pool.get(spec)
    assert launched == []
    pool.close()


def test_launch_files_are_written_beside_the_logs_before_the_launch(tmp_path):
    spec = parse_specdec_marker(
        (),
        {
            "model": "m",
            "engine": "trtllm",
            "speculative_config": {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "prompt_lookup_min": 1,
                "prompt_lookup_max": 4,
            },
        },
    )
    launch = LaunchRequest(
        spec, "gpu", "127.0.0.1", 8000, "/models/m", spec.speculative_config, None, work_dir=str(tmp_path)
    )
    files = engine_named("trtllm").launch_files(launch)
    assert files and all(path.startswith(str(tmp_path)) for path in files)
    command = launch.default_command()  # the launch hook's default dispatches on the engine
    assert command[0] == "trtllm-serve" and any(path in command for path in files)


# --- a baseline recorded on one engine never gates another ------------------------------------------

FINGERPRINT = {
    "engine": "vllm",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "x",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0",
}


class Rec:
    def __init__(self, i):
        self.index, self.prompt_len, self.output_tokens, self.success = i, 16, 8, True
        self.ttft, self.latency, self.itl = 0.05, 0.05 + 7 * 0.02, [0.02] * 7
        self.token_ids, self.text, self.top_logprobs, self.spec_decoding, self.chunk_tokens = (
            [1] * 8,
            "x",
            None,
            None,
            [],
        )
        self.error, self.dispatch_lag = None, 0.0


def result_on(engine):
    spec = dataclasses.replace(ServerSpec("m", NGRAM), engine=engine)
    records = [Rec(i) for i in range(4)]
    ref = Run(spec.reference(), 0, summarize(records, 1.0), records, None, ["v"], 0.0)
    sd = Run(spec, 0, summarize(records, 0.8), records, SpecDecodeCounters(10, 40, 20, {}), ["v"], 0.0)
    outputs = compare_outputs(records, records)
    return SpecDecResult(spec, {"name": "w"}, {"name": "p"}, [ref], [sd], outputs, {}, outputs_per_repeat=[outputs])


def stored(tmp_path, engine=None):
    spec = {"model": "m", "speculative_config": NGRAM, "server_args": [], "tensor_parallel_size": 1}
    if engine is not None:
        spec["engine"] = engine
    write_baseline(
        tmp_path,
        Baseline(
            "t.py::test",
            FINGERPRINT,
            {"spec": spec, "workload": {}, "pattern": {}, "seed": 0, "repeat_seeds": [0]},
            [{"reference": {}, "speculative": {}, "derived": {"acceptance_rate": 0.5}}],
            {},
        ),
    )


@pytest.mark.parametrize("recorded, running", [(None, "llamacpp"), ("llamacpp", "vllm"), ("sglang", "llamacpp")])
def test_a_baseline_from_another_engine_fails_the_gate_and_says_so(tmp_path, recorded, running):
    stored(tmp_path, recorded)
    result = result_on(running)
    result.gate = RegressionGate(BaselineSession(tmp_path, update=False, fingerprint=FINGERPRINT), "t.py::test")
    with pytest.raises(AssertionError) as failure:
        result.assert_no_regression(metrics=["acceptance_rate"])
    assert (
        f"was recorded on engine {recorded or 'vllm'!r}, this run is on {running!r}: a baseline never gates "
        "another engine"
    ) in str(failure.value)
    assert result.gate.outcome == "failed"


def test_updating_replaces_another_engines_baseline_and_the_same_engine_is_compared(tmp_path):
    stored(tmp_path, "sglang")
    session = BaselineSession(tmp_path, update=True, fingerprint=FINGERPRINT)
    result = result_on("llamacpp")
    result.gate = RegressionGate(session, "t.py::test")
    result.assert_no_regression(metrics=["acceptance_rate"])
    assert result.gate.outcome == "recorded" and session.pending["t.py::test"].config["spec"]["engine"] == "llamacpp"
    session.flush()
    again = result_on("llamacpp")
    again.gate = RegressionGate(BaselineSession(tmp_path, update=False, fingerprint=FINGERPRINT), "t.py::test")
    again.assert_no_regression(metrics=["acceptance_rate"])  # same engine: compared, and within tolerance
    assert again.gate.outcome == "passed"


def test_a_baseline_on_another_engine_keeps_that_engine_and_its_version_and_rows_name_it(tmp_path):
    from pytest_specdec.report.row.rows import row_for, sd_label

    session = BaselineSession(tmp_path, update=True, fingerprint=FINGERPRINT)
    result = result_on("llamacpp")
    for run in (*result.reference_runs, *result.speculative_runs):
        run.engine_facts = {"version": "xllamacpp 2026.10.11549"}
    result.gate = RegressionGate(session, "t.py::test")
    result.assert_no_regression(metrics=["acceptance_rate"])
    fingerprint = session.pending["t.py::test"].fingerprint
    assert fingerprint["engine"] == "llamacpp" and fingerprint["engine_version"] == "xllamacpp 2026.10.11549"
    assert fingerprint["device_name"] == "x"  # the rest is the session's
    # Another build of the same engine on the same machine: every figure compared, and the change named.
    session.flush()
    newer = result_on("llamacpp")
    for run in (*newer.reference_runs, *newer.speculative_runs):
        run.engine_facts = {"version": "b7702-1a2b3c4"}
    newer.gate = RegressionGate(BaselineSession(tmp_path, update=False, fingerprint=FINGERPRINT), "t.py::test")
    newer.assert_no_regression(metrics=["acceptance_rate"])
    assert newer.gate.comparison.startswith("same machine: every gated figure compared")
    assert "engine_version xllamacpp 2026.10.11549 -> b7702-1a2b3c4" in newer.gate.comparison
    # vLLM keeps the session's fingerprint (the installed build), and its label no engine suffix.
    assert sd_label(result_on("vllm").spec) == "ngram k=4"
    row = row_for("t.py::test", newer.spec, {"name": "w"}, {"name": "p"}, outcome="passed", result=newer)
    assert row["config"] == "ngram k=4 on llamacpp" and row["engine_version"] == "b7702-1a2b3c4"


def test_per_step_data_is_never_estimated_from_llama_cpps_one_token_events():
    def with_events(engine):
        result = result_on(engine)
        for run in result.speculative_runs:
            for record in run.records:
                record.chunk_tokens = [1] * 8  # llama-server: one event per token, drafted or not
                record.spec_decoding = {"num_draft_tokens": 8, "num_accepted_draft_tokens": 4}  # totals only
        return result

    # On vLLM an event is a step: one token per event reads as nothing accepted, labelled an estimate.
    assert with_events("vllm").analysis().source == "estimate"
    llamacpp = with_events("llamacpp").analysis()
    assert llamacpp.source is None
    assert llamacpp.problem == (
        "no per-step data: llama.cpp reports per-request totals only, and streams one "
        "event per token, drafted or not, so its events are not steps"
    )
