"""Forced acceptance on llama.cpp's real server: honoured half-way between 1 and k+1 and at every length of a
sweep, output equivalence not applied, the sweep's reference measured once, and a build without the setting
refused by name at collection (the xllamacpp 2026.4 the setup installs beside the current one).

The README's main job measures both forced-acceptance examples (examples/cpu/test_forced_acceptance.py, a draft
of the bundled model's first 2 layers, k=4); these tests read those very runs (conftest.py's `main_job`)
rather than measure the same configuration on the same traffic again.
"""

import re
from pathlib import Path

import pytest

from pytest_specdec.engines import engine_named
from pytest_specdec.engines.base import EngineConfigError
from pytest_specdec.engines.forced_acceptance import forced_acceptance
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.measure.forced_sweep import AcceptanceSweep
from pytest_specdec.verdict.assertions import forced_range

ROOT = Path(__file__).resolve().parents[2]
OLDER_BUILD = ROOT / ".venv-xllamacpp-2026.4" / "bin" / "python"
MODEL = "specdec:smollm2-135m"
K = 4
# Half-way between 1 (nothing accepted) and k+1 (every draft accepted), as the examples force it.
FORCED = {
    "method": "draft_model",
    "model": f"{MODEL}@layers=2",
    "num_speculative_tokens": K,
    "rejection_sample_method": "synthetic",
    "synthetic_acceptance_length": (1 + K + 1) / 2,
}
SWEPT = [2.0, 3.0, 4.0, 5.0]


def honoured(result) -> tuple[float, float]:
    forced = result.forced
    low, high = forced_range(result, forced)  # llama.cpp's schedule unread: the widest spread of its mean
    print(
        f"forced {forced.length:.2f}: measured {result.acceptance_length:.3f} over {result.counters.num_drafts:.0f} "
        f"drafting steps (honoured {low:.3f}-{high:.3f}), speedup {result.speedup():.3f}x"
    )
    assert result.spec.engine == "llamacpp" and low <= result.acceptance_length <= high
    return low, high


def test_llamacpp_honours_a_forced_acceptance_half_way(main_job):
    result = main_job.result("test_llamacpp_machinery_at_half_acceptance")
    assert result.spec.speculative_config == FORCED and result.forced.length == 3.0
    honoured(result)
    # A draft of 2 layers of 30 accepts far fewer of its own: what was measured is the forced length.
    assert result.acceptance_length > 2.5
    with pytest.raises(AssertionError, match="not applied at forced acceptance 3.00"):
        result.assert_outputs_equivalent()


def test_a_sweep_is_honoured_at_every_length_on_one_reference(main_job):
    results = main_job.results("test_llamacpp_acceptance_sweep")
    assert [result.forced.length for result in results] == SWEPT
    for result in results:
        assert {k: v for k, v in result.spec.speculative_config.items() if k != "synthetic_acceptance_length"} == {
            k: v for k, v in FORCED.items() if k != "synthetic_acceptance_length"
        }
        honoured(result)
        with pytest.raises(AssertionError, match=f"not applied at forced acceptance {result.forced.length:.2f}"):
            result.assert_outputs_equivalent()

    # The reference measured once for all of them: the same runs behind every length's speedup, but for a
    # length whose comparison was flagged and measured again, both sides on servers started anew
    # (`remeasured`: its reference runs are that comparison's own).
    def reference(result):
        return [(run.repeat, run.metrics.output_throughput, run.metrics.duration_s) for run in result.reference_runs]

    shared = [result for result in results if not result.remeasured]
    assert len(shared) >= 2, [(result.forced.length, result.remeasured) for result in results]
    assert all(reference(result) == reference(shared[0]) for result in shared[1:])
    # One SD server start per length and result, and a start more only for what the result records: a
    # comparison flagged cold or drifting and measured again on servers started anew (`remeasured`), and each
    # batch of draws sent again for an undecided check (`timing_runs`; a llama.cpp server is stopped, never
    # parked, so a batch may need its server started again), and each batch of new draws (`new_draw_runs`: SD
    # started again after the reference's new draws).  The half-way example forces 3.0 as well.
    half_way = main_job.result("test_llamacpp_machinery_at_half_acceptance")
    for length in SWEPT:
        forced_here = [result for result in (*results, half_way) if result.forced.length == length]
        most = sum(
            1
            + bool(result.remeasured)
            + len(result.timing_runs) // len(result.speculative_runs)
            + len(result.new_draw_runs) // len(result.speculative_runs)
            for result in forced_here
        )
        starts = re.findall(rf"^\[specdec\] starting .*synthetic_acceptance_length={length}\]", main_job.out, re.M)
        assert len(forced_here) <= len(starts) <= most, (length, most, starts)
    # The curve, as the row has it: the speedup rises with the accepted length, and a drafted step costs
    # more than a plain one (it drafts k tokens and verifies k+1 positions).
    curve = AcceptanceSweep(results).curve()
    print(curve.describe())
    assert curve.points[-1].speedup > curve.points[0].speedup
    assert curve.step_cost is not None and curve.step_cost > 1.0
    assert results[0].forced_sweep is not None and len(results[0].forced_sweep.points) == len(SWEPT)


def test_a_llamacpp_build_without_forced_acceptance_is_refused_at_collection():
    assert OLDER_BUILD.is_file(), f"scripts/setup installs xllamacpp 2026.4 at {OLDER_BUILD}"
    spec = ServerSpec(MODEL, FORCED, engine="llamacpp", build=str(OLDER_BUILD))
    with pytest.raises(EngineConfigError, match=r"cannot force acceptance .*xllamacpp in 2026.10"):
        engine_named("llamacpp").check_forced(spec, forced_acceptance(FORCED), "cpu")
    engine_named("llamacpp").check_forced(spec.on_build(None), forced_acceptance(FORCED), "cpu")
