"""What a specdec session measured, as rows people can look at.

One row per test: the SD configuration, its traffic, the headline ratios, the
theory next to them, and the verdicts.  Rows are plain JSON-able dicts so
they cross pytest-xdist's wire unchanged and a report can be rebuilt from
``results.json`` alone.  Writers here: the terminal table, ``results.json``
(validated against ``schemas/report.schema.json``), ``results.csv``,
``summary.md`` and the PNG plots (``report_plots``); every file is written
to a temporary name and renamed, so an interrupted run never leaves half a
report.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import tempfile
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

from .theory import cost_per_million_tokens, estimate_cost_ratio, model_size_from_dir, theory_for

SCHEMA_VERSION = 1
HEADLINE_METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "median_e2el_ms")
CSV_COLUMNS = (
    "test", "outcome", "regression", "model", "config", "method", "k", "workload", "access_pattern",
    "max_concurrency", "request_rate", "num_prompts", "repeats", "speedup", "expected_speedup", "cost_ratio",
    "acceptance_rate", "acceptance_length", "tpot_change", "ttft_change", "match_rate", "numerical_ties",
    "reference_output_throughput", "speculative_output_throughput", "reference_median_tpot_ms",
    "speculative_median_tpot_ms", "reference_median_ttft_ms", "speculative_median_ttft_ms",
    "reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens",
)


class ReportError(ValueError):
    """A report directory or document that cannot be written or read."""


def _number(value: Any) -> float | None:
    """JSON has no NaN or infinity: a figure that could not be computed is null."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def sd_label(spec) -> str:
    """The SD part of a spec's label, e.g. ``ngram k=4 prompt_lookup_max=4``."""
    label = spec.label()
    inner = label[label.index("[") + 1: label.rindex("]")] if "[" in label else label
    return inner + (f" {' '.join(spec.server_args)}" if spec.server_args else "")


def cost_ratio_for(spec, resolve: Callable[[str], str] | None = None) -> float | None:
    """Estimated draft/target cost per forward pass for `spec` (None when unknown).

    Sizes are read from local model directories when `resolve` maps the names
    to them (the bundled model and its truncated drafts always are); hub names
    that are not on disk leave the estimate to the method alone.
    """
    config = spec.speculative_config or {}
    method = str(config.get("method", ""))

    def size(name):
        if not name or resolve is None:
            return None, None
        with contextlib.suppress(OSError, ValueError):
            path = resolve(name)
            if path:
                return model_size_from_dir(path)
        return None, None

    target_layers, target_bytes = size(spec.model)
    draft_layers, draft_bytes = size(config.get("model")) if config.get("model") else (None, None)
    return estimate_cost_ratio(method, draft_layers=draft_layers, target_layers=target_layers,
                               draft_params=draft_bytes or None, target_params=target_bytes or None)


def _change(reference: float, speculative: float) -> float | None:
    """Relative change SD vs reference (negative = SD lower, which is better for latencies)."""
    reference, speculative = _number(reference), _number(speculative)
    if reference is None or speculative is None or reference == 0:
        return None
    return speculative / reference - 1


def row_for(test_id: str, spec, workload: dict, pattern: dict, *, outcome: str, result=None,
            regression: str | None = None, cost_ratio: float | None = None,
            gpu_usd_per_hour: float | None = None) -> dict[str, Any]:
    """One report row; `result` is None when the test ended before measuring."""
    config = spec.speculative_config or {}
    k = config.get("num_speculative_tokens")
    row: dict[str, Any] = {
        "test": test_id,
        "outcome": outcome,
        "regression": regression or "not checked",
        "model": spec.model,
        "config": sd_label(spec),
        "method": config.get("method"),
        "k": k if isinstance(k, int) else None,
        "speculative_config": dict(config),
        "server_args": list(spec.server_args),
        "workload": workload.get("name"),
        "access_pattern": pattern.get("name"),
        "max_concurrency": pattern.get("max_concurrency"),
        "request_rate": pattern.get("request_rate"),
        "num_prompts": pattern.get("num_prompts"),
        "repeats": 0,
        "cost_ratio": _number(cost_ratio),
    }
    for key in ("speedup", "speedup_tpot", "speedup_ttft", "expected_speedup", "acceptance_rate",
                "acceptance_length", "tpot_change", "ttft_change", "match_rate", "reference_usd_per_1m_tokens",
                "speculative_usd_per_1m_tokens"):
        row[key] = None
    row.update(per_position_acceptance=[], numerical_ties=None, reference={}, speculative={}, reproduce={})
    if result is None:
        return row

    reference = {m: _number(result.reference_metric(m)) for m in HEADLINE_METRICS}
    speculative = {m: _number(result.speculative_metric(m)) for m in HEADLINE_METRICS}
    counters = result.counters
    theory = theory_for(result.acceptance_length if counters.present else None, row["k"], cost_ratio,
                        result.speedup())
    row.update(
        repeats=len(result.speculative_runs),
        speedup=_number(result.speedup()),
        speedup_tpot=_number(result.speedup("median_tpot_ms")),
        speedup_ttft=_number(result.speedup("median_ttft_ms")),
        expected_speedup=_number(theory.expected_speedup) if theory else None,
        acceptance_rate=_number(result.acceptance_rate) if counters.present else None,
        acceptance_length=_number(result.acceptance_length) if counters.present else None,
        per_position_acceptance=[_number(v) for v in result.per_position_acceptance] if counters.present else [],
        tpot_change=_change(reference["median_tpot_ms"], speculative["median_tpot_ms"]),
        ttft_change=_change(reference["median_ttft_ms"], speculative["median_ttft_ms"]),
        match_rate=_number(result.match_rate),
        numerical_ties=_numerical_ties(result),
        reference=reference,
        speculative=speculative,
        reproduce=dict(result.reproduce),
    )
    if gpu_usd_per_hour is not None:
        for side, metrics in (("reference", reference), ("speculative", speculative)):
            tok_s = metrics["output_throughput"]
            row[f"{side}_usd_per_1m_tokens"] = (cost_per_million_tokens(tok_s, gpu_usd_per_hour)
                                               if tok_s else None)
    return row


