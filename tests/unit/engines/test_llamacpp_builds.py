"""The llamacpp engine launches each llama.cpp build as that build reads its settings.

llama.cpp renamed its speculative flags and nested its parameter struct in
PR #22397 (April 2026): xllamacpp 2026.4 wheels hold the flat layout (one
`type`, `n_max`, `p_min` beside `ngram_size_n`; draft-simple's `p_min`
defaults to 0.75), 2026.5 and later the nested one (`types`, `draft.*`,
`ngram_simple.*`; `p_min` 0). The fakes below hold exactly one layout's
attributes (`__slots__`), so the shim setting a field that build lacks fails
here as it fails on the real build. Real builds: tests/integration/test_llamacpp_builds_cpu.py.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from pytest_specdec.engines import llamacpp, llamacpp_serve
from pytest_specdec.engines.base import LaunchRequest
from pytest_specdec.engines.server_spec import ServerSpec


class Strict:
    """An object that takes only the attributes its class names, like a Cython struct wrapper."""

    __slots__ = ()

    def __init__(self, **values):
        for name in self.__slots__:
            setattr(self, name, values.get(name))


class FlatSpeculative(Strict):
    __slots__ = ("type", "mparams_dft", "n_max", "n_min", "p_min", "ngram_size_n", "ngram_size_m", "ngram_min_hits")


class ModelParams(Strict):
    __slots__ = ("path",)


class Draft(Strict):
    __slots__ = ("mparams", "n_max", "n_min", "p_min")


class NgramSimple(Strict):
    __slots__ = ("size_n", "size_m", "min_hits")


class NestedSpeculative(Strict):
    __slots__ = ("types", "draft", "ngram_simple")


class CpuParams(Strict):
    __slots__ = ("n_threads",)


class Sampling(Strict):
    __slots__ = ("seed",)


def xlc_module(nested: bool):
    """A stand-in for one xllamacpp build's module: CommonParams with that build's layout only."""

    class Params(Strict):
        __slots__ = (
            "model",
            "model_alias",
            "hostnames" if nested else "hostname",
            "port",
            "endpoint_metrics",
            "n_parallel",
            "n_ctx",
            "kv_unified",
            "cpuparams",
            "sampling",
            "speculative",
        )

    def common_params():
        speculative = (
            NestedSpeculative(draft=Draft(mparams=ModelParams(), p_min=0.0), ngram_simple=NgramSimple())
            if nested
            else FlatSpeculative(mparams_dft=ModelParams(), p_min=0.75)
        )
        return Params(model=ModelParams(), cpuparams=CpuParams(), sampling=Sampling(), speculative=speculative)

    class Kinds:  # the nested build's enum names; the flat build's type is set by number
        COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE = "draft-simple"
        COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE = "ngram-simple"

        def __new__(cls, value):  # the flat build's flag enum called with a number
            return ("flat-type", value)

    return type("xlc", (), {"CommonParams": staticmethod(common_params), "common_speculative_type": Kinds})


NGRAM = [
    "-m",
    "t.gguf",
    "--port",
    "8080",
    "--spec-type",
    "ngram-simple",
    "--spec-ngram-simple-size-n",
    "3",
    "--spec-ngram-simple-size-m",
    "4",
    "--spec-ngram-simple-min-hits",
    "1",
]
DRAFT = [
    "-m",
    "t.gguf",
    "--port",
    "8080",
    "--spec-type",
    "draft-simple",
    "-md",
    "d.gguf",
    "--spec-draft-n-max",
    "3",
    "--spec-draft-n-min",
    "0",
    "--spec-draft-p-min",
    "0",
]


def params(argv, nested):
    return llamacpp_serve.params_for(llamacpp_serve.parser().parse_args(argv), xlc_module(nested))


def test_the_shim_sets_the_flat_layout_of_a_build_from_before_the_refactor():
    ngram = params(NGRAM, nested=False)
    assert ngram.hostname == "127.0.0.1"
    assert ngram.speculative.type == ("flat-type", 3)  # NGRAM_SIMPLE in common_speculative_type's order
    assert (ngram.speculative.ngram_size_n, ngram.speculative.ngram_size_m, ngram.speculative.ngram_min_hits) == (
        3,
        4,
        1,
    )
    assert ngram.speculative.n_max is None and ngram.speculative.p_min == 0.75  # the draft's fields untouched

    draft = params(DRAFT, nested=False)
    assert draft.speculative.type == ("flat-type", 1)  # DRAFT
    assert draft.speculative.mparams_dft.path == "d.gguf"
    # p_min 0 replaces the build's 0.75, which stopped a draft at its first unlikely token
    assert (draft.speculative.n_max, draft.speculative.n_min, draft.speculative.p_min) == (3, 0, 0.0)
    assert draft.speculative.ngram_size_n is None


def test_the_shim_sets_the_nested_layout_of_a_build_after_the_refactor():
    ngram = params(NGRAM, nested=True)
    assert ngram.hostnames == ["127.0.0.1"]
    assert ngram.speculative.types == ["ngram-simple"]
    simple = ngram.speculative.ngram_simple
    assert (simple.size_n, simple.size_m, simple.min_hits) == (3, 4, 1)

    draft = params(DRAFT, nested=True).speculative
    assert draft.types == ["draft-simple"] and draft.draft.mparams.path == "d.gguf"
    assert (draft.draft.n_max, draft.draft.n_min, draft.draft.p_min) == (3, 0, 0.0)


def test_the_shim_refuses_a_draft_type_without_a_draft_and_a_draft_without_its_type():
    with pytest.raises(SystemExit, match="needs -md"):
        params(["-m", "t.gguf", "--port", "1", "--spec-type", "draft-simple"], nested=False)
    with pytest.raises(SystemExit, match="without --spec-type draft-simple"):
        params(["-m", "t.gguf", "--port", "1", "-md", "d.gguf"], nested=True)


def fake_llama_server(tmp_path, help_text: str):
    """A llama-server that answers --help as the given build does (and exits 1 on anything else)."""
    binary = tmp_path / "llama-server"
    binary.write_text(
        f"#!{sys.executable}\nimport sys\nif '--help' in sys.argv:\n"
        f"    print({help_text!r})\n    sys.exit(0)\nsys.exit(1)\n"
    )
    binary.chmod(0o755)
    return str(binary)


def launch(config, python=sys.executable):
    spec = ServerSpec("specdec:smollm2-135m", config, engine="llamacpp")
    return LaunchRequest(
        spec=spec,
        device="cpu",
        host="127.0.0.1",
        port=8080,
        model_path="t.gguf",
        speculative_config=config,
        kv_cache_bytes=None,
        python=python,
    )


DRAFT_CONFIG = {"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3}
NGRAM_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}


@pytest.fixture
def fresh_probe():
    llamacpp.help_text.cache_clear()
    yield
    llamacpp.help_text.cache_clear()


def test_a_llama_server_from_before_the_refactor_gets_the_old_flag_names(tmp_path, monkeypatch, fresh_probe):
    old = textwrap.dedent("""
        --draft, --draft-n, --draft-max N       number of tokens to draft for speculative decoding
        --draft-min, --draft-n-min N            minimum number of draft tokens
        --draft-p-min P                         minimum speculative decoding probability (default: 0.75)
        --spec-ngram-size-n N                   ngram size N for ngram-simple
    """)
    monkeypatch.setenv(llamacpp.BINARY_ENV, fake_llama_server(tmp_path, old))
    draft = llamacpp.ENGINE.command(launch(DRAFT_CONFIG))
    assert draft[draft.index("--draft-max") + 1] == "3" and draft[draft.index("--draft-p-min") + 1] == "0"
    assert "--spec-draft-n-max" not in draft and "draft-simple" not in draft  # -md alone drafts there
    assert draft[draft.index("-md") + 1] == "d.gguf"
    ngram = llamacpp.ENGINE.command(launch(NGRAM_CONFIG))
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple"
    assert ngram[ngram.index("--spec-ngram-size-n") + 1] == "3" and ngram[ngram.index("--spec-ngram-size-m") + 1] == "4"
    assert "--spec-ngram-min-hits" in ngram and "--spec-ngram-simple-size-n" not in ngram


def test_a_current_llama_server_keeps_the_current_names(tmp_path, monkeypatch, fresh_probe):
    new = "--spec-draft-n-max N   number of tokens to draft\n--spec-type [none|draft-simple|ngram-simple]"
    monkeypatch.setenv(llamacpp.BINARY_ENV, fake_llama_server(tmp_path, new))
    draft = llamacpp.ENGINE.command(launch(DRAFT_CONFIG))
    assert draft[draft.index("--spec-type") + 1] == "draft-simple" and "--spec-draft-n-max" in draft
    assert "--draft-max" not in draft


def test_every_environments_python_runs_the_shim_by_its_file(monkeypatch, tmp_path):
    # This environment's shim is launched as another environment's is, so a builds A/B launches both builds
    # alike: run as a module it would import the whole plugin into the server's process, another's would not.
    monkeypatch.delenv(llamacpp.BINARY_ENV, raising=False)
    monkeypatch.setattr(llamacpp.shutil, "which", lambda name: None)
    here = llamacpp.ENGINE.command(launch(NGRAM_CONFIG))
    assert here[:2] == [sys.executable, llamacpp.SHIM_PATH]
    assert llamacpp.SHIM_MODULE not in here
    assert llamacpp.ENGINE.local_version(here) == llamacpp.xllamacpp_version(sys.executable)
    other = tmp_path / "python"
    other.write_text("#!/bin/sh\necho 2026.4.8929\n")  # answers the version probe as that build's Python does
    other.chmod(0o755)
    there = llamacpp.ENGINE.command(launch(NGRAM_CONFIG, python=str(other)))
    assert there[:2] == [str(other), llamacpp.SHIM_PATH]
    assert llamacpp.ENGINE.local_version(there) == "xllamacpp 2026.4.8929"
    # A launch hook's wrapper in front (taskset, numactl) leaves the Python that runs the shim to ask.
    assert llamacpp.ENGINE.local_version(["taskset", "-c", "1", *there]) == "xllamacpp 2026.4.8929"
