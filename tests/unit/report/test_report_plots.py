"""report_plots: PNG files from synthetic result rows, checked by their header bytes."""

import math
import struct
import subprocess
import sys

import pytest

from pytest_specdec import atomic
from pytest_specdec.report import plots as rp
from pytest_specdec.report.plots import (
    acceptance_bars,
    concurrency_sweep_plot,
    geometric_mean,
    speedup_heatmap,
    sweeps,
    write_plots,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def row(
    config="ngram k=4",
    workload="random_s",
    pattern="throughput_low",
    *,
    speedup=1.2,
    concurrency=None,
    per_position=(),
    ref_tput=100.0,
    tpot=20.0,
):
    return {
        "test": f"tests/test_sd.py::test_sd[{config}-{workload}-{pattern}]",
        "outcome": "passed",
        "config": config,
        "method": config.split()[0],
        "k": 4,
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "workload": workload,
        "access_pattern": pattern,
        "max_concurrency": concurrency,
        "request_rate": math.inf,
        "num_prompts": 16,
        "speedup_output_throughput": speedup,
        "acceptance_rate": 0.6,
        "acceptance_length": 2.4,
        "per_position_acceptance": list(per_position),
        "reference": {"output_throughput": ref_tput, "median_tpot_ms": tpot},
        "speculative": (
            None if speedup is None else {"output_throughput": ref_tput * speedup, "median_tpot_ms": tpot / speedup}
        ),
    }


def grid_rows():
    speedups = iter([0.8, 1.1, 1.3, 1.6, 0.95, 2.1, 1.0, 1.27, 0.7, 1.4, 1.9, 1.05])
    return [
        row(config, workload, pattern, speedup=next(speedups))
        for config in ("ngram k=4", "eagle3 k=3")
        for workload in ("sharegpt", "random_s", "code_edit")
        for pattern in ("throughput_high", "throughput_low")
    ]


def sweep_rows():
    return [
        row("ngram k=4", "random_m", f"concurrency_{c}", speedup=s, concurrency=c, ref_tput=50.0 * c, tpot=10.0 + c)
        for c, s in ((25, 1.1), (1, 1.6), (5, 1.3))
    ]


def acceptance_rows():
    return [
        row("ngram k=4", "code_edit", per_position=[0.9, 0.7, 0.5, 0.3]),
        row("eagle3 k=3", "sharegpt", per_position=[0.8, 0.6, 0.4]),
        row("eagle3 k=3", "random_s"),
    ]  # no per-position data: not a series


def assert_png(path, min_bytes=5000):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    length, chunk, width, height = struct.unpack(">I4sII", data[8:24])
    assert chunk == b"IHDR" and length == 13
    assert width > 200 and height > 200
    assert len(data) > min_bytes


def no_temp_files(directory):
    return [p.name for p in directory.iterdir() if p.suffix != ".png"] == []


def test_speedup_heatmap_writes_png(tmp_path):
    out = speedup_heatmap(grid_rows(), tmp_path / "heat.png")
    assert out == tmp_path / "heat.png"
    assert_png(out)
    assert no_temp_files(tmp_path)


def test_heatmap_catalog_order_median_and_first_seen_order():
    rows = grid_rows() + [row("ngram k=4", "sharegpt", "throughput_high", speedup=s) for s in (3.0, 5.0)]
    rows += [
        row("ngram k=4", "my_corpus", "peak_hour", speedup=1.5),
        row("ngram k=4", "alpha", "throughput_low", speedup=1.5),
    ]
    configs, workloads, patterns, cells = rp._heatmap_data(rows)
    assert configs == ["ngram k=4", "eagle3 k=3"]
    assert workloads == ["random_s", "code_edit", "sharegpt", "my_corpus", "alpha"]
    assert patterns == ["throughput_low", "throughput_high", "peak_hour"]
    # the grid gave 0.8; with 3.0 and 5.0 beside it the median is 3.0
    assert cells[("ngram k=4", "sharegpt", "throughput_high")] == 3.0


def test_heatmap_single_config_and_missing_cells(tmp_path):
    rows = [
        row(workload="random_s", pattern="throughput_low", speedup=1.3),
        row(workload="sharegpt", pattern="burstiness_mid", speedup=0.9),
        row(workload="code_edit", pattern="throughput_high", speedup=None),
    ]
    assert_png(speedup_heatmap(rows, tmp_path / "h.png"), min_bytes=2000)


def test_concurrency_sweep_plot_writes_png(tmp_path):
    out = concurrency_sweep_plot(sweep_rows() + grid_rows(), tmp_path / "sweep.png")
    assert out == tmp_path / "sweep.png"
    assert_png(out)
    assert no_temp_files(tmp_path)


def test_acceptance_bars_writes_png(tmp_path):
    out = acceptance_bars(acceptance_rows(), tmp_path / "acc.png")
    assert_png(out)
    assert no_temp_files(tmp_path)


def test_functions_return_none_and_write_nothing_without_data(tmp_path):
    assert speedup_heatmap([row(speedup=None), row(speedup=math.nan)], tmp_path / "a.png") is None
    # one concurrency level only is not a sweep
    assert concurrency_sweep_plot(grid_rows() + [row(concurrency=4)], tmp_path / "b.png") is None
    assert acceptance_bars(grid_rows() + [row(per_position=[None])], tmp_path / "c.png") is None
    assert write_plots([], tmp_path / "out") == []
    assert list(tmp_path.rglob("*.png")) == []
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_write_plots_writes_all_three(tmp_path):
    rows = grid_rows() + sweep_rows() + acceptance_rows()
    written = write_plots(rows, tmp_path / "plots")
    assert [p.name for p in written] == ["speedup_heatmap.png", "concurrency_sweep.png", "acceptance_per_position.png"]
    for path in written:
        assert_png(path)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(p.name for p in written)


def test_write_plots_only_what_applies_and_overwrites(tmp_path):
    (tmp_path / "speedup_heatmap.png").write_bytes(b"stale")
    written = write_plots(grid_rows(), tmp_path)
    assert [p.name for p in written] == ["speedup_heatmap.png"]
    assert_png(written[0])
    assert no_temp_files(tmp_path)


def test_failed_save_leaves_no_temp_file(tmp_path, monkeypatch):
    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        acceptance_bars(acceptance_rows(), tmp_path / "acc.png")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "values, expected",
    [([1, 4], 2.0), ([2, 8, 4], 4.0), ([2.0, None, 8.0, math.nan], 4.0), ([3.0, 0.0, -1.0, math.inf], 3.0)],
)
def test_geometric_mean(values, expected):
    assert geometric_mean(values) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[], [None], [math.nan, 0.0, -2.0]])
