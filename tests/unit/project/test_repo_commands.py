"""The README's commands are the ones CI runs and the scripts they name exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def readme_commands():
    return re.findall(r"```bash\n(\./scripts/setup && [^\n]+)\n```", (ROOT / "README.md").read_text())


def test_readme_has_exactly_the_main_job_and_test_commands():
    main_job, tests = readme_commands()
    assert "-m pytest examples/cpu --specdec-cpu" in main_job and "--specdec-report" in main_job
    assert tests == "./scripts/setup && ./scripts/test"


def test_the_test_script_runs_every_test_folder_once():
    script = (ROOT / "scripts" / "test").read_text()
    serial = re.search(r"^SERIAL=\(([^)]*)\)", script, flags=re.M).group(1).split()
    commands = [line for line in script.splitlines() if "-m pytest" in line]
    (logic,) = [line for line in commands if "tests/unit" in line]
    (servers,) = [line for line in commands if "tests/integration" in line]
    # A session names a suite's top folder; its subfolders (tests/unit mirrors the package) come with it.
    folders = {"tests/" + path.relative_to(ROOT / "tests").parts[0] for path in (ROOT / "tests").rglob("test_*.py")}
    # tests/gpu needs a GPU (--specdec-gpu), which CI never has: the GPU kit runs it (docs/benchmarks.md).
    assert "tests/gpu" in folders and "tests/gpu" not in script
    named = re.findall(r"\btests/\w+(?=\s)", logic + " ") + re.findall(r"\btests/\w+(?=\s)", servers + " ")
    assert sorted(named) == sorted(folders - {"tests/gpu"}), "every other test folder in exactly one session"
    # Real servers and the timed fakes in one serial session (timings); logic on two xdist workers,
    # never beside a server, and without the serial files (each runs once).
    assert "-n 2" in logic and "--specdec-cpu" not in logic and '"${skip_serial[@]}"' in logic
    assert "--specdec-cpu" in servers and "-n " not in servers and '"${SERIAL[@]}"' in servers
    assert serial and all(
        (ROOT / path).is_file() and path.startswith(("tests/unit/", "tests/plugin/", "tests/history/"))
        for path in serial
    )


def test_ci_runs_the_readme_test_command_verbatim():
    tests = readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_every_path_the_commands_name_exists():
    for command in readme_commands():
        for token in command.split():
            if "/" in token and not token.startswith(".venv"):
                assert (ROOT / token).exists(), token
