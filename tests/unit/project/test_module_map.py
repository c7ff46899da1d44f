"""The module map (docs/architecture.md) lists exactly the package's modules and layers."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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


def _classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Every class of the package by name (a name two modules use has both)."""
    found: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((str(path.relative_to(ROOT)), node))
    return found


def _reads_it_does_not_define(node: ast.ClassDef) -> set[str]:
    """Attributes a class's methods read from `self` that the class neither declares, assigns nor defines."""
    defined = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    read = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
            (defined if isinstance(sub.ctx, ast.Store) else read).add(sub.attr)
    return read - defined - {"__class__", "__dict__"}


def test_no_class_is_composed_of_mixins():
    """What a line limit per module was meant to protect: a class whole in one file. A class of the package
    has at most one base of the package, and that base reads nothing from `self` that it does not declare
    itself (a mixin reads fields declared in another file); a whole holds its parts instead."""
    classes = _classes()
    mixed = {}
    for name, places in classes.items():
        for path, node in places:
            bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
            ours = [b for b in bases if b in classes and not b.endswith(("Error", "Warning", "Exception"))]
            if len(ours) > 1:
                mixed[f"{path}::{name}"] = f"bases {ours}"
            for base in ours:
                for base_path, base_node in classes[base]:
                    if undeclared := _reads_it_does_not_define(base_node):
                        mixed[f"{path}::{name}"] = f"{base} ({base_path}) reads {sorted(undeclared)}"
    assert not mixed, mixed


def test_only_the_plugin_and_the_xdist_scheduler_import_pytest_or_xdist():
    importers = {
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*(import|from) (pytest|_pytest|xdist)\b", p.read_text(), flags=re.M)
    }
    assert importers == {"pytest_specdec/plugin.py", "pytest_specdec/xdist_scheduler.py"}


def test_the_pytest_wiring_stays_thin():
    # Hooks forward to the session in a few lines each; what grows here belongs in the session or the library.
    assert len((PACKAGE / "plugin.py").read_text().splitlines()) < 250


def test_the_mixin_check_sees_a_mixin_and_passes_a_part():
    mixin, part = ast.parse(
        "class Checks:\n"
        "    def assert_speedup(self):\n"
        "        return self.speculative_runs\n"
        "class Part:\n"
        "    speedup: float\n"
        "    def __init__(self, result):\n"
        "        self.result = result\n"
        "    def assert_speedup(self):\n"
        "        return self.result.speculative_runs, self.speedup, self.assert_speedup\n"
    ).body
    assert _reads_it_does_not_define(mixin) == {"speculative_runs"}
    assert _reads_it_does_not_define(part) == set()


# The public face, the entry point, the old paths' redirect and the plugin's hook declarations: beside the
# layers, not in them (docs/architecture.md says why for each).
OUTSIDE_THE_LAYERS = {"pytest_specdec/__main__.py", "pytest_specdec/_compat.py", "pytest_specdec/hookspecs.py"}


def _layers() -> list[list[str]]:
    """The layers contract of pyproject.toml, top to bottom: each layer's modules (a layer may name several)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def test_the_maps_sections_follow_the_layers_contract_top_to_bottom():
    """The map is checked against the contracts import-linter enforces, so it cannot drift from them: each
    module's section comes no earlier than the section of any module in a layer above its own."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    map_text = re.search(r"^# Module map\n(.*?)(?=^# |\Z)", page, flags=re.S | re.M).group(1)
    section_of, section = {}, -1
    for line in map_text.splitlines():
        if line.startswith("## "):
            section += 1
        elif found := re.match(r"^\| `(pytest_specdec/[^`]*)` \|", line):
            section_of[found.group(1)] = section

    def layer_of(path: str) -> int:
        dotted = path.removesuffix(".py").removesuffix("/").replace("/", ".")
        for index, names in enumerate(_layers()):
            if any(dotted == name or dotted.startswith(name + ".") for name in names):
                return index
        raise AssertionError(f"{path} is in no layer of the contract")

    by_layer: dict[int, set[int]] = {}
    for path, where in section_of.items():
        if path in OUTSIDE_THE_LAYERS:
            continue
        by_layer.setdefault(layer_of(path), set()).add(where)
    layers = sorted(by_layer)
    for upper, lower in zip(layers, layers[1:]):
        assert max(by_layer[upper]) <= min(by_layer[lower]), (
            f"a module of layer {_layers()[upper]} is mapped below one of {_layers()[lower]}"
        )
