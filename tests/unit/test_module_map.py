"""The module map (docs/architecture.md) lists exactly the package's modules and layers."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_specdec"


def _module_map() -> list[str]:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = re.search(r"^# Module map\n(.*?)(?=^# |\Z)", page, flags=re.S | re.M)
    assert section, "docs/architecture.md has no '# Module map' section"
    return re.findall(r"^\| `(pytest_specdec/[^`]*)` \|", section.group(1), flags=re.M)


def test_every_module_and_layer_is_in_the_map_once():
    listed = _module_map()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    modules = {
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    layers = {str(p.parent.relative_to(ROOT)) + "/" for p in PACKAGE.glob("*/__init__.py")}
    assert set(listed) == modules | layers, (
        f"missing from the map: {sorted((modules | layers) - set(listed))}; "
        f"in the map but not in the package: {sorted(set(listed) - modules - layers)}"
    )


def test_no_module_is_much_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert sizes["pytest_specdec/plugin.py"] < 250
    assert not {name: n for name, n in sizes.items() if n > 400}


def test_only_the_plugin_and_the_xdist_scheduler_import_pytest_or_xdist():
    importers = {
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*(import|from) (pytest|_pytest|xdist)\b", p.read_text(), flags=re.M)
    }
    assert importers == {"pytest_specdec/plugin.py", "pytest_specdec/xdist_scheduler.py"}
