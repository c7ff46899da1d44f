"""Inner sessions of the gate across machines: a case measured with per-repeat wobble, and an engine's
fingerprint hook."""

from tests.support.inner_results import MARKS

NOISE = (1.0, 1.02, 0.99)  # per-repeat wobble, the same on both sides so pairs stay paired


CASE = (
    MARKS
    + f"""
import os

NOISE = {NOISE!r}

def test_gated(make_result):
    ref_speed = float(os.environ.get("REF_SPEED", "1"))   # the reference's own tok/s, x baseline
    speedup = float(os.environ.get("SPEEDUP", "2.0"))
    sd_tpot = float(os.environ.get("SD_TPOT", "25.0"))
    accepted = float(os.environ.get("ACCEPTED_SCALE", "1"))
    metrics = os.environ.get("METRICS")
    allow = os.environ.get("ALLOW")
    ref = tuple(100.0 * ref_speed * n for n in NOISE)
    result = make_result(ref=ref, sd=tuple(r * speedup for r in ref),
                         ref_tpot=tuple(50.0 / ref_speed / n for n in NOISE),
                         sd_tpot=tuple(sd_tpot / n for n in NOISE),
                         accepted=tuple(240.0 * accepted for n in NOISE),
                         sd_ttft=0.05 * float(os.environ.get("SD_TTFT_SCALE", "1")))
    if os.environ.get("FLAGGED"):  # as measure.fairness says of a side still cold after measuring again
        result.unfair_speedup = lambda: "not compared: measured again and still flagged: ttft_at_concurrency_1"
        result.earlier_runs = ((result.reference_runs, result.speculative_runs),)  # the first measurement's
    if os.environ.get("NO_COUNTERS"):  # a server that reported no SD counters this time
        for run in result.speculative_runs:
            run.counters = None
    result.assert_no_regression(metrics=metrics.split(",") if metrics else None,
                                allow_unavailable=allow.split(",") if allow else ())
"""
)


ENGINE_HOOK = """
import os

def pytest_specdec_fingerprint(config, fingerprint):
    return {**fingerprint, "engine_version": os.environ.get("ENGINE_VERSION", "0.31.0")}
"""