def test_geometric_mean_nothing_left_is_nan(values):
    assert math.isnan(geometric_mean(values))


def test_sweeps_grouping():
    rows = (
        sweep_rows()
        + grid_rows()
        + [
            row("eagle3 k=3", "random_m", concurrency=8),  # single level: not a sweep
            row("eagle3 k=3", "sharegpt", concurrency=2),
            row("eagle3 k=3", "sharegpt", concurrency=2, speedup=1.5),  # same level twice: still one
            {
                "config": None,
                "method": "suffix",
                "k": None,
                "workload": "code_edit",
                "max_concurrency": 4,
                "request_rate": "inf",
            },
            {
                "config": None,
                "method": "suffix",
                "k": None,
                "workload": "code_edit",
                "max_concurrency": 1,
                "request_rate": "inf",
            },
            # Rate-limited traffic with different caps is not a concurrency sweep.
            dict(row("eagle3 k=3", "burstgpt", "burstiness_mid", concurrency=32), request_rate=8.0),
            dict(row("eagle3 k=3", "burstgpt", "burstiness_low", concurrency=16), request_rate=2.0),
        ]
    )
    groups = sweeps(rows)
    assert set(groups) == {("ngram k=4", "random_m"), ("suffix", "code_edit")}
    assert [r["max_concurrency"] for r in groups[("ngram k=4", "random_m")]] == [1, 5, 25]
    assert [r["max_concurrency"] for r in groups[("suffix", "code_edit")]] == [1, 4]
    assert sweeps(grid_rows()) == {}


def test_import_does_not_load_matplotlib():
    code = "import pytest_specdec.report.plots, sys; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
