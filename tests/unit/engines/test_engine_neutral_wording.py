"""Outside engines/, nothing speaks for one engine: messages name the engine that ran (its module's title),
and what an engine knows (its binaries, the engine names) comes from its module or the registry."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pytest_specdec
from pytest_specdec.bisect import short_name
from pytest_specdec.config.options import parse_engine
from pytest_specdec.engines import registry
from pytest_specdec.engines.base import Engine

PACKAGE = Path(pytest_specdec.__file__).parent
# A message that blames one engine's server: it sends a llama.cpp, SGLang or TensorRT-LLM user to the wrong logs.
ONE_ENGINE_SERVER = re.compile(r"\b(vLLM|SGLang|TensorRT-LLM|llama\.cpp)('s)? server\b")


def message_strings(tree: ast.AST):
    """Every string constant of a module except docstrings (which may cite an engine's source)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_message_outside_engines_names_one_engine_s_server():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "engines" not in path.relative_to(PACKAGE).parts
        for line, text in message_strings(ast.parse(path.read_text(), str(path)))
        if ONE_ENGINE_SERVER.search(text)
    ]
    assert not found, "engine-specific server wording outside engines/:\n" + "\n".join(found)


def test_the_scan_sees_an_f_string_message_and_skips_a_docstring():
    tree = ast.parse(
        'def f(x):\n    """The vLLM server docs."""\n    raise RuntimeError(f"vLLM server for {x} died")\n'
    )
    assert [text for _, text in message_strings(tree) if ONE_ENGINE_SERVER.search(text)] == ["vLLM server for "]


class ToyServerEngine(Engine):
    name = "toyserve"
    title = "Toy"
    build_binaries = ("toy-serve",)


ENGINE = ToyServerEngine()


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(registry.ENGINE_MODULES, "toyserve", __name__)


def test_bisect_names_a_registered_engine_s_binary_by_its_folder(toy_registered):
    assert short_name("/builds/toy-1.2/bin/toy-serve") == "toy-1.2"
    assert short_name("/builds/llama-b8929/llama-server") == "llama-b8929"


def test_the_engine_option_takes_a_registered_engine(toy_registered):
    assert parse_engine("toyserve") == "toyserve"
