"""SPEED-Bench from a local copy: rows in the dataset's own schema (question_id, category, messages), its
qualitative categories and throughput tiers, conversations, and placeholder prompts refused with how to rebuild."""

import json

import pytest

from pytest_specdec.load.datafiles import SPEED_BENCH_PLACEHOLDER
from pytest_specdec.load.traffic import conversation_prompt
from pytest_specdec.load.workloads import CATALOG, WorkloadError, resolve_workload


@pytest.fixture(scope="module")
def tokenizer():
    import transformers

    from pytest_specdec.serving.models import resolve_model

    return transformers.AutoTokenizer.from_pretrained(resolve_model("specdec:smollm2-135m"))


def row(number, category, *turns, system=None):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": turn} for turn in turns
    ]
    return {"question_id": f"{number:032x}", "category": category, "messages": messages}


def write(tmp_path, rows, name="speed.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


QUALITATIVE = [
    row(1, "coding", "Write a function that reverses a list.", system="You are a careful engineer."),
    row(2, "math", "What is the derivative of x squared?", "And of x cubed?"),
    row(3, "multilingual", "Traduis: bonjour le monde."),
    row(4, "coding", "Explain a Python decorator.", "Give an example.", "Now one with arguments."),
]
THROUGHPUT = [
    row(10 + i, tier, f"{tier} text {i} " * 20) for i, tier in enumerate(["low_entropy", "mixed", "high_entropy"] * 2)
]


def test_the_qualitative_split_gives_each_prompt_its_category_and_the_system_prompt_first(tokenizer, tmp_path):
    assert CATALOG["speed_bench"].kind == "speed_bench"
    path = write(tmp_path, QUALITATIVE)
    prompts = resolve_workload("speed_bench", {"path": path, "output_len": 8}).build(tokenizer, 4)
    assert sorted(p.category for p in prompts) == ["coding", "coding", "math", "multilingual"]
    first = next(p for p in prompts if p.text.startswith("You are"))
    assert first.text == "You are a careful engineer.\n\nWrite a function that reverses a list."
    assert all(p.output_len == 8 and p.prompt_len == len(tokenizer(p.text).input_ids) for p in prompts)
    # A category (or several) chosen: only its rows, with the file's categories named when none matches.
    coding = resolve_workload("speed_bench", {"path": path, "categories": "coding"}).build(tokenizer, 3)
    assert {p.category for p in coding} == {"coding"}
    with pytest.raises(
        WorkloadError, match=r"no entry of categories rag; the file's categories: coding, math, multilingual"
    ):
        resolve_workload("speed_bench", {"path": path, "categories": ["rag"]}).build(tokenizer, 1)


def test_a_throughput_split_by_entropy_tier(tokenizer, tmp_path):
    path = write(tmp_path, THROUGHPUT, "throughput_1k.jsonl")
    workload = resolve_workload("speed_bench", {"path": path, "categories": ["low_entropy", "high_entropy"]})
    prompts = workload.build(tokenizer, 8)
    assert {p.category for p in prompts} == {"low_entropy", "high_entropy"}
    assert workload.describe()["categories"] == ["low_entropy", "high_entropy"]
    with pytest.raises(WorkloadError, match="categories"):
        resolve_workload("speed_bench", {"path": path, "categories": [""]})
    with pytest.raises(WorkloadError, match="categories select entries of a file that names them"):
        resolve_workload("random_s", {"categories": "mixed"})


def test_multi_turn_rows_load_as_conversations_of_their_user_turns(tokenizer, tmp_path):
    path = write(tmp_path, QUALITATIVE)
    prompts = resolve_workload("speed_bench", {"path": path, "output_len": 16, "turns": 2}).build(tokenizer, 2)
    # Rows with fewer than two user turns are not used: the math row and the coding conversation remain.
    assert {p.category for p in prompts} == {"math", "coding"}
    math_prompt = next(p for p in prompts if p.category == "math")
    assert math_prompt.text == conversation_prompt("", "What is the derivative of x squared?")
    assert math_prompt.turns == (("And of x cubed?", 16),)


def test_placeholder_prompts_are_refused_by_name_with_how_to_rebuild_them(tokenizer, tmp_path):
    rows = QUALITATIVE[:1] + [row(7, "rag", SPEED_BENCH_PLACEHOLDER)]
    path = write(tmp_path, rows, "qualitative.jsonl")
    with pytest.raises(WorkloadError) as refused:
        resolve_workload("speed_bench", {"path": path}).build(tokenizer, 1)
    text = str(refused.value)
    assert "qualitative.jsonl, line 2 (question_id '00000000000000000000000000000007', category 'rag')" in text
    assert "placeholder prompts" in text and "specdec_bench" in text and "path=" in text
    # Refused even when the chosen category is another one: the file is not the dataset's prompts.
    with pytest.raises(WorkloadError, match="placeholder"):
        resolve_workload("speed_bench", {"path": path, "categories": "coding"}).build(tokenizer, 1)


def test_a_row_outside_the_schema_is_named(tokenizer, tmp_path):
    for bad, problem in (
        ({"category": "qa", "messages": []}, "field 'question_id' is missing"),
        ({"question_id": "x", "category": "qa", "messages": []}, "field 'messages' must be a non-empty list"),
        (
            {"question_id": "x", "category": "qa", "messages": [{"role": "assistant", "content": "hi"}]},
            "messages has no user turn",
        ),
        ({"question_id": "x", "category": "", "messages": [{"role": "user", "content": "q"}]}, "field 'category'"),
    ):
        path = write(tmp_path, [bad], "bad.jsonl")
        with pytest.raises(WorkloadError, match=f"bad.jsonl, line 1: {problem}"):
            resolve_workload("speed_bench", {"path": path}).build(tokenizer, 1)
    parquet = tmp_path / "qualitative.parquet"
    parquet.write_bytes(b"PAR1")
    with pytest.raises(WorkloadError, match="reading parquet needs pyarrow"):
        resolve_workload("speed_bench", {"path": str(parquet)}).build(tokenizer, 1)
