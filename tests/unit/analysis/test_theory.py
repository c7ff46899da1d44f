import dataclasses
import doctest

import pytest

from pytest_specdec.analysis import theory
from pytest_specdec.analysis.theory import (
    Theory,
    alpha_from_acceptance_length,
    cost_per_million_tokens,
    estimate_cost_ratio,
    expected_speedup,
    expected_tokens_per_step,
    model_size_from_dir,
    theory_for,
)


# --- expected_tokens_per_step / expected_speedup ---------------------------------


def test_tokens_per_step_hand_values():
    # alpha=0.8, k=4: 0.8**5 = 0.32768; (1 - 0.32768) / 0.2 = 0.67232 / 0.2 = 3.3616
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    # alpha=0.5, k=1: (1 - 0.25) / 0.5 = 1.5
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)
    # alpha=0: only the target's own token each step
    assert expected_tokens_per_step(0.0, 7) == pytest.approx(1.0)
    # alpha=1 limit: k + 1 = 6
    assert expected_tokens_per_step(1.0, 5) == pytest.approx(6.0)


def test_speedup_hand_values():
    # alpha=0.8, k=4, c=0: 3.3616 / (4*0 + 1) = 3.3616
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx(3.3616)
    # alpha=0.8, k=4, c=0.05: 3.3616 / (4*0.05 + 1) = 3.3616 / 1.2 = 2.801333...
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx(2.8013333333)
    # alpha=0.5, k=1, c=0: (1 - 0.25) / 0.5 / 1 = 1.5
    assert expected_speedup(0.5, 1, 0) == pytest.approx(1.5)
    # alpha=0.6, k=2, c=0.5: (1 - 0.216) / 0.4 = 1.96; / (2*0.5 + 1) = 1.96 / 2 = 0.98 (a slowdown)
    assert expected_speedup(0.6, 2, 0.5) == pytest.approx(0.98)


def test_speedup_alpha_one_limit():
    # alpha=1: (k+1) / (k*c + 1); k=4, c=0.25 -> 5 / 2 = 2.5
    assert expected_speedup(1.0, 4, 0.25) == pytest.approx(2.5)
    # k=3, c=0 -> 4
    assert expected_speedup(1, 3, 0) == pytest.approx(4.0)
    # continuous at the limit: just below 1 is just below k+1
    assert expected_speedup(1 - 1e-12, 4, 0.0) == pytest.approx(5.0)


def test_speedup_increases_with_alpha():
    values = [expected_speedup(a / 10, 4, 0.1) for a in range(11)]
    assert values == sorted(values)
    assert len(set(values)) == len(values)


