"""Forced acceptance: declared in vLLM's keys, validated as vLLM validates them, refused by name where an
engine, its build, the device or the drafter cannot force it, translated into llama.cpp's flags."""

import json
import subprocess
import sys

import pytest

from pytest_specdec.config.plans import plan_for
from pytest_specdec.config.settings import Settings
from pytest_specdec.config.spec import parse_specdec_marker
from pytest_specdec.engines import engine_named
from pytest_specdec.engines import llamacpp
from pytest_specdec.engines.base import EngineConfigError, LaunchRequest
from pytest_specdec.engines.forced_acceptance import ForcedAcceptance, forced_acceptance, forced_at, rates_for_length
from pytest_specdec.engines.llamacpp_serve import params_for, parser
from pytest_specdec.engines.server_spec import MarkerError, ServerSpec
from pytest_specdec.engines import vllm
from tests.support.fake_vllm import python_with_vllm_files

MODEL = "specdec:smollm2-135m"
DRAFT = {"method": "draft_model", "num_speculative_tokens": 4, "model": "specdec:smollm2-135m@layers=8"}


def forced(**keys):
    return {**DRAFT, "rejection_sample_method": "synthetic", **keys}


def test_a_length_becomes_the_least_variance_rates_and_its_label():
    got = forced_acceptance(forced(synthetic_acceptance_length=2.5))
    assert got == ForcedAcceptance((1.0, 0.5, 0.0, 0.0), 2.5)
    assert got.length == 2.5 and got.label() == "at forced acceptance 2.50"
    assert rates_for_length(1.0, 3) == (0.0, 0.0, 0.0) and rates_for_length(4.0, 3) == (1.0, 1.0, 1.0)
    rates = forced_acceptance(forced(synthetic_acceptance_rates=[0.9, 0.6, 0.3, 0.1]))
    assert rates.declared_length is None and rates.length == pytest.approx(2.9)


def test_nothing_forced_without_the_synthetic_sampler():
    assert forced_acceptance(DRAFT) is None and forced_acceptance(None) is None
    assert forced_acceptance({**DRAFT, "rejection_sample_method": "standard"}) is None
    with pytest.raises(MarkerError, match=r"synthetic_acceptance_length: forces acceptance only with"):
        forced_acceptance({**DRAFT, "synthetic_acceptance_length": 2.0})


@pytest.mark.parametrize(
    "config, field, words",
    [
        (forced(synthetic_acceptance_length=2.0, method="ngram"), "rejection_sample_method", "proposes nothing"),
        (forced(synthetic_acceptance_length=2.0, method="suffix"), "rejection_sample_method", "proposes nothing"),
        (forced(synthetic_acceptance_length=2.0, method="custom_class"), "rejection_sample_method", "only for"),
        (forced(), "rejection_sample_method", "got neither"),
        (forced(synthetic_acceptance_length=2.0, synthetic_acceptance_rates=[1, 0, 0, 0]), "rejection_sample", "both"),
        (forced(synthetic_acceptance_length=5.5), "synthetic_acceptance_length", "in [1, 5]"),
        (forced(synthetic_acceptance_length=0.5), "synthetic_acceptance_length", "in [1, 5]"),
        (forced(synthetic_acceptance_length=True), "synthetic_acceptance_length", "in [1, 5]"),
        (forced(synthetic_acceptance_rates=[1.0, 0.5]), "synthetic_acceptance_rates", "4 per-position"),
        (forced(synthetic_acceptance_rates=[1.0, 1.2, 0, 0]), "synthetic_acceptance_rates[1]", "[0, 1]"),
        (forced(synthetic_acceptance_rates=[0.5, 0.6, 0, 0]), "synthetic_acceptance_rates[1]", "must not exceed"),
    ],
)
def test_a_config_that_cannot_be_forced_is_refused_at_the_marker_naming_its_field(config, field, words):
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker((), {"model": MODEL, "speculative_config": config, "engine": "llamacpp"})
    assert refused.value.field.startswith(f"speculative_config.{field}") and words in str(refused.value)


