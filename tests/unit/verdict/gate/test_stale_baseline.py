"""verdict.gate.staleness through the real gate: a baseline that measured other traffic is stale, named by field,
never a regression and never a pass; --specdec-strict fails it; update mode records it again."""

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate
from pytest_specdec.verdict.gate.staleness import stale_fields
from tests.support.fingerprints import FINGERPRINT

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
CODE_EDIT = {"name": "code_edit", "input_len": 192, "output_len": 64}
PATTERN = {"name": "throughput_low", "num_prompts": 4}


class Rec:
    def __init__(self, index, tpot_s):
        self.index, self.prompt_len, self.output_tokens = index, 16, 8
        self.ttft, self.itl, self.latency = 0.05, [tpot_s] * 7, 0.05 + tpot_s * 7
        self.token_ids, self.top_logprobs, self.success = list(range(8)), None, True
        self.text = "x"


def result(workload=CODE_EDIT, pattern=PATTERN, seed=0, sd_tpot=0.02):
    def run(spec, tpot, repeat, counters):
        records = [Rec(i, tpot) for i in range(4)]
        return Run(spec, repeat, summarize(records, duration_s=1.0), records, counters, ["vllm"], 0.0)

    counters = SpecDecodeCounters(100, 400, 200, {0: 90, 1: 60, 2: 40, 3: 10})
    reference = [run(SPEC.reference(), 0.03, r, None) for r in range(2)]
    speculative = [run(SPEC, sd_tpot, r, counters) for r in range(2)]
    outputs = [compare_outputs(a.records, b.records) for a, b in zip(reference, speculative)]
    return SpecDecResult(
        SPEC,
        dict(workload),
        dict(pattern),
        reference,
        speculative,
        outputs[0],
        {},
        outputs_per_repeat=outputs,
        seed=seed,
    )


def recorded(tmp_path):
    session = BaselineSession(tmp_path, update=True, fingerprint=FINGERPRINT)
    RegressionGate(session, "t.py::test").check(result(), metrics=["acceptance_rate", "output_throughput"])
    session.flush()
    return tmp_path


def gate(base_dir, strict=False, update=False):
    session = BaselineSession(base_dir, update=update, fingerprint=FINGERPRINT, strict=strict)
    return RegressionGate(session, "t.py::test"), session


@pytest.mark.parametrize(
    "changed, field",
    [
        (dict(workload={**CODE_EDIT, "name": "sharegpt"}), 'workload.name: recorded "code_edit", now "sharegpt"'),
        (dict(workload={**CODE_EDIT, "output_len": 128}), "workload.output_len: recorded 64, now 128"),
        (dict(pattern={**PATTERN, "num_prompts": 8}), "access pattern.num_prompts: recorded 4, now 8"),
        (dict(pattern={**PATTERN, "name": "poisson"}), 'access pattern.name: recorded "throughput_low", now "poisson"'),
        (dict(seed=7), "draws (their seeds)"),
    ],
)
def test_a_baseline_of_other_traffic_is_stale_by_field_neither_failed_nor_passed(tmp_path, changed, field):
    check, _ = gate(recorded(tmp_path))
    # SD 2x slower than when recorded: on the same traffic this would fail; on other traffic it is not compared
    check.check(result(**changed, sd_tpot=0.04), metrics=["acceptance_rate", "output_throughput"])
    assert check.outcome == "stale" and field in check.last_report
    assert "--specdec-update-baselines" in check.last_report


def test_strict_fails_a_stale_baseline(tmp_path):
    check, _ = gate(recorded(tmp_path), strict=True)
    with pytest.raises(AssertionError, match=r"(?s)stale baseline.*workload.output_len.*--specdec-strict"):
        check.check(result(workload={**CODE_EDIT, "output_len": 128}), metrics=["acceptance_rate"])


def test_update_mode_records_a_stale_baseline_again(tmp_path):
    check, session = gate(recorded(tmp_path), update=True)
    check.check(result(workload={**CODE_EDIT, "output_len": 128}), metrics=["acceptance_rate"])
    assert check.outcome == "recorded" and "t.py::test" in session.pending
    assert check.not_compared == {}  # recorded again: nothing left uncompared


@pytest.mark.parametrize("update", [False, True])
def test_a_stale_row_reaches_the_terminal_and_the_summary(tmp_path, update):
    # The report reads the gate's comparison and what it left uncompared: a stale baseline names both.
    from pytest_specdec.report.row.rows import row_for
    from pytest_specdec.report.tables import markdown_summary, summary_sections

    check, _ = gate(recorded(tmp_path), update=update)
    run = result(workload={**CODE_EDIT, "output_len": 128})
    check.check(run, metrics=["acceptance_rate"])
    row = row_for(
        "t.py::test",
        SPEC,
        run.workload,
        run.pattern,
        outcome="passed",
        result=run,
        regression=check.outcome,
        regression_comparison=check.comparison,
        regression_not_compared=check.not_compared,
    )
    text = "\n".join(line for _, lines in summary_sections([row], None, [], [], update, []) for line in lines)
    summary = markdown_summary([row])
    if update:
        assert "partly or not compared" not in text and row["regression"] == "recorded"
    else:
        assert "t.py::test [stale]: stale: workload.output_len: recorded 64, now 128" in text
        assert "workload.output_len" in summary


def test_the_same_traffic_is_compared_and_a_field_only_one_side_holds_is_not_a_difference(tmp_path):
    check, _ = gate(recorded(tmp_path))
    check.check(result(workload={**CODE_EDIT, "new_field": 1}), metrics=["acceptance_rate", "output_throughput"])
    assert check.outcome == "passed"
    three = result().repeat_seeds() + [12345]  # this run took 2 of the baseline's 3 draws: still its traffic
    assert stale_fields({"workload": CODE_EDIT, "pattern": PATTERN, "repeat_seeds": three}, result()) == []
