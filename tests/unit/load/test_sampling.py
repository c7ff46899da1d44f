"""Sampling settings: validated in the workload marker, sent to both sides in each engine's own words,
in the fingerprint only when they sample, and outputs sampled at temperature never compared token by token."""

from pathlib import Path

import pytest

from pytest_specdec.engines import engine_named
from pytest_specdec.engines.base import EngineConfigError
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.engines.vllm_bench import bench_serve_flags
from pytest_specdec.load.client import RequestOptions, completion_body
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.sampling import GREEDY, Sampling, SamplingError, request_seed
from pytest_specdec.load.workloads import WorkloadError, resolve_workload
from pytest_specdec.analysis.outputs import compare_outputs

from tests.support.fault_server import trtllm_refusal  # noqa: E402 - the strict fake's copy of trtllm-serve's validation


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"temperature": 0.8, "top_p": 0.0}, "top_p"),
        ({"temperature": 0.8, "top_p": 1.5}, "top_p"),
        ({"temperature": 0.8, "top_k": 0}, "top_k"),
        ({"temperature": 0.8, "top_k": 2.5}, "top_k"),
        ({"temperature": 0.8, "seed": "fixed"}, "seed"),
        ({"top_p": 0.9}, "top_p and top_k apply only when sampling"),
    ],
)
def test_bad_sampling_settings_are_refused_naming_the_field(fields, named):
    with pytest.raises(SamplingError, match=named):
        Sampling(**fields)
    with pytest.raises(WorkloadError, match=f"workload 'code_edit': .*{named}"):
        resolve_workload("code_edit", {"input_len": 64, "output_len": 8, **fields})


def test_a_greedy_workload_describes_itself_as_before_and_a_sampled_one_says_how_it_samples():
    greedy = resolve_workload("code_edit", {"input_len": 64, "output_len": 8})
    assert greedy.sampling == GREEDY and "sampling" not in greedy.describe()  # old baselines still match
    sampled = resolve_workload("code_edit", {"input_len": 64, "output_len": 8, "temperature": 0.8, "top_p": 0.95})
    assert sampled.describe()["sampling"] == {"temperature": 0.8, "top_p": 0.95, "top_k": None, "seed": "per_request"}
    assert sampled.describe() != greedy.describe()  # and so the fingerprint and the reference's key differ


def test_stop_natural_lets_requests_end_at_the_end_of_sequence():
    natural = resolve_workload("code_edit", {"input_len": 64, "output_len": 8, "stop": "natural"})
    assert natural.ignore_eos is False and natural.stop == "natural"
    assert resolve_workload("code_edit", {"input_len": 64, "output_len": 8}).stop == "length"
    with pytest.raises(WorkloadError, match="'stop' must be one of length, natural"):
        resolve_workload("code_edit", {"input_len": 64, "output_len": 8, "stop": "eos"})


def test_a_greedy_body_is_the_body_it_always_was():
    greedy = completion_body("m", "hi", 8, RequestOptions(sampling=GREEDY, run_seed=3), index=5)
    assert greedy["temperature"] == 0.0 and not {"top_p", "top_k", "seed"} & set(greedy)
    assert greedy == completion_body("m", "hi", 8, RequestOptions())


def test_a_sampled_body_carries_each_requests_own_seed():
    sampling = Sampling(temperature=0.8, top_p=0.9, top_k=20)
    bodies = [
        completion_body("m", "hi", 8, RequestOptions(sampling=sampling, run_seed=s), index=i)
        for s in (0, 1)
        for i in range(3)
    ]
    assert all((b["temperature"], b["top_p"], b["top_k"]) == (0.8, 0.9, 20) for b in bodies)
    assert len({b["seed"] for b in bodies}) == 6 and bodies[1]["seed"] == request_seed(0, 1)
    unseeded = completion_body("m", "hi", 8, RequestOptions(sampling=Sampling(temperature=0.8, seed="none")))
    assert "seed" not in unseeded and "top_p" not in unseeded  # top_p 1.0: the engine's default, not sent


def test_every_engine_is_sent_the_sampling_settings_in_its_own_words():
    body = completion_body("m", "hi", 8, RequestOptions(sampling=Sampling(temperature=0.8, top_p=0.9, top_k=20)))
    assert trtllm_refusal(engine_named("trtllm").completion_payload(dict(body))) is None
    for name in ("vllm", "llamacpp"):
        sent = engine_named(name).completion_payload(dict(body))
        assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["seed"]) == (0.8, 0.9, 20, body["seed"])
    sglang = engine_named("sglang").completion_payload(dict(body))["sampling_params"]
    assert sglang == {
        "max_new_tokens": 8,
        "temperature": 0.8,
        "ignore_eos": True,
        "top_p": 0.9,
        "top_k": 20,
        "sampling_seed": body["seed"],
    }


def test_bench_serve_reruns_at_the_workloads_temperature():
    pattern = AccessPattern("p", num_prompts=2)
    flags = bench_serve_flags("u", "m", "t", Path("f"), pattern, sampling=Sampling(temperature=0.8, top_p=0.9))
    assert flags[flags.index("--temperature") + 1] == "0.8" and flags[flags.index("--top-p") + 1] == "0.9"
    greedy = bench_serve_flags("u", "m", "t", Path("f"), pattern)
    assert greedy[greedy.index("--temperature") + 1] == "0" and "--top-p" not in greedy