def rows_for_test(test_id: str, plan, test, outcome: str, *, resolve=None,
                  gpu_usd_per_hour: float | None = None) -> list[dict[str, Any]]:
    """One row per result a test measured (one without figures if it failed before measuring).

    `plan` is the test's collection plan (spec, workload, pattern) and `test`
    its `SpecDecTest` (None when the test ended before the fixture was made).
    """
    workload = plan.workload.describe() if plan.workload else {}
    pattern = plan.pattern.describe() if plan.pattern else {}
    cost_ratio = cost_ratio_for(plan.spec, resolve)
    regression = test.gate.outcome if test is not None and test.gate is not None else None
    results = test.results if test is not None else []
    if not results and outcome == "passed":
        return []  # a test that used servers without measuring SD has nothing to report
    return [row_for(test_id, plan.spec, result.workload if result else workload,
                    result.pattern if result else pattern, outcome=outcome, result=result, regression=regression,
                    cost_ratio=cost_ratio, gpu_usd_per_hour=gpu_usd_per_hour)
            for result in results or [None]]


def _numerical_ties(result) -> int | None:
    """Divergences at a reference near-tie; None when no logprobs were asked for (unknown)."""
    from .assertions import classify_divergences

    divergences = classify_divergences(result)
    if any(d.tie is None for d in divergences):
        return None
    return sum(1 for d in divergences if d.tie)


# --- text renderings -------------------------------------------------------------------------

def _fmt(value, spec: str, missing: str = "–") -> str:
    return missing if value is None else format(value, spec)


def _speedup_text(row) -> str:
    return _fmt(row["speedup"], ".2f") + "x" if row["speedup"] is not None else "–"


def _equivalence_text(row) -> str:
    if row["match_rate"] is None:
        return "–"
    ties = f" ({row['numerical_ties']} ties)" if row.get("numerical_ties") else ""
    return f"{row['match_rate']:.0%}{ties}"


TABLE_HEADER = ("test", "SD config", "workload", "pattern", "speedup", "expected", "accept", "length",
                "TPOT", "TTFT", "same output", "baseline", "outcome")


def table_cells(row) -> tuple[str, ...]:
    return (
        row["test"].rsplit("::", 1)[-1],
        row["config"],
        row["workload"] or "–",
        row["access_pattern"] or "–",
        _speedup_text(row),
        _fmt(row["expected_speedup"], ".2f") + ("x" if row["expected_speedup"] is not None else ""),
        _fmt(row["acceptance_rate"], ".0%"),
        _fmt(row["acceptance_length"], ".2f"),
        _fmt(row["tpot_change"], "+.0%"),
        _fmt(row["ttft_change"], "+.0%"),
        _equivalence_text(row),
        row["regression"],
        row["outcome"],
    )