# vLLM's own SpeculativeConfig validator and length-to-rates resolution, in a process of its own (importing
# vLLM's config takes seconds and stays out of the test process).
VLLM_RESOLVES = """
import json, sys
from vllm.config.speculative import SpeculativeConfig
out = []
for k, rates, length in json.loads(sys.argv[1]):
    try:
        out.append(SpeculativeConfig._resolve_synthetic_acceptance_rates(k, rates, length))
    except ValueError as exc:
        out.append(str(exc))
print(json.dumps(out))
"""


def test_the_vocabulary_is_vllms_own_speculative_config():
    cases = [
        (4, None, 2.5),
        (4, None, 1.0),
        (4, None, 5.0),
        (3, None, 2.2),
        (4, [0.9, 0.6, 0.3, 0.1], None),
        (4, None, 5.5),
        (4, [1.0, 0.5], None),
        (4, [0.5, 0.6, 0.0, 0.0], None),
        (4, [1.0, 1.2, 0.0, 0.0], None),
        (4, None, None),
    ]
    done = subprocess.run(
        [sys.executable, "-c", VLLM_RESOLVES, json.dumps(cases)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for (k, rates, length), vllm_said in zip(cases, theirs):
        config = {**DRAFT, "num_speculative_tokens": k, "rejection_sample_method": "synthetic"}
        if rates is not None:
            config["synthetic_acceptance_rates"] = rates
        if length is not None:
            config["synthetic_acceptance_length"] = length
        if isinstance(vllm_said, str):  # vLLM refuses it: so does the marker
            with pytest.raises(MarkerError):
                forced_acceptance(config)
        else:
            assert list(forced_acceptance(config).rates) == pytest.approx(vllm_said), (k, rates, length)


def test_vllm_refuses_forcing_on_its_cpu_build_and_on_a_build_without_it(tmp_path):
    spec = parse_specdec_marker((), {"model": MODEL, "speculative_config": forced(synthetic_acceptance_length=2.5)})
    force = forced_acceptance(spec.speculative_config)
    with pytest.raises(EngineConfigError, match="Synthetic acceptance not supported with CPU sampling"):
        engine_named("vllm").check_forced(spec, force, "cpu")
    engine_named("vllm").check_forced(spec, force, "gpu")  # the installed build has the keys

    def build(name, text):
        return python_with_vllm_files(tmp_path, name, {"config/speculative.py": text})

    assert vllm.knows_forced_acceptance(build("new", "synthetic_acceptance_length: float | None = None")) is True
    old = build("old", "class SpeculativeConfig: pass")
    assert vllm.knows_forced_acceptance(old) is False
    with pytest.raises(EngineConfigError, match=r"no synthetic rejection sampling .*vllm-project/vllm#38045"):
        engine_named("vllm").check_forced(spec.on_build(old), force, "gpu")


def test_the_keys_reach_vllms_speculative_config_as_written():
    spec = parse_specdec_marker((), {"model": MODEL, "speculative_config": forced(synthetic_acceptance_length=2.5)})
    launch = LaunchRequest(spec, "gpu", "127.0.0.1", 8000, "/m", spec.speculative_config, None)
    command = vllm.build_command(launch)
    sent = json.loads(command[command.index("--speculative-config") + 1])
    assert sent["rejection_sample_method"] == "synthetic" and sent["synthetic_acceptance_length"] == 2.5


def test_llamacpp_forces_through_its_own_flags_which_the_wheel_takes():
    for keys, flags in (
        ({"synthetic_acceptance_length": 2.5}, ["--spec-synth-len", "2.5"]),
        ({"synthetic_acceptance_rates": [0.9, 0.6, 0.3, 0.1]}, ["--spec-synth-rates", "0.9,0.6,0.3,0.1"]),
    ):
        spec = parse_specdec_marker((), {"model": MODEL, "speculative_config": forced(**keys), "engine": "llamacpp"})
        launch = LaunchRequest(spec, "cpu", "127.0.0.1", 8000, "/m.gguf", {**spec.speculative_config}, None)
        command = llamacpp.ENGINE.command(launch)
        at = command.index(flags[0])
        assert command[at : at + 2] == flags
        # The installed xllamacpp's own parameters take them (no server started).
        import xllamacpp

        shim_args = command[command.index("-m") :]
        params = params_for(parser().parse_args(shim_args), xllamacpp)
        if "synthetic_acceptance_length" in keys:
            assert params.speculative.synth_len == 2.5
        else:
            assert list(params.speculative.synth_rates) == pytest.approx([0.9, 0.6, 0.3, 0.1])
    assert "--spec-synth-len" in llamacpp.OWN_FLAGS and "--spec-synth-rates" in llamacpp.OWN_FLAGS


def test_a_llamacpp_build_without_forcing_is_refused_by_name(tmp_path):
    spec = parse_specdec_marker(
        (), {"model": MODEL, "speculative_config": forced(synthetic_acceptance_length=2.5), "engine": "llamacpp"}
    )
    force = forced_acceptance(spec.speculative_config)
    engine_named("llamacpp").check_forced(spec, force, "cpu")  # the installed wheel (2026.10) has it
    old_binary = tmp_path / "llama-server"
    old_binary.write_text("#!/bin/sh\necho '--spec-draft-n-max N   tokens to draft'\n")
    old_binary.chmod(0o755)
    with pytest.raises(EngineConfigError, match=r"cannot force acceptance .*ggml-org/llama.cpp#27711"):
        engine_named("llamacpp").check_forced(spec.on_build(str(old_binary)), force, "cpu")
    new_binary = tmp_path / "llama-server-new"
    new_binary.write_text("#!/bin/sh\necho '--spec-synth-len N   target mean synthetic acceptance length'\n")
    new_binary.chmod(0o755)
    engine_named("llamacpp").check_forced(spec.on_build(str(new_binary)), force, "cpu")


def test_an_engine_without_a_translation_refuses_forcing_by_name():
    from pytest_specdec.engines.base import Engine

    class Plain(Engine):
        name, title, methods = "plain", "Plain", frozenset({"draft_model"})

    spec = parse_specdec_marker((), {"model": MODEL, "speculative_config": forced(synthetic_acceptance_length=2.5)})
    with pytest.raises(EngineConfigError, match="Plain has no setting the plugin knows that forces acceptance"):
        Plain().check_forced(spec, forced_acceptance(spec.speculative_config), "gpu")


EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "model": "org/eagle3-head"}


def _gpu_spec(engine, **keys):
    config = {**EAGLE3, "rejection_sample_method": "synthetic", **keys}
    return parse_specdec_marker((), {"model": "org/target", "speculative_config": config, "engine": engine})


def test_sglang_forces_a_mean_length_through_its_environment_and_refuses_rates():
    spec = _gpu_spec("sglang", synthetic_acceptance_length=2.5)
    engine = engine_named("sglang")
    engine.check_forced(spec, forced_acceptance(spec.speculative_config), "gpu")
    assert engine.spec_env(spec) == {"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    assert engine.spec_env(spec.reference()) == {}
    rates = _gpu_spec("sglang", synthetic_acceptance_rates=[0.9, 0.5, 0.2])
    with pytest.raises(EngineConfigError, match="mean acceptance length only"):
        engine.check_forced(rates, forced_acceptance(rates.speculative_config), "gpu")
    draft = parse_specdec_marker(
        (), {"model": "org/target", "engine": "sglang", "speculative_config": forced(synthetic_acceptance_length=2.0)}
    )
    with pytest.raises(EngineConfigError, match="has not confirmed it applies"):
        engine.check_forced(draft, forced_acceptance(draft.speculative_config), "gpu")


def test_tensorrt_llm_forces_whole_accepted_drafts_through_its_environment():
    spec = _gpu_spec("trtllm", synthetic_acceptance_length=3)
    engine = engine_named("trtllm")
    engine.check_forced(spec, forced_acceptance(spec.speculative_config), "gpu")
    assert engine.spec_env(spec) == {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "2"}  # drafts, not the target's
    assert engine.spec_env(spec.reference()) == {}
    half = _gpu_spec("trtllm", synthetic_acceptance_length=2.5)
    with pytest.raises(EngineConfigError, match="whole number of accepted drafts"):
        engine.check_forced(half, forced_acceptance(half.speculative_config), "gpu")
    rates = _gpu_spec("trtllm", synthetic_acceptance_rates=[1.0, 1.0, 0.0])
    with pytest.raises(EngineConfigError, match="not per-position rates"):
        engine.check_forced(rates, forced_acceptance(rates.speculative_config), "gpu")


class _Marker:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _plan(device, markers):
    return plan_for(markers.get, Settings(device=device), {}, {})


def test_collection_refuses_vllm_on_cpu_and_natural_stops_and_takes_llamacpp():
    marker = _Marker(model=MODEL, speculative_config=forced(synthetic_acceptance_length=2.5))
    refused = _plan("cpu", {"specdec": marker})
    assert refused.error.startswith("invalid @pytest.mark.specdec: speculative_config.rejection_sample_method")
    assert "CPU sampling" in refused.error
    llama = _Marker(model=MODEL, engine="llamacpp", speculative_config=forced(synthetic_acceptance_length=2.5))
    assert _plan("cpu", {"specdec": llama}).error is None
    natural = _plan("cpu", {"specdec": llama, "workload": _Marker("code_edit", stop="natural")})
    assert "forced acceptance needs stop='length'" in natural.error
    # A test that needs a GPU is skipped on the CPU build for that reason, not refused for the CPU's sampling.
    gpu_only = _Marker(model=MODEL, speculative_config=forced(synthetic_acceptance_length=2.5), requires_gpu=True)
    assert _plan("cpu", {"specdec": gpu_only}).error is None
    assert _plan(None, {"specdec": marker}).error is None  # no device flag: skipped for that, checked where it runs
    assert "CPU sampling" not in (_plan("gpu", {"specdec": gpu_only}).error or "")


@pytest.mark.parametrize("engine", ["llamacpp", "sglang", "trtllm"])
def test_the_forcing_keys_pass_only_when_they_force_another_sampler_stays_vllms(engine):
    config = (
        {**EAGLE3, "rejection_sample_method": "block"}
        if engine != "llamacpp"
        else {**DRAFT, "rejection_sample_method": "block"}
    )
    with pytest.raises(EngineConfigError, match="speculative_config.rejection_sample_method"):
        engine_named(engine).check(ServerSpec(model="m", speculative_config=config, engine=engine))


def test_a_sweep_point_replaces_the_forced_length_and_is_validated_like_the_marker():
    base = forced(synthetic_acceptance_rates=[0.9, 0.5, 0.2, 0.1])
    swept = forced_at(base, 4.5)
    assert swept["synthetic_acceptance_length"] == 4.5 and "synthetic_acceptance_rates" not in swept
    assert forced_acceptance(swept).length == 4.5 and base["synthetic_acceptance_rates"] == [0.9, 0.5, 0.2, 0.1]
    with pytest.raises(MarkerError, match=r"synthetic_acceptance_length: must be a mean acceptance length in \[1, 5\]"):
        forced_at(base, 5.5)
    # A config that forces nothing: the engine's support was never checked at collection, so no sweep.
    with pytest.raises(MarkerError, match="a forced-acceptance sweep needs a config that forces acceptance"):
        forced_at(DRAFT, 3.0)