def test_sampled_outputs_are_not_compared_token_by_token():
    from pytest_specdec.load.streaming import RequestRecord

    def record(ids):
        return RequestRecord(
            index=0,
            prompt_len=4,
            output_tokens=len(ids),
            start_time=0.0,
            ttft=0.0,
            itl=[],
            latency=0.0,
            token_ids=ids,
            text="x",
            top_logprobs=None,
            success=True,
        )

    compared = compare_outputs([record([1, 2])], [record([1, 3])], sampling=Sampling(temperature=0.8))
    assert compared.basis is None and "assert_same_distribution" in compared.problem
    assert compare_outputs([record([1, 2])], [record([1, 2])], sampling=GREEDY).match_rate == 1.0


@pytest.mark.parametrize("engine", ["llamacpp", "sglang", "trtllm"])
def test_rejection_sample_method_is_vllms_and_other_engines_refuse_it_by_name(engine):
    # The n-gram sizes each engine's matcher accepts (SGLang takes none).
    sizes = {"trtllm": {"prompt_lookup_min": 1, "prompt_lookup_max": 3}, "sglang": {}}.get(
        engine, {"prompt_lookup_min": 3, "prompt_lookup_max": 3}
    )
    config = {"method": "ngram", "num_speculative_tokens": 4, **sizes, "rejection_sample_method": "block"}
    spec = ServerSpec(model="m", speculative_config=config, engine=engine)
    with pytest.raises(EngineConfigError, match="speculative_config.rejection_sample_method"):
        engine_named(engine).check(spec)
    engine_named("vllm").check(ServerSpec(model="m", speculative_config=config))  # vLLM's own key: passed on


def _sampled_result(workload, outputs=None):
    from pytest_specdec.analysis.outputs import OutputComparison
    from pytest_specdec.measure.result import SpecDecResult

    spec = ServerSpec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    return SpecDecResult(spec, workload, {"name": "p"}, [], [], outputs or OutputComparison([]), {})


def test_assert_same_distribution_draws_the_planned_samples_and_fails_on_a_rejecting_table():
    from pytest_specdec.verdict.distribution import same_distribution

    result = _sampled_result({"name": "w", "sampling": {"temperature": 0.8}})
    with pytest.raises(RuntimeError, match="result.sampler"):
        result.assert_same_distribution()
    plans = []

    def sampler(plan):  # 2 prompts x 1 position; the SD side shifted or not
        plans.append(plan)
        shift = len(plans) == 2
        reference = [[("a",)] * 60 + [("b",)] * 40] * plan.prompts
        sd = [[("a",)] * (30 if shift else 60) + [("b",)] * (70 if shift else 40)] * plan.prompts
        return same_distribution(reference, sd, samples_per_side=plan.samples)

    result.sampler = sampler
    assert result.assert_same_distribution(prompts=2, tokens=1, effect=0.5) is result
    assert result.distribution.passed and plans[0].samples == samples_needed_for(0.5, 2)
    with pytest.raises(AssertionError, match="differ"):
        result.assert_same_distribution(prompts=2, tokens=1, samples=100)
    assert plans[1].samples == 100 and not result.distribution.passed


def samples_needed_for(effect, tables):
    from pytest_specdec.verdict.distribution import samples_needed

    return samples_needed(effect, 7, 0.01 / tables, 0.9)


def test_a_greedy_workload_defers_to_the_token_match_check():
    result = _sampled_result({"name": "w"})
    result.sampler = lambda plan: pytest.fail("a greedy workload must not draw samples")
    deferred = []
    result.assert_outputs_equivalent = lambda min_match: deferred.append(min_match) or result
    assert result.assert_same_distribution(min_match=0.9) is result and deferred == [0.9]


def test_rows_say_how_requests_sampled_and_stopped_and_the_report_shows_it():
    from pytest_specdec.report.row.sampling import sampling_cells, sampling_markdown

    result = _sampled_result({"name": "w", "ignore_eos": False, "sampling": {"temperature": 0.8}})
    cells = sampling_cells(result)
    assert cells["stop"] == "natural" and cells["sampling"] == {"temperature": 0.8}
    assert cells["output_lengths"] == {"reference": None, "speculative": None} and cells["distribution"] is None
    lines = sampling_markdown([{"test": "t", **cells}], str)
    assert any("temperature 0.8" in line and "natural" in line and "not tested" in line for line in lines)
    assert sampling_markdown([{"test": "t", **sampling_cells(_sampled_result({"name": "w"}))}], str) == []


def test_a_result_with_a_sampler_pickles_without_it():
    import pickle

    result = _sampled_result({"name": "w", "sampling": {"temperature": 0.8}})
    result.sampler = lambda plan: None  # bound to live servers, as `SpecDecTest.run` binds it
    restored = pickle.loads(pickle.dumps(result))
    assert restored.sampler is None and restored.workload == result.workload and result.sampler is not None
