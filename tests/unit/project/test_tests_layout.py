"""tests/ is laid out like the package; the fakes, and what more than one test module uses, live in tests/support/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "pytest_specdec"
TESTS = ROOT / "tests"
# The unit suite's folders mirror the package's; project/ holds the checks of the repository itself (docs,
# scripts, module map), which no package module owns.
NOT_IN_THE_PACKAGE = {"project"}


def test_the_unit_tests_folders_are_the_packages():
    folders = {
        str(p.relative_to(TESTS / "unit"))
        for p in (TESTS / "unit").rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts
    }
    strays = {f for f in folders if f.split("/")[0] not in NOT_IN_THE_PACKAGE and not (PACKAGE / f).is_dir()}
    assert not strays, f"tests/unit folders with no package folder of that name: {sorted(strays)}"


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_test_module_imports_another():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported_modules(path) if name.split(".")[-1] in test_modules
        )
        for path in TESTS.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"helpers shared between test modules belong in tests/support/: {offenders}"


def test_the_layout_check_sees_a_test_module_importing_another(tmp_path):
    planted = tmp_path / "test_b.py"
    planted.write_text("from test_a import HELPER\nimport os\n")
    assert "test_a" in _imported_modules(planted)
