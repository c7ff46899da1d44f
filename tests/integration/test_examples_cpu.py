"""The README's main job on real CPU servers: examples/cpu against its stored baselines.

The main job runs once per suite (conftest.py's `main_job`: the same pytest
command, with CI=true, as in a CI log); this test checks what a user is promised: every example passes against the
baselines stored in baselines/, the report directory holds a valid
results.json, CSV, Markdown summary and plots, n-gram and suffix accept on
code_edit and suffix beats the reference there, and the progress is one line per measured run.
"""

import re

from pytest_specdec.report.files import load_report

PNG = b"\x89PNG\r\n\x1a\n"


def test_examples_pass_against_stored_baselines_and_leave_a_report(main_job):
    out, report = main_job.out, main_job.report
    print(out[-6000:])
    assert main_job.returncode == 0, main_job.err[-3000:]
    # A whole pytest run stops every server it started (vLLM's process trees and llama.cpp's).
    assert main_job.left_running == [], main_job.left_running
    ready = re.search(r"\[no SD\] --enforce-eager: ready in [\d.]+ s; log ", out)
    assert "specdec servers" in out and ready, out[-3000:]
    assert "13 passed" in out

    rows = {row["test"].split("::")[1]: row for row in load_report(report)["results"]}
    assert len(rows) == 13  # the forced-acceptance sweep has a row a length, under one test name
    for name in ("test_ngram_on_code_edits", "test_suffix_pays_on_code_edits"):
        assert rows[name]["workload"] == "code_edit" and rows[name]["acceptance_rate"] > 0.25, rows[name]
        # Speedups are gated only on the recording machine: elsewhere the check compared acceptance alone, and
        # says so ("partly compared"), never "passed".
        # On the recording machine the speedups are gated too, decided at the gate's stated rates against the
        # drift between sessions: passed, or undecided (named at the session's end, not a pass), never failed.
        same = rows[name]["regression_comparison"].startswith("same machine")
        assert rows[name]["regression"] in (("passed", "undecided") if same else ("partly compared",)), rows[name][
            "regression_comparison"
        ]
        assert "speedup_output_throughput" in rows[name]["regression_not_compared"] or same
        assert rows[name]["repeats"] == 2  # --specdec-repeats auto: two draws a side, then sends again
        # Per-request figures from the server's own per-step arrays, the oracle beside measured and expected.
        assert rows[name]["per_step_source"] == "server" and rows[name]["request_acceptance_length_p50"] > 1.0
        assert rows[name]["oracle_speedup"] >= 0.95 * rows[name]["speedup_output_throughput"], rows[name]
    assert rows["test_ngram_on_code_edits"]["best_k"] in (3, 4)
    # Energy per token where the hardware counts it, else the reason (these VMs expose no RAPL counters).
    energy = rows["test_ngram_on_code_edits"]["energy"]
    assert energy["ratio"] is not None or energy["unavailable"].startswith("RAPL: "), energy
    # Suffix decoding paid on code edits on every box measured (1.61-1.78x on three, above its 1.15x floor
    # in CI); n-gram's speedup there is the machine's (1.04x to 1.42x), so only suffix must beat the reference.
    assert rows["test_suffix_pays_on_code_edits"]["speedup_output_throughput"] > 1.0
    assert rows["test_a_poor_draft_makes_sd_slower"]["speedup_output_throughput"] < 1.0
    assert rows["test_a_poor_draft_makes_sd_slower"]["diagnosis"], "SD lost: the report must say why, with figures"
    # What each server was doing, read every 0.5 s during every run: vLLM's KV cache usage on both sides of
    # the poor draft (the draft's weights and KV take cache from the target), llama.cpp's requests in flight.
    poor = rows["test_a_poor_draft_makes_sd_slower"]["server_series"]
    for side in ("reference", "speculative"):
        assert poor[side]["samples"] >= 3 and 0 < poor[side]["kv_cache_usage_peak"] < 1, poor[side]
        assert poor[side]["preemptions"] == 0 and poor[side]["first_run"]["values"]["kv_cache_usage"], poor[side]
    llama = rows["test_llamacpp_ngram_on_code_edits"]["server_series"]["speculative"]
    assert llama["running_peak"] == 1 and llama["kv_cache_usage_peak"] is None, llama
    capacity = rows["test_ngram_slo_capacity_on_code_edits"]
    assert capacity["capacity_ratio"] >= 0.5 and capacity["capacity"]["reference"]["status"] == "found"
    summary = (report / "summary.md").read_text()
    assert "| test_ngram_on_code_edits |" in summary and "![speedup_heatmap](speedup_heatmap.png)" in summary
    assert "**Inside the acceptance numbers**" in summary and "**Why SD did not pay**" in summary
    assert "**SLO capacity**" in summary and "= specdec SLO capacity =" in out
    # One row per test, one per level of the dynamic-k sweep (concurrency 1, 2, 3) and one per length of the
    # forced-acceptance sweep (2, 3, 4, 5 tokens a step): 18 rows and the header.
    assert (report / "results.csv").read_text().count("\n") == 19
    sweep = [
        row
        for row in load_report(report)["results"]
        if row["test"].endswith("::test_throughput_holds_across_the_k_switch")
    ]
    assert [row["max_concurrency"] for row in sweep] == [1, 2, 3] and {row["outcome"] for row in sweep} == {"passed"}
    # Every concurrency sweep's rows carry both throughput-interactivity frontiers (analysis.frontier): a point per
    # level and side, from each draw's median TPOT and throughput, drawn and tabled in report.html.
    frontier = sweep[0]["frontier"]
    assert all(row["frontier"] == frontier for row in sweep) and frontier["draws"] == 2
    for side in ("reference", "speculative"):
        points = frontier[side]["points"]
        assert [p["concurrency"] for p in points] == [1, 2, 3] and any(p["on_frontier"] for p in points), points
        assert all(p["per_user"] > 0 and p["per_gpu"] > 0 and len(p["per_gpu_draws"]) == 2 for p in points), points
    assert "<h2>Throughput-interactivity frontier</h2>" in (report / "report.html").read_text()
    # The traffic examples: a result per category and per turn, in the summary and as plots.
    categories = rows["test_ngram_acceptance_by_category"]["groups"]["category"]
    assert len(categories["figures"]) == 6 and categories["difference"]
    turns = rows["test_ngram_in_three_turn_conversations"]["groups"]["turn"]["figures"]
    # Four conversations of three turns, on two draws: 8 requests a turn.
    assert [t["name"] for t in turns] == ["turn 1", "turn 2", "turn 3"] and all(t["requests"] == 8 for t in turns)
    assert rows["test_ngram_over_shared_prefixes_with_prefix_caching"]["workload"] == "shared_prefix"
    assert "**Per category**" in summary and "**Per turn**" in summary and "= specdec per category and turn =" in out
    # llama.cpp's own figures, beside vLLM's in one report: its counters, its version, its baseline.
    ngram = rows["test_llamacpp_ngram_on_code_edits"]
    assert ngram["engine"] == "llamacpp" and ngram["engine_version"] and ngram["regression"] == "passed"
    assert ngram["acceptance_rate"] > 0.2 and ngram["match_basis"] == "token ids"
    poor_llamacpp = rows["test_llamacpp_poor_draft_makes_sd_slower"]
    assert (poor_llamacpp["speedup_output_throughput"] or 1.0) < 1.0, poor_llamacpp["unavailable"]
    assert rows["test_ngram_on_code_edits"]["engine_version"] == "0.32.0"
    # The engine's machinery at a forced acceptance (examples/cpu/test_forced_acceptance.py): its outputs are
    # not the target's, so equivalence is not applied and the row says why; the sweep's rows carry its curve.
    half = rows["test_llamacpp_machinery_at_half_acceptance"]
    assert "at forced acceptance 3.00" in half["config"] and half["unavailable"]["match_rate"].startswith(
        "not applied at forced acceptance 3.00: the SD server accepts drafts whether or not they match"
    ), half["unavailable"]
    swept = [row for row in load_report(report)["results"] if row["test"].endswith("::test_llamacpp_acceptance_sweep")]
    assert [row["speculative_config"]["synthetic_acceptance_length"] for row in swept] == [2.0, 3.0, 4.0, 5.0]
    curve = swept[0]["forced_sweep"]
    assert all(row["forced_sweep"] == curve for row in swept) and len(curve["points"]) == 4, curve
    assert curve["step_cost"] > 1 and curve["describe"] in out, curve["describe"]
    assert "<h2>Forced acceptance</h2>" in (report / "report.html").read_text()
    for plot in (
        "speedup_heatmap.png",
        "acceptance_per_position.png",
        "request_acceptance_length.png",
        "tokens_per_step.png",
        "slo_capacity.png",
        "per_category.png",
        "per_turn.png",
        "server_series.png",
        "forced_acceptance_sweep.png",
        "throughput_interactivity_frontier.png",
    ):
        data = (report / plot).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, plot

    # In a CI log: one line per measured run of 4 requests, no live line: 2 draws x 16 runs, and a line per
    # draw an undecided check sent again on SD's server (timing only; counted apart). On vLLM,
    # the references of three traffics (the capacity search's unloaded run is the third: its relative
    # SLO resolves against it) and three SD runs, and the dynamic-k sweep's three levels on SD's side and
    # two more on the reference's (its first level, one request at a time, is the capacity search's
    # unloaded traffic under another name: measured once); on llama.cpp, its own references of two
    # traffics and three SD runs (n-gram on code edits and on random tokens, the poor draft), then the forced
    # acceptance's own reference and five SD runs (the half-way test, and the sweep's four lengths).
    # A comparison flagged cold or drifting is measured again, both sides, before any verdict: 4 more runs
    # each time, announced (in a CI run of this commit, n-gram on random tokens once: a TPOT speedup of
    # 3.88x above the 3.44 tokens per forward pass, clean when measured again).
    # A bound check the machine's possible move leaves undecided sends the reference's two draws again after
    # SD's (verdict.sequential.evidence): counted apart, with the reference's start it costs on vLLM.
    runs = re.findall(r"^\[specdec\] .* repeat \d/2: 4 requests in", out, flags=re.M)
    bracketed = re.findall(
        r"^\[specdec\] reference sent again after SD .* repeat \d/2: \d+ requests in", out, flags=re.M
    )
    first = [run for run in runs if " again on " not in run and " sent again " not in run]
    assert len(first) == 44, "\n".join(runs)
    brackets = re.findall(r"^\[specdec\] (.*): sending the reference's draws again after SD's", out, flags=re.M)
    assert len(bracketed) == 2 * len(brackets), "\n".join(bracketed + brackets)
    # Measured again, any traffic (the shared-prefix test sends 6 requests a run: in a CI-like run of this
    # commit its TTFT speedup of 0.79x one request at a time was flagged, and clean when measured again).
    again = re.findall(r"^\[specdec\] .* again on .* repeat \d/2: \d+ requests in", out, flags=re.M)
    assert len(again) == 4 * out.count("measuring both sides again before any verdict"), "\n".join(again)
    # A capacity search probes loads of its own: no reference run of its pattern as a whole is measured.
    assert "/slo_capacity repeat" not in out
    # The vLLM reference starts once, for every reference run announced and the dynamic-k sweep's levels (its
    # group goes first: session.py's lead groups), and is resumed from parking, not started again, for each
    # vLLM comparison measured again and each reference sent again after SD's (serving.pool).
    reference_starts = re.findall(r"^\[specdec\] starting vLLM \(cpu\) for \S+ \[no SD\]", out, flags=re.M)
    reference_resumes = re.findall(r"^\[specdec\] resumed \S+ \[no SD\] --enforce-eager: parked", out, flags=re.M)
    vllm_again = [
        line
        for line in re.findall(r"^\[specdec\] .*: measuring both sides again before any verdict", out, flags=re.M)
        if " on llamacpp: " not in line
    ]
    vllm_brackets = [line for line in brackets if " on llamacpp" not in line]
    # New draws of a check SD's first sends leave undecided (measure.more_draws): the reference once, and once
    # more after SD where its first draws were bracketed, each a resume on vLLM.
    new_draws = re.findall(r"^\[specdec\] (.*): measuring \d+ new draws on both sides", out, flags=re.M)
    vllm_new_draws = [label for label in new_draws if " on llamacpp" not in label]
    new_draw_resumes = sum(2 if label in brackets else 1 for label in vllm_new_draws)
    expected_resumes = len(vllm_again) + len(vllm_brackets) + new_draw_resumes
    assert len(reference_starts) == 1 and len(reference_resumes) == expected_resumes, "\n".join(
        reference_starts + reference_resumes + vllm_again + vllm_brackets + vllm_new_draws
    )
    assert "requests, " not in out and "elapsed" not in out
    assert "= specdec results =" in out