def terminal_table(rows: list[dict]) -> list[str]:
    """Aligned text lines: one row per test, as the terminal summary prints them."""
    cells = [TABLE_HEADER] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def markdown_summary(rows: list[dict], plots: Iterable[Path] = (), title: str = "pytest-specdec results") -> str:
    """The summary.md document (also what goes to a CI step summary)."""
    from .report_plots import geometric_mean, sweeps

    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - a table cell must not split
    out = [f"## {title}", ""]
    if not rows:
        return "\n".join(out + ["No specdec test ran.", ""])
    out += ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    out += ["| " + " | ".join(escape(c) for c in table_cells(r)) + " |" for r in rows]
    out += ["", "speedup: output-token throughput SD / reference; expected: Leviathan et al.'s "
            "(1 - a^(k+1)) / ((1 - a)(k c + 1)) from the measured acceptance length, k and the estimated "
            "draft/target cost ratio c; TPOT/TTFT: median change with SD (negative is faster).", ""]
    slow = [r for r in rows if r["expected_speedup"] and r["speedup"] and r["speedup"] < 0.8 * r["expected_speedup"]]
    if slow:
        out += ["**Below theory** (measured under 80% of what acceptance predicts: overheads the formula "
                "does not model, such as drafting on the host, batch effects or a compute-bound target):", ""]
        out += [f"- {r['test']}: {r['speedup']:.2f}x measured vs {r['expected_speedup']:.2f}x expected "
                f"(c = {r['cost_ratio']:.3f})" for r in slow] + [""]
    priced = [r for r in rows if r["speculative_usd_per_1m_tokens"] is not None]
    if priced:
        out += ["| test | USD per 1M output tokens, reference | with SD |", "|---|---|---|"]
        out += [f"| {escape(r['test'])} | {_fmt(r['reference_usd_per_1m_tokens'], '.3f')} | "
                f"{_fmt(r['speculative_usd_per_1m_tokens'], '.3f')} |" for r in priced] + [""]
    for (config, workload), group in sweeps(rows).items():
        levels = ", ".join(f"{r['max_concurrency']}: {_speedup_text(r)}" for r in group)
        out.append(f"- sweep {escape(config)} on {workload}: geometric-mean speedup "
                   f"{geometric_mean([r['speedup'] for r in group]):.2f}x over concurrency ({levels})")
    out += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = dict(row)
        for side in ("reference", "speculative"):
            for metric, value in row.get(side, {}).items():
                flat[f"{side}_{metric}"] = value
        writer.writerow({k: "" if flat.get(k) is None else flat.get(k) for k in CSV_COLUMNS})
    return buffer.getvalue()


# --- files -----------------------------------------------------------------------------------

def report_schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("schemas/report.schema.json").read_text())


def report_document(rows: list[dict], fingerprint: dict | None = None) -> dict:
    from . import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plugin_version": __version__,
        "fingerprint": fingerprint or {},
        "results": rows,
    }


def validate_report(document: dict, where: str) -> None:
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(report_schema()).iter_errors(document), key=lambda e: e.path)
    if errors:
        first = errors[0]
        field = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ReportError(f"{where}: field {field}: {first.message}")


def _write_atomic(path: Path, text: str) -> Path:
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return path


def write_report(directory: Path, rows: list[dict], fingerprint: dict | None = None) -> list[Path]:
    """Write results.json, results.csv, the plots and summary.md into `directory`."""
    from .report_plots import write_plots

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"--specdec-report: cannot create {directory}: {exc.strerror or exc}") from None
    document = report_document(rows, fingerprint)
    validate_report(document, f"{directory / 'results.json'} (not written)")
    written = [_write_atomic(directory / "results.json",
                             json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n"),
               _write_atomic(directory / "results.csv", csv_text(rows))]
    plots = write_plots(rows, directory)
    written.append(_write_atomic(directory / "summary.md", markdown_summary(rows, plots)))
    return written + plots


def load_report(directory: Path) -> dict:
    """A report directory's results.json, validated (for merging or re-rendering)."""
    path = Path(directory) / "results.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report file") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    validate_report(document, str(path))
    return document


def append_step_summary(markdown: str, environ=os.environ) -> Path | None:
    """Append to the CI job summary file when the runner provides one (GITHUB_STEP_SUMMARY)."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return Path(target)


# What `pytest-specdec merge` reads from each shard's report directory, besides results.json.
SHARD_TESTS = "tests.json"
SHARD_BASELINES = "baselines"


def write_shard_files(directory: Path, tests: Iterable[str], complete: bool,
                      baseline_paths: Iterable[Path] = ()) -> list[Path]:
    """tests.json (the tests this session ran, and whether it ran all it was given) and
    copies of the baselines it wrote, so a merge can make one baseline update of all shards."""
    directory = Path(directory)
    written = [_write_atomic(directory / SHARD_TESTS,
                             json.dumps({"tests": sorted(set(tests)), "complete": bool(complete)}, indent=1) + "\n")]
    paths = [Path(p) for p in baseline_paths]
    if paths:
        (directory / SHARD_BASELINES).mkdir(exist_ok=True)
        written += [_write_atomic(directory / SHARD_BASELINES / p.name, p.read_text(encoding="utf-8")) for p in paths]
    return written
