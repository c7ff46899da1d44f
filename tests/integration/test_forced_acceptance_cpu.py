"""Forced acceptance on llama.cpp's real server: honoured half-way between 1 and k+1, output equivalence not
applied, and a build without the setting refused by name at collection (the xllamacpp 2026.4 the setup
installs beside the current one)."""

from pathlib import Path

import pytest

from pytest_specdec.engines import engine_named
from pytest_specdec.engines.base import EngineConfigError
from pytest_specdec.engines.forced_acceptance import forced_acceptance
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.verdict.assertions import forced_range

ROOT = Path(__file__).resolve().parents[2]
OLDER_BUILD = ROOT / ".venv-xllamacpp-2026.4" / "bin" / "python"
MODEL = "specdec:smollm2-135m"
K = 4
# Half-way between 1 (nothing accepted) and k+1 (every draft accepted).
FORCED = {
    "method": "draft_model",
    "model": f"{MODEL}@layers=8",
    "num_speculative_tokens": K,
    "rejection_sample_method": "synthetic",
    "synthetic_acceptance_length": (1 + K + 1) / 2,
}


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=FORCED)
@pytest.mark.workload("random_s", input_len=64, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_llamacpp_honours_a_forced_acceptance_half_way(specdec):
    result = specdec.run()  # fails here, by name, when the server did not honour it
    forced = result.forced
    steps = result.counters.num_drafts
    low, high = forced_range(result, forced)  # llama.cpp's schedule unread: the widest spread of its mean
    print(
        f"forced {forced.length:.2f}: measured {result.acceptance_length:.3f} over {steps:.0f} drafting steps "
        f"(honoured {low:.3f}-{high:.3f}), speedup {result.speedup():.3f}x"
    )
    assert forced.length == 3.0 and low <= result.acceptance_length <= high
    # A draft of 8 layers of 30 accepts far fewer of its own: what was measured is the forced length.
    assert result.acceptance_length > 2.5
    with pytest.raises(AssertionError, match="not applied at forced acceptance 3.00"):
        result.assert_outputs_equivalent()


def test_a_llamacpp_build_without_forced_acceptance_is_refused_at_collection():
    assert OLDER_BUILD.is_file(), f"scripts/setup installs xllamacpp 2026.4 at {OLDER_BUILD}"
    spec = ServerSpec(MODEL, FORCED, engine="llamacpp", build=str(OLDER_BUILD))
    with pytest.raises(EngineConfigError, match=r"cannot force acceptance .*xllamacpp in 2026.10"):
        engine_named("llamacpp").check_forced(spec, forced_acceptance(FORCED), "cpu")
    engine_named("llamacpp").check_forced(spec.on_build(None), forced_acceptance(FORCED), "cpu")
