"""The README is a front page: its first code is a test that uses the decided checks, near the top, and the
same test runs in the main job (examples/cpu)."""

import ast
import re
from pathlib import Path

from pytest_specdec.measure.result import SpecDecResult

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _first_python_block() -> tuple[int, str]:
    match = re.search(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
    assert match, "README.md has no python block"
    return README[: match.start()].count("\n") + 1, match.group(1)


def test_the_first_code_is_a_test_near_the_top():
    line, _ = _first_python_block()
    first_code = README.index("```")
    assert README[:first_code].count("\n") + 1 == line <= 40, f"README.md: the first code block is at line {line}"
    assert len(README.splitlines()) < 200


def test_the_first_test_uses_the_decided_checks_and_no_plain_assert():
    _, code = _first_python_block()
    tree = ast.parse(code)
    calls = {
        node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert {"assert_speedup", "assert_acceptance", "assert_no_regression"} <= calls
    assert all(hasattr(SpecDecResult, name) for name in calls if name.startswith("assert_"))
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Assert)], "a plain assert skips the rule"


def test_the_first_test_runs_as_written_in_the_main_job():
    # The README's test is the main job's (examples/cpu), decorators and body, and the names it uses hold the
    # same values there: what the README shows is what CI runs on the CPU servers.
    _, code = _first_python_block()
    (function,) = [node for node in ast.parse(code).body if isinstance(node, ast.FunctionDef)]
    path = ROOT / "examples" / "cpu" / "test_cpu_specdec.py"
    example = {
        node.name: node
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef)
    }
    assert function.name in example, f"{path}: no {function.name}"
    assert ast.dump(function) == ast.dump(example[function.name]), f"README.md's {function.name} differs from {path}'s"
    readme_names, example_names = {}, {}
    exec(compile(code, "README.md", "exec"), readme_names)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), example_names)
    used = {node.id for node in ast.walk(function) if isinstance(node, ast.Name)} - {"pytest", "specdec", "result"}
    assert used and all(readme_names[name] == example_names[name] for name in used), used