@pytest.mark.parametrize(
    "alpha,k,c,name",
    [
        (-0.1, 4, 0.0, "alpha"),
        (1.1, 4, 0.0, "alpha"),
        (float("nan"), 4, 0.0, "alpha"),
        ("0.5", 4, 0.0, "alpha"),
        (0.5, 0, 0.0, "k"),
        (0.5, -1, 0.0, "k"),
        (0.5, 2.0, 0.0, "k"),
        (0.5, True, 0.0, "k"),
        (0.5, 4, -0.01, "c"),
        (0.5, 4, float("inf"), "c"),
        (0.5, 4, float("nan"), "c"),
        (0.5, 4, None, "c"),
    ],
)
def test_speedup_rejects_bad_input(alpha, k, c, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        expected_speedup(alpha, k, c)


@pytest.mark.parametrize("alpha,k,name", [(2.0, 3, "alpha"), (0.5, 0, "k")])
def test_tokens_per_step_rejects_bad_input(alpha, k, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        expected_tokens_per_step(alpha, k)


def test_docstring_examples():
    result = doctest.testmod(theory, verbose=False)
    assert result.attempted >= 2
    assert result.failed == 0


# --- alpha_from_acceptance_length ------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.3, 0.5, 0.8, 0.95, 0.999, 1.0])
@pytest.mark.parametrize("k", [1, 2, 4, 7, 16])
def test_alpha_round_trip(alpha, k):
    length = expected_tokens_per_step(alpha, k)
    assert alpha_from_acceptance_length(length, k) == pytest.approx(alpha, abs=1e-6)


def test_alpha_hand_values():
    # k=1: length = 1 + alpha, so length 1.5 -> alpha 0.5
    assert alpha_from_acceptance_length(1.5, 1) == pytest.approx(0.5)
    # k=4: length 3.3616 is alpha 0.8 (see test_tokens_per_step_hand_values)
    assert alpha_from_acceptance_length(3.3616, 4) == pytest.approx(0.8)
    # k=2: 1 + a + a**2 = 1.75 -> a = 0.5
    assert alpha_from_acceptance_length(1.75, 2) == pytest.approx(0.5)


def test_alpha_endpoints():
    for k in (1, 3, 8):
        assert alpha_from_acceptance_length(1.0, k) == 0.0
        assert alpha_from_acceptance_length(k + 1, k) == 1.0


def test_alpha_clamps_float_noise():
    assert alpha_from_acceptance_length(1 - 1e-12, 4) == 0.0
    assert alpha_from_acceptance_length(5 + 1e-9, 4) == 1.0


def test_alpha_is_not_acceptance_rate():
    # alpha=0.8, k=4: accepted per step = 3.3616 - 1 = 2.3616, so
    # acceptance_rate = 2.3616 / 4 = 0.5904, far below alpha = 0.8.
    length = 3.3616
    rate = (length - 1) / 4
    assert rate == pytest.approx(0.5904)
    assert alpha_from_acceptance_length(length, 4) == pytest.approx(0.8)


@pytest.mark.parametrize(
    "length,k,name",
    [
        (0.9, 4, "length"),
        (5.1, 4, "length"),
        (2.5, 1, "length"),
        (float("nan"), 4, "length"),
        (float("inf"), 4, "length"),
        (None, 4, "length"),
        (2.0, 0, "k"),
        (2.0, 1.5, "k"),
    ],
)
def test_alpha_rejects_bad_input(length, k, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        alpha_from_acceptance_length(length, k)


# --- estimate_cost_ratio ---------------------------------------------------------


@pytest.mark.parametrize("method", ["ngram", "suffix", "NGRAM"])
def test_cost_ratio_model_free(method):
    # host-side lookups: free even when sizes are given
    assert estimate_cost_ratio(method, draft_params=1e9, target_params=8e9) == 0.0


def test_cost_ratio_from_params():
    # 0.5B draft for a 7B target: 0.5 / 7 = 0.0714285...
    assert estimate_cost_ratio("draft_model", draft_params=0.5e9, target_params=7e9) == pytest.approx(0.0714285714)
    # params win over layers when both are given: 1 / 8 = 0.125, not 2 / 32
    assert estimate_cost_ratio(
        "draft_model", draft_layers=2, target_layers=32, draft_params=1, target_params=8
    ) == pytest.approx(0.125)


def test_cost_ratio_from_layers():
    # truncated same-width draft: 4 of 32 layers = 0.125
    assert estimate_cost_ratio("draft_model", draft_layers=4, target_layers=32) == pytest.approx(0.125)
    # layers used when params are only half given
    assert estimate_cost_ratio("draft_model", draft_layers=4, target_layers=32, draft_params=1e9) == pytest.approx(
        0.125
    )


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "medusa", "mlp_speculator", "EAGLE3"])
def test_cost_ratio_eagle_family(method):
    # one decoder layer of a 32-layer target: 1 / 32 = 0.03125
    assert estimate_cost_ratio(method, target_layers=32) == pytest.approx(0.03125)


def test_cost_ratio_unknown():
    assert estimate_cost_ratio("eagle3") is None
    assert estimate_cost_ratio("draft_model", target_layers=32) is None
    assert estimate_cost_ratio("draft_model", draft_params=1e9) is None
    assert estimate_cost_ratio("something_new", target_layers=32) is None
    assert estimate_cost_ratio("draft_model", draft_layers=0, target_layers=32) is None


# --- model_size_from_dir ---------------------------------------------------------


def test_model_size_from_dir(tmp_path):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 28, "hidden_size": 1024}')
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 234)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 99999)  # ignored: safetensors exist
    (tmp_path / "tokenizer.json").write_text("{}")
    # 1000 + 234 = 1234 bytes
    assert model_size_from_dir(tmp_path) == (28, 1234)
    assert model_size_from_dir(str(tmp_path)) == (28, 1234)


def test_model_size_falls_back_to_bin(tmp_path):
    (tmp_path / "pytorch_model-00001.bin").write_bytes(b"\0" * 300)
    (tmp_path / "pytorch_model-00002.bin").write_bytes(b"\0" * 200)
    # no config.json -> layers None; 300 + 200 = 500 bytes
    assert model_size_from_dir(tmp_path) == (None, 500)


def test_model_size_config_without_layers(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 1024}')
    assert model_size_from_dir(tmp_path) == (None, 0)


def test_model_size_text_config(tmp_path):
    (tmp_path / "config.json").write_text('{"text_config": {"num_hidden_layers": 40}}')
    assert model_size_from_dir(tmp_path) == (40, 0)


