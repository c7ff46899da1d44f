import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdec.load.workloads import (
    CATALOG,
    MissingDataPath,
    Prompt,
    Workload,
    WorkloadError,
    data_path_env_var,
    resolve_workload,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "workloads"


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    from pytest_specdec.serving.models import resolve_model

    return transformers.AutoTokenizer.from_pretrained(resolve_model("specdec:smollm2-135m"))


def n_tokens(tokenizer, text):
    return len(tokenizer(text).input_ids)


def build(name, tokenizer, num_prompts=3, seed=0, **overrides):
    return resolve_workload(name, overrides).build(tokenizer, num_prompts, seed)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ catalog


def test_catalog_defaults_are_the_published_numbers():
    lengths = {name: (w.kind, w.input_len, w.output_len) for name, w in CATALOG.items()}
    assert lengths["random_s"] == ("random", 1024, 256)
    assert lengths["random_m"] == ("random", 10240, 256)
    assert lengths["random_l"] == ("random", 2048, 2048)
    assert lengths["random_x"] == ("random", 10240, 2048)
    assert lengths["code_edit"] == ("code_edit", 512, 256)
    assert set(CATALOG) == {
        "random_s",
        "random_m",
        "random_l",
        "random_x",
        "code_edit",
        "structured",
        "tool_calls",
        "sharegpt",
        "spec_bench",
        "burstgpt",
        "swe_bench",
        "mlperf",
        "custom",
        "shared_prefix",
        "spec_bench_multiturn",
        "speed_bench",
        "sharegpt_multiturn",
        "mooncake_trace",
    }
    assert (CATALOG["shared_prefix"].prefix_len, CATALOG["shared_prefix"].num_prefixes) == (2048, 4)
    assert CATALOG["spec_bench_multiturn"].turns == 2 and CATALOG["sharegpt_multiturn"].turns == 3
    # Constrained workloads stop where the answer ends (a JSON object closes), never past it: no ignore_eos.
    constrained = {"structured", "tool_calls"}
    assert all(w.ignore_eos and w.path is None for name, w in CATALOG.items() if name not in constrained)
    assert all(not CATALOG[name].ignore_eos and CATALOG[name].path is None for name in constrained)


@pytest.mark.parametrize(
    "name, input_len, output_len",
    [("random_s", 64, 16), ("random_m", 100, 8), ("random_l", 33, 40), ("random_x", 1, 1)],
)
def test_random_prompts_have_exact_lengths(tokenizer, name, input_len, output_len):
    prompts = build(name, tokenizer, 4, input_len=input_len, output_len=output_len)
    assert len(prompts) == 4
    for p in prompts:
        assert p.prompt_len == n_tokens(tokenizer, p.text) == input_len
        assert p.output_len == output_len


def test_random_s_at_full_size(tokenizer):
    prompts = build("random_s", tokenizer, 2)
    assert [(n_tokens(tokenizer, p.text), p.prompt_len, p.output_len) for p in prompts] == [(1024, 1024, 256)] * 2


def test_random_prompts_differ_from_the_first_tokens(tokenizer):
    prompts = build("random_s", tokenizer, 8, input_len=32)
    assert len({tuple(tokenizer(p.text).input_ids[:2]) for p in prompts}) == 8


def test_random_prompts_use_no_special_tokens(tokenizer):
    special = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    for p in build("random_s", tokenizer, 4, input_len=200):
        assert not special & set(tokenizer(p.text).input_ids)


def test_code_edit_prompts_repeat_code_and_fit_exactly(tokenizer):
    prompts = build("code_edit", tokenizer, 3)
    assert len({p.text for p in prompts}) == 3
    for p in prompts:
        assert p.prompt_len == n_tokens(tokenizer, p.text) == 512 and p.output_len == 256
        code, _, instruction = p.text.rpartition("\n\n")
        assert code.count("def ") >= 4 and instruction.startswith("Rewrite the code above")
        named = instruction.split("`")[1]
        assert named in code  # the edit targets code that is really there


def test_code_edit_scaled_down_and_too_small(tokenizer):
    for p in build("code_edit", tokenizer, 2, input_len=100, output_len=50):
        assert p.prompt_len == n_tokens(tokenizer, p.text) == 100 and p.output_len == 50
    with pytest.raises(WorkloadError, match=r"'code_edit'.*input_len 20 is too small"):
        build("code_edit", tokenizer, 1, input_len=20)


# ------------------------------------------------------------ counts, seeds


@pytest.mark.parametrize("name", ["random_s", "code_edit", "sharegpt", "spec_bench", "burstgpt", "custom"])
def test_seeds_make_builds_repeatable_and_distinct(tokenizer, name):
    overrides = {"input_len": 128} if name in ("random_s", "code_edit") else {"path": str(DATA / _FILES[name])}
    workload = resolve_workload(name, overrides)
    assert workload.build(tokenizer, 3, seed=5) == workload.build(tokenizer, 3, seed=5)
    builds = {tuple(p.text for p in workload.build(tokenizer, 3, seed=s)) for s in range(4)}
    assert len(builds) > 1


_FILES = {
    "sharegpt": "sharegpt.json",
    "spec_bench": "spec_bench.jsonl",
    "burstgpt": "burstgpt.csv",
    "custom": "custom.jsonl",
    "swe_bench": "custom.jsonl",
    "mlperf": "custom.jsonl",
}


@pytest.mark.parametrize("name", sorted(_FILES))
@pytest.mark.parametrize("num_prompts", [1, 2, 11])
def test_num_prompts_is_honoured_and_short_files_cycle(tokenizer, name, num_prompts):
    prompts = build(name, tokenizer, num_prompts, path=str(DATA / _FILES[name]))
    assert len(prompts) == num_prompts
    assert all(isinstance(p, Prompt) and p.prompt_len == n_tokens(tokenizer, p.text) for p in prompts)
    if num_prompts == 11:  # more than any fixture holds: every usable entry comes back
        usable = {"sharegpt": 5, "spec_bench": 3, "burstgpt": 4}.get(name, 3)
        assert len({p.text for p in prompts} if name != "burstgpt" else {p.prompt_len for p in prompts}) == usable


def test_small_sample_from_a_larger_file_depends_on_seed(tokenizer):
    workload = resolve_workload("sharegpt", {"path": str(DATA / "sharegpt.json")})
    picks = {frozenset(p.text for p in workload.build(tokenizer, 2, seed=s)) for s in range(6)}
    assert len(picks) > 2


def test_bad_build_arguments(tokenizer):
    workload = CATALOG["random_s"]
    with pytest.raises(WorkloadError, match="num_prompts"):
        workload.build(tokenizer, 0)
    with pytest.raises(WorkloadError, match="seed"):
        workload.build(tokenizer, 1, seed=-1)


# --------------------------------------------------------------- overrides


def test_valid_overrides_are_applied():
    w = resolve_workload("random_m", {"input_len": 64, "output_len": 8, "ignore_eos": False})
    assert (w.name, w.kind, w.input_len, w.output_len, w.ignore_eos) == ("random_m", "random", 64, 8, False)
    assert CATALOG["random_m"].input_len == 10240  # the catalog entry is untouched
    assert resolve_workload("custom", {"path": DATA / "custom.jsonl"}).path == str(DATA / "custom.jsonl")


@pytest.mark.parametrize(
    "key, value",
    [
        ("input_len", 0),
        ("input_len", -3),
        ("input_len", "64"),
        ("input_len", 1.5),
        ("input_len", True),
        ("output_len", None),
        ("output_len", 0),
        ("ignore_eos", "yes"),
        ("ignore_eos", 1),
    ],
)
def test_bad_override_values_name_the_key(key, value):
    with pytest.raises(WorkloadError, match=rf"'random_s'.*{key!r}.*{value!r}".replace("(", r"\(")):
        resolve_workload("random_s", {key: value})


def test_unknown_and_misplaced_overrides_name_the_key():
    with pytest.raises(WorkloadError, match=r"'input_length'.*allowed: input_len, output_len, path, ignore_eos"):
        resolve_workload("random_s", {"input_length": 64})
    with pytest.raises(WorkloadError, match=r"'path' does not apply"):
        resolve_workload("random_s", {"path": "x.jsonl"})
    with pytest.raises(WorkloadError, match=r"'path' must be a non-empty string"):
        resolve_workload("custom", {"path": 3})


def test_unknown_workload_lists_every_known_name():
    with pytest.raises(WorkloadError) as info:
        resolve_workload("random_xl", {}, registered={"mine": Workload("mine", "random", 8, 8)})
    message = str(info.value)
    assert "'random_xl'" in message
    for name in [*CATALOG, "mine"]:
        assert name in message


def test_workload_instances_are_accepted_with_overrides():
    mine = Workload("short_chat", "random", input_len=32, output_len=8)
    assert resolve_workload(mine, {}) is mine
    assert resolve_workload(mine, {"output_len": 4}).output_len == 4


def test_workload_definitions_are_checked_when_made():
    with pytest.raises(WorkloadError, match="unknown kind 'randm'"):
        Workload("w", "randm", 8, 8)
    with pytest.raises(WorkloadError, match="needs input_len and output_len"):
        Workload("w", "random", input_len=8)
    with pytest.raises(WorkloadError, match="builder"):
        Workload("w", "custom_builder")


def test_describe_is_json_able():
    described = json.loads(
        json.dumps(resolve_workload("sharegpt", {"output_len": 64}, paths={"sharegpt": "sg.json"}).describe())
    )
    assert described == {
        "name": "sharegpt",
        "kind": "sharegpt",
        "input_len": None,
        "output_len": 64,
        "path": "sg.json",
        "ignore_eos": True,
    }


# -------------------------------------------------------------------- paths


def test_data_path_env_var_names():
    assert data_path_env_var("sharegpt") == "PYTEST_SPECDEC_SHAREGPT_PATH"
    assert data_path_env_var("spec_bench") == "PYTEST_SPECDEC_SPEC_BENCH_PATH"
    assert data_path_env_var("my-data") == "PYTEST_SPECDEC_MY_DATA_PATH"


def test_path_comes_from_override_then_paths_mapping():
    paths = {"custom": "from_env.jsonl"}
    assert resolve_workload("custom", {}, paths=paths).path == "from_env.jsonl"
    assert resolve_workload("custom", {"path": "marker.jsonl"}, paths=paths).path == "marker.jsonl"


def test_missing_path_says_how_to_give_one():
    with pytest.raises(MissingDataPath) as info:
        resolve_workload("spec_bench", {}, paths={"sharegpt": "other.json"})
    message = str(info.value)
    assert "'spec_bench'" in message and "path=..." in message
    assert "PYTEST_SPECDEC_SPEC_BENCH_PATH" in message and "specdec_spec_bench_path" in message


def test_resolve_does_not_touch_the_file(tmp_path):
    # Collection-time resolution succeeds; the missing file is a build-time error.
    resolve_workload("custom", {"path": str(tmp_path / "nowhere.jsonl")})


# -------------------------------------------------------------- data files


def test_sharegpt_uses_first_human_turn_and_reply_length(tokenizer):
    workload = resolve_workload("sharegpt", {"path": str(DATA / "sharegpt.json")})
    raw = json.loads((DATA / "sharegpt.json").read_text())
    replies = {}
    for entry in raw:
        turns = entry["conversations"]
        human = next(i for i, t in enumerate(turns) if t["from"] == "human")
        if human + 1 < len(turns):
            replies[turns[human]["value"]] = turns[human + 1]["value"]
    prompts = workload.build(tokenizer, 5)
    assert {p.text for p in prompts} == set(replies)  # 5 usable of 6; the one-turn entry is skipped
    for p in prompts:
        assert p.output_len == len(tokenizer(replies[p.text], add_special_tokens=False).input_ids)
    assert {p.output_len for p in workload.with_overrides(output_len=7).build(tokenizer, 5)} == {7}


def test_spec_bench_uses_first_turn(tokenizer):
    prompts = build("spec_bench", tokenizer, 3, path=str(DATA / "spec_bench.jsonl"))
    assert {p.text for p in prompts} == {
        "Compose a short travel blog post about a trip to Hawaii.",
        "What is 17 times 23?",
        "Write a Python function that reverses a linked list.",
    }
    assert {p.output_len for p in prompts} == {256}


def test_burstgpt_rows_become_exact_random_prompts(tokenizer):
    prompts = build("burstgpt", tokenizer, 4, path=str(DATA / "burstgpt.csv"))
    assert sorted((p.prompt_len, p.output_len) for p in prompts) == [(16, 64), (25, 30), (40, 12), (70, 8)]
    assert all(n_tokens(tokenizer, p.text) == p.prompt_len for p in prompts)
    scaled = build("burstgpt", tokenizer, 4, path=str(DATA / "burstgpt.csv"), input_len=20, output_len=5)
    assert sorted(p.prompt_len for p in scaled) == [16, 20, 20, 20] and {p.output_len for p in scaled} == {5}


@pytest.mark.parametrize("name", ["custom", "swe_bench", "mlperf"])
def test_jsonl_prompts_and_output_lengths(tokenizer, name):
    prompts = build(name, tokenizer, 3, path=str(DATA / "custom.jsonl"))
    by_start = {p.text.split()[0]: p.output_len for p in prompts}
    assert by_start == {"def": 32, "List": 48, "Summarize:": 256}


def test_input_len_caps_data_file_prompts(tokenizer):
    for p in build("custom", tokenizer, 3, path=str(DATA / "custom.jsonl"), input_len=6):
        assert p.prompt_len == n_tokens(tokenizer, p.text) <= 6


# ------------------------------------------------------------- file errors


def test_missing_file_names_path_and_workload(tokenizer, tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(WorkloadError, match=r"'sharegpt'.*not found: .*nope\.json.*PYTEST_SPECDEC_SHAREGPT_PATH"):
        build("sharegpt", tokenizer, path=missing)


def test_no_path_at_build_time(tokenizer):
    with pytest.raises(WorkloadError, match=r"'custom'.*no path was given.*PYTEST_SPECDEC_CUSTOM_PATH"):
        CATALOG["custom"].build(tokenizer, 1)


def test_bad_json_names_path_and_line(tokenizer, tmp_path):
    path = write(tmp_path, "sg.json", '[\n  {"conversations": []},\n  {"conversations": [}\n]\n')
    with pytest.raises(WorkloadError, match=rf"{path}, line 3: invalid JSON"):
        build("sharegpt", tokenizer, path=path)


@pytest.mark.parametrize(
    "body, where, field",
    [
        ('[{"id": 1}]', r"at \[0\]", "'conversations' is missing"),
        (
            '[{"conversations": [{"from": "human", "value": "hi"}]}, {"conversations": [{"from": "human"}]}]',
            r"at \[1\]\.conversations\[0\]",
            "'value' is missing",
        ),
        (
            '[{"conversations": [{"from": "human", "value": 5}]}]',
            r"at \[0\]\.conversations\[0\]",
            "'value' must be a string, got int",
        ),
        ('[{"conversations": "hello"}]', r"at \[0\]", "'conversations' must be a list"),
        ('{"conversations": []}', "top level", "expected a JSON list"),
    ],
)
def test_sharegpt_structure_errors(tokenizer, tmp_path, body, where, field):
    path = write(tmp_path, "sg.json", body)
    with pytest.raises(WorkloadError, match=rf"'sharegpt': {path}, {where}: .*{field}"):
        build("sharegpt", tokenizer, path=path)


def test_sharegpt_without_usable_entries(tokenizer, tmp_path):
    path = write(tmp_path, "sg.json", '[{"conversations": [{"from": "human", "value": "alone"}]}]')
    with pytest.raises(WorkloadError, match=rf"{path}: no usable entries"):
        build("sharegpt", tokenizer, path=path)


@pytest.mark.parametrize(
    "line3, message",
    [
        ('{"prompt": "three", ', "line 3: invalid JSON"),
        ('["prompt", "three"]', "line 3: expected a JSON object, got list"),
        ('{"text": "three"}', "line 3: field 'prompt' is missing"),
        ('{"prompt": 3}', "line 3: field 'prompt' must be a non-empty string, got int"),
        (
            '{"prompt": "three", "output_tokens": "12"}',
            "line 3: field 'output_tokens' must be an integer >= 1, got str",
        ),
        ('{"prompt": "three", "output_tokens": 0}', "line 3: field 'output_tokens' must be an integer >= 1"),
    ],
)
def test_jsonl_errors_name_path_line_and_field(tokenizer, tmp_path, line3, message):
    path = write(tmp_path, "data.jsonl", '{"prompt": "one"}\n{"prompt": "two", "output_tokens": 4}\n' + line3 + "\n")
    with pytest.raises(WorkloadError, match=rf"'custom': {path}, {message}"):
        build("custom", tokenizer, path=path)


def test_spec_bench_errors(tokenizer, tmp_path):
    path = write(tmp_path, "sb.jsonl", '{"turns": ["a"]}\n{"turns": []}\n')
    with pytest.raises(WorkloadError, match=rf"{path}, line 2: field 'turns' must be a non-empty list"):
        build("spec_bench", tokenizer, path=path)
    path = write(tmp_path, "sb2.jsonl", '{"question": "a"}\n')
    with pytest.raises(WorkloadError, match=rf"{path}, line 1: field 'turns' is missing"):
        build("spec_bench", tokenizer, path=path)


def test_burstgpt_missing_column(tokenizer, tmp_path):
    path = write(tmp_path, "b.csv", "Timestamp,Request tokens,Total tokens\n1,20,40\n")
    with pytest.raises(WorkloadError, match=rf"{path}, line 1: CSV header has no column 'Response tokens'"):
        build("burstgpt", tokenizer, path=path)


@pytest.mark.parametrize(
    "row, column",
    [
        ("3,ChatGPT,0,12", "Request tokens"),
        ("3,ChatGPT,20,0", "Response tokens"),
        ("3,ChatGPT,twenty,5", "Request tokens"),
        ("3,ChatGPT,20,", "Response tokens"),
    ],
)
def test_burstgpt_bad_counts_name_the_line(tokenizer, tmp_path, row, column):
    path = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,20,5\n" + row + "\n")
    with pytest.raises(WorkloadError, match=rf"{path}, line 3: column '{column}' must be a whole token count"):
        build("burstgpt", tokenizer, path=path)


# ------------------------------------------------------ registered builders


def test_registered_builder_works_through_resolve(tokenizer):
    calls = []

    def repeat_question(tok, num_prompts, seed):
        calls.append((num_prompts, seed))
        text = f"Question {seed}: say hello."
        return [Prompt(text, len(tok(text).input_ids), 10) for _ in range(num_prompts)]

    registered = {"hello": Workload("hello", "custom_builder", builder=repeat_question)}
    workload = resolve_workload("hello", {"output_len": 3}, registered=registered)
    prompts = workload.build(tokenizer, 4, seed=7)
    assert calls == [(4, 7)] and len(prompts) == 4
    assert {(p.text, p.output_len) for p in prompts} == {("Question 7: say hello.", 3)}
    assert workload.describe()["builder"].endswith("repeat_question")
    with pytest.raises(WorkloadError, match="'input_len' does not apply"):
        resolve_workload("hello", {"input_len": 3}, registered=registered)


def test_builder_returning_the_wrong_thing(tokenizer):
    bad = Workload("bad", "custom_builder", builder=lambda tok, n, seed: ["just text"] * n)
    with pytest.raises(WorkloadError, match="'bad': builder must return 2 Prompt objects"):
        bad.build(tokenizer, 2)


# ------------------------------------------------------------------ imports


def test_import_pulls_in_no_heavy_modules():
    code = (
        "import sys, pytest_specdec.load.workloads; "
        "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'pytest') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_file_that_is_not_utf8(tokenizer, tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"prompt": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(WorkloadError, match=rf"'custom': {path}: not UTF-8"):
        build("custom", tokenizer, path=str(path))
