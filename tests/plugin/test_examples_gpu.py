"""examples/gpu: collects without vllm/torch, skips cleanly without a GPU, cites its thresholds.

Each check runs pytest on examples/gpu in a subprocess from the repository
root, with vllm and torch made unimportable (a PYTHONPATH directory whose
``vllm`` and ``torch`` packages raise ImportError), as on a CI runner that
installed only the plugin. Nothing here starts a server.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "gpu"
DATA = ROOT / "tests" / "data" / "workloads"

# What examples/gpu should collect, per test function (see each file's parameter lists):
EXPECTED = {
    "test_gpt_oss_eagle3.py::test_eagle3_grid": 7 * 5,  # GRID_WORKLOADS x GRID_PATTERNS
    "test_gpt_oss_eagle3.py::test_eagle3_draft_length": 2,  # k=1, k=3 (PUBLISHED_DRAFT_LENGTH)
    "test_gpt_oss_eagle3.py::test_concurrency_sweep": 5 * 6,  # SWEEP_SERIES x levels 1, 5, 25, 50, 100, 200
    "test_gpt_oss_eagle3.py::test_concurrency_sweep_geomean": 5,  # one per SWEEP_SERIES entry
    "test_gpt_oss_eagle3.py::test_concurrency_sweep_frontier": 1,  # SWE-bench k=3 read as its frontier
    "test_gpt_oss_eagle3.py::test_eagle3_slo_capacity": 1,  # the H200 study's setup under a p95 TTFT objective
    "test_gpt_oss_eagle3.py::test_eagle3_forced_acceptance_sweep": 1,  # the machinery at forced lengths 1.5-4
    "test_llama_methods.py::test_method_speedup": 4 * 2,  # METHODS x (chat, code)
    "test_engines.py::test_engine_with_eagle3": 3,  # vLLM, TensorRT-LLM, SGLang (PUBLISHED)
    "test_engines.py::test_engine_ranking": 1,  # the study's engine ordering, from the tests above
}
EXPECTED_TOTAL = sum(EXPECTED.values())  # 87

# The published studies the thresholds come from: sections of the project's docs/references.md.
REFERENCES_DOC = Path(__file__).resolve().parents[2] / "docs" / "references.md"
CITATION = re.compile(r"docs/references\.md#([a-z0-9-]+)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).strip().replace(" ", "-")
        for heading in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.M)
    }


# Paths for the data-file workloads, as a configured project would have (the
# files are never read here; mlperf and swe_bench are JSONL with "prompt", as
# the custom fixture is). Without a device flag they are not needed: see
# test_skipped_without_data_paths_too.
DATA_PATHS = {
    "PYTEST_SPECDEC_SHAREGPT_PATH": DATA / "sharegpt.json",
    "PYTEST_SPECDEC_SPEC_BENCH_PATH": DATA / "spec_bench.jsonl",
    "PYTEST_SPECDEC_BURSTGPT_PATH": DATA / "burstgpt.csv",
    "PYTEST_SPECDEC_MLPERF_PATH": DATA / "custom.jsonl",
    "PYTEST_SPECDEC_SWE_BENCH_PATH": DATA / "custom.jsonl",
}


@pytest.fixture(scope="module")
def blocked(tmp_path_factory) -> Path:
    """A PYTHONPATH entry where importing vllm or torch fails."""
    path = tmp_path_factory.mktemp("blocked")
    for name in ("vllm", "torch"):
        (path / name).mkdir()
        (path / name / "__init__.py").write_text('raise ImportError("blocked in test")\n')
    return path


def run_pytest(blocked: Path, *args: str, data_paths: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # no outer addopts, xdist, paths
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), *filter(None, [os.environ.get("PYTHONPATH")])])
    if data_paths:
        env.update({name: str(path) for name, path in DATA_PATHS.items()})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "examples/gpu", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def summary_counts(stdout: str) -> dict[str, int]:
    """``{"skipped": 80}`` from pytest's last line, e.g. ``80 skipped in 0.41s``."""
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def skip_reasons(stdout: str) -> list[tuple[int, str]]:
    """(count, reason) of each ``SKIPPED [n] file:line: reason`` line of -rs."""
    return [(int(n), reason) for n, reason in re.findall(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", stdout, re.M)]


def test_the_blocker_blocks(blocked):
    probe = subprocess.run(
        [sys.executable, "-c", "import vllm"],
        env={**os.environ, "PYTHONPATH": str(blocked)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "blocked in test" in probe.stderr


def test_collects_every_case_without_vllm_or_torch(blocked):
    proc = run_pytest(blocked, "--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(ids) == EXPECTED_TOTAL, proc.stdout
    assert f"{EXPECTED_TOTAL} tests collected" in proc.stdout
    for function, count in EXPECTED.items():
        found = [i for i in ids if i == f"examples/gpu/{function}" or i.startswith(f"examples/gpu/{function}[")]
        assert len(found) == count, (function, found)
    assert len(set(ids)) == len(ids)
    for expected_id in (
        "test_eagle3_grid[random_x-burstiness_mid]",
        "test_eagle3_grid[burstgpt-throughput_low]",
        "test_eagle3_draft_length[k3]",
        "test_concurrency_sweep[sharegpt-k4-c200]",
        "test_concurrency_sweep_geomean[swe_bench-k3]",
        "test_method_speedup[suffix-code]",
    ):
        assert any(i.endswith(expected_id) for i in ids), expected_id
    # The plugin orders tests by server configuration; each geometric-mean test
    # must still come after every level of its series, whose results it reads.
    for series in ("sharegpt-k2", "sharegpt-k3", "sharegpt-k4", "mlperf-k3", "swe_bench-k3"):
        levels = [n for n, i in enumerate(ids) if f"test_concurrency_sweep[{series}-c" in i]
        (geomean,) = [n for n, i in enumerate(ids) if i.endswith(f"test_concurrency_sweep_geomean[{series}]")]
        assert len(levels) == 6 and geomean > max(levels), (series, ids)


def test_without_a_device_flag_everything_skips_naming_the_gpu_flag(blocked):
    proc = run_pytest(blocked, "-q", "-rs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_counts(proc.stdout) == {"skipped": EXPECTED_TOTAL}, proc.stdout
    reasons = skip_reasons(proc.stdout)
    assert sum(n for n, _ in reasons) == EXPECTED_TOTAL, proc.stdout
    assert all("--specdec-gpu" in reason for _, reason in reasons), reasons


def test_on_the_cpu_build_everything_skips_for_needing_a_gpu_and_nothing_starts(blocked):
    proc = run_pytest(blocked, "-q", "-rs", "--specdec-cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_counts(proc.stdout) == {"skipped": EXPECTED_TOTAL}, proc.stdout
    reasons = skip_reasons(proc.stdout)
    assert sum(n for n, _ in reasons) == EXPECTED_TOTAL, proc.stdout
    assert all("requires_gpu=True" in reason for _, reason in reasons), reasons
    assert "[specdec]" not in proc.stdout and "specdec servers" not in proc.stdout, proc.stdout


def _float_literal_lines(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Line number -> source line for lines with a float literal, and line -> its comment."""
    source = path.read_text()
    lines = source.splitlines()
    floats, comments = {}, {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NUMBER and re.search(r"[.eE]", token.string) and not token.string.startswith("0x"):
            floats[token.start[0]] = lines[token.start[0] - 1]
        elif token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
    return floats, comments


@pytest.mark.parametrize("name", ["test_gpt_oss_eagle3.py", "test_llama_methods.py", "test_engines.py"])
def test_every_published_number_cites_its_reference(name):
    """Each line with a float literal (the published numbers thresholds are made
    of) carries a comment naming a reference file; only MARGIN is exempt."""
    floats, comments = _float_literal_lines(EXAMPLES / name)
    assert floats, "no published numbers found"
    for lineno, line in floats.items():
        if re.match(r"\s*MARGIN\s*=", line):
            continue
        comment = comments.get(lineno, "")
        assert CITATION.search(comment), f"{name}:{lineno} cites no docs/references.md section: {line.strip()}"
    # Thresholds are built only from those numbers: every min=... scales by MARGIN.
    source = (EXAMPLES / name).read_text()
    for call in re.findall(r"\bmin(?:_rate|_length|_per_position)?=([^,)\n]+)", source):
        assert call.lstrip("[").startswith("MARGIN"), call


def test_every_citation_names_a_section_of_the_references_page():
    anchors = _anchors(REFERENCES_DOC.read_text(encoding="utf-8"))
    cited = set()
    for path in [*EXAMPLES.glob("*.py"), EXAMPLES / "README.md", EXAMPLES.parent / "cpu" / "test_cpu_specdec.py"]:
        cited |= set(CITATION.findall(path.read_text(encoding="utf-8")))
    assert cited >= {"blackwell-eagle-3", "h200-concurrency", "vllm-methods-guide"}, cited
    assert cited <= anchors, f"cited sections missing from docs/references.md: {sorted(cited - anchors)}"


def test_skipped_without_data_paths_too(blocked):
    # A CI runner without GPUs (and without the datasets) must see skips, not
    # failures about data files it will never read.
    proc = run_pytest(blocked, "-q", "-rs", data_paths=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_counts(proc.stdout) == {"skipped": EXPECTED_TOTAL}, proc.stdout