def test_model_size_missing_dir(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        model_size_from_dir(missing)


def test_model_size_feeds_cost_ratio(tmp_path):
    draft, target = tmp_path / "draft", tmp_path / "target"
    for d, layers, size in ((draft, 4, 100), (target, 32, 1600)):
        d.mkdir()
        (d / "config.json").write_text(f'{{"num_hidden_layers": {layers}}}')
        (d / "model.safetensors").write_bytes(b"\0" * size)
    dl, db = model_size_from_dir(draft)
    tl, tb = model_size_from_dir(target)
    # 100 / 1600 = 0.0625 (bytes win over layers 4 / 32 = 0.125)
    assert estimate_cost_ratio("draft_model", dl, tl, db, tb) == pytest.approx(0.0625)


# --- cost_per_million_tokens -----------------------------------------------------


def test_cost_per_million_tokens():
    # 1e6 tokens / 100 tok/s = 10000 s = 2.777.. h; * $3.6/h = $10.0
    assert cost_per_million_tokens(100, 3.6) == pytest.approx(10.0)
    # 1e6 / 2000 = 500 s; 500 / 3600 * 7.2 = 1.0
    assert cost_per_million_tokens(2000.0, 7.2) == pytest.approx(1.0)
    assert cost_per_million_tokens(50, 0) == 0.0


@pytest.mark.parametrize(
    "tok_s,price,name",
    [
        (0, 3.6, "output_tok_per_s"),
        (-5, 3.6, "output_tok_per_s"),
        (float("nan"), 3.6, "output_tok_per_s"),
        (100, -0.01, "usd_per_hour"),
        (100, float("nan"), "usd_per_hour"),
    ],
)
def test_cost_per_million_rejects_bad_input(tok_s, price, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        cost_per_million_tokens(tok_s, price)


# --- Theory / theory_for ---------------------------------------------------------


@pytest.mark.parametrize("length,k", [(None, 4), (float("nan"), 4), (3.0, None), (3.0, float("nan")), (None, None)])
def test_theory_for_missing_inputs(length, k):
    assert theory_for(length, k, 0.05, 2.0) is None


def test_theory_for_full():
    # length 3.3616 with k=4 -> alpha 0.8; c=0.05 -> expected 2.80133 (see above)
    # measured 2.1 -> efficiency 2.1 / 2.801333 = 0.749643
    t = theory_for(3.3616, 4, 0.05, 2.1)
    assert t.alpha == pytest.approx(0.8)
    assert t.k == 4
    assert t.cost_ratio == 0.05
    assert t.expected_speedup == pytest.approx(2.8013333333)
    assert t.measured_speedup == 2.1
    assert t.efficiency == pytest.approx(0.7496431)


def test_theory_for_float_k():
    # metrics may carry k as 4.0
    t = theory_for(1.5, 1.0, 0.0, 1.5)
    assert t.k == 1 and isinstance(t.k, int)
    # alpha 0.5, k 1, c 0 -> 1.5 expected; measured 1.5 -> efficiency 1.0
    assert t.efficiency == pytest.approx(1.0)


@pytest.mark.parametrize("cost", [None, float("nan")])
def test_theory_for_unknown_cost(cost):
    t = theory_for(3.3616, 4, cost, 2.0)
    assert t.alpha == pytest.approx(0.8)
    assert t.cost_ratio is None
    assert t.expected_speedup is None
    assert t.efficiency is None


@pytest.mark.parametrize("measured", [None, float("nan")])
def test_theory_for_unknown_measurement(measured):
    t = theory_for(3.3616, 4, 0.0, measured)
    assert t.expected_speedup == pytest.approx(3.3616)
    assert t.measured_speedup is None
    assert t.efficiency is None


def test_theory_for_bad_length_is_unavailable_not_a_crash():
    # length 7 with k=4 is outside [1, 5]: counters from mixed configs, say
    theory = theory_for(7.0, 4, 0.0, 1.5)
    assert theory.expected_speedup is None and theory.measured_speedup == 1.5
    assert "outside [1, k+1] = [1, 5]" in theory.problem
    assert theory.efficiency is None
    assert theory_for(3.0, 4, None, 1.5).problem == (
        "the draft/target cost ratio of this method is unknown (no draft/target cost ratio was given)"
    )


def test_theory_efficiency_and_frozen():
    t = Theory(alpha=0.5, k=1, cost_ratio=0.0, expected_speedup=1.5, measured_speedup=1.2)
    # 1.2 / 1.5 = 0.8
    assert t.efficiency == pytest.approx(0.8)
    assert Theory(0.5, 1, None, None, 1.2).efficiency is None
    assert Theory(0.5, 1, 0.0, 1.5, None).efficiency is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.alpha = 0.9  # type: ignore[misc]


# --- undrafted steps, break-evens, the shortfall test ------------------------------------------------

from pytest_specdec.analysis.theory import (  # noqa: E402
    break_even_length,
    expected_decode_speedup,
    falls_short,
    position_break_even,
    shortfall_margin,
    speedups_by_draft_length,
)


def test_expected_decode_speedup_counts_undrafted_steps():
    # (D*L + U) / (D*(1 + k*c) + U) with u = U/D: half the steps undrafted, L = 3, c = 0 -> 4 / 2 = 2.0.
    assert expected_decode_speedup(3.0, 3, 0.0, 1.0) == pytest.approx(2.0)
    # No undrafted steps: Leviathan's L / (1 + k*c); 3.3616 / 1.2 = 2.80133 (alpha 0.8, k 4, c 0.05 above).
    assert expected_decode_speedup(3.3616, 4, 0.05) == pytest.approx(expected_speedup(0.8, 4, 0.05))
    # u = 0.5, L = 2.5, k = 2, c = 0.1: (2.5 + 0.5) / (1.2 + 0.5) = 1.76470588.
    assert expected_decode_speedup(2.5, 2, 0.1, 0.5) == pytest.approx(3.0 / 1.7)
    for bad in ((0.9, 3, 0.0, 0.0), (2.0, 3, -0.1, 0.0), (2.0, 3, 0.0, -1.0), (2.0, 0, 0.0, 0.0)):
        with pytest.raises(ValueError):
            expected_decode_speedup(*bad)


@pytest.mark.parametrize("u", [0.0, 0.3, 2.0])
def test_break_even_is_where_the_expected_speedup_crosses_one(u):
    # 1 + 3 * 0.375 = 2.125; at that acceptance length SD neither gains nor loses, whatever u.
    assert break_even_length(3, 0.375) == pytest.approx(2.125)
    assert expected_decode_speedup(2.125, 3, 0.375, u) == pytest.approx(1.0)
    assert expected_decode_speedup(1.9, 3, 0.375, u) < 1 < expected_decode_speedup(2.2, 3, 0.375, u)


def test_speedups_by_draft_length_and_the_position_break_even():
    # Rates 0.7, 0.5, 0.3 at c = 0.375: E = 1.7, 2.2, 2.5 over 1.375, 1.75, 2.125.
    speedups = speedups_by_draft_length([0.7, 0.5, 0.3], 0.375)
    assert speedups == pytest.approx({1: 1.7 / 1.375, 2: 2.2 / 1.75, 3: 2.5 / 2.125})
    assert (round(speedups[3], 3), round(speedups[2], 3)) == (1.176, 1.257)
    # Break-evens c * E_(j-1) / (1 + (j-1) c): 0.375, 0.375 * 1.7 / 1.375 = 0.4636, 0.375 * 2.2 / 1.75 = 0.4714.
    assert [position_break_even([0.7, 0.5, 0.3], j, 0.375) for j in (1, 2, 3)] == pytest.approx(
        [0.375, 0.375 * 1.7 / 1.375, 0.375 * 2.2 / 1.75]
    )


def test_a_position_pays_exactly_when_its_rate_beats_its_break_even():
    import random

    rng = random.Random(19)
    for _ in range(500):
        rates = sorted((rng.random() for _ in range(5)), reverse=True)
        c, u = rng.choice([0.0, 0.05, 0.375, 1.2]), rng.choice([0.0, 0.4, 3.0])
        speedups = speedups_by_draft_length(rates, c, u)
        for j in range(2, 6):
            gain = speedups[j] - speedups[j - 1]
            if abs(gain) > 1e-12:
                assert (gain > 0) == (rates[j - 1] > position_break_even(rates, j, c, u))


def test_shortfall_margin_from_the_repeats_or_the_default_tolerance():
    # Repeats 0.9, 1.0, 1.1: sample sd 0.1, median 1.0 -> 2.5 * 10% = 25%.
    margin, source = shortfall_margin([0.9, 1.0, 1.1, float("nan")])
    assert margin == pytest.approx(0.25) and source == "2.5 sd of 3 repeats (10.0% each)"
    assert shortfall_margin([1.5]) == (0.15, "the default speedup tolerance (one repeat: noise unknown)")
    assert falls_short(0.74, 1.0, 0.25) and not falls_short(0.75, 1.0, 0.25)
    assert falls_short(float("nan"), 1.0, 0.25) is None and falls_short(0.5, None, 0.25) is None
