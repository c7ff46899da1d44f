"""Shared prefixes, Mooncake traces, categories and conversations from files, and per-group figures."""

import json
import math
from types import SimpleNamespace

import pytest

from pytest_specdec.load.patterns import AccessPattern, PatternError, resolve_pattern
from pytest_specdec.load.traffic import conversation_prompt
from pytest_specdec.load.workloads import Workload, WorkloadError, resolve_workload
from pytest_specdec.measure.groups import GroupedFigures, breakdown, difference


@pytest.fixture(scope="module")
def tokenizer():
    import transformers

    from pytest_specdec.serving.models import resolve_model

    return transformers.AutoTokenizer.from_pretrained(resolve_model("specdec:smollm2-135m"))


def count(tokenizer, text):
    return len(tokenizer(text).input_ids)


def jsonl(tmp_path, name, objects):
    path = tmp_path / name
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects))
    return str(path)


def test_shared_prefix_prompts_are_exact_and_share_their_prefixes(tokenizer):
    workload = resolve_workload(
        "shared_prefix", {"prefix_len": 200, "input_len": 24, "output_len": 8, "num_prefixes": 3}
    )
    prompts = workload.build(tokenizer, 7, seed=1)
    assert all(p.prompt_len == count(tokenizer, p.text) == 224 and p.output_len == 8 for p in prompts)
    ids = [tokenizer(p.text).input_ids for p in prompts]
    assert ids[0][:150] == ids[3][:150] == ids[6][:150] and ids[1][:150] == ids[4][:150]
    assert ids[0][:20] != ids[1][:20] and ids[0] != ids[3]  # other prefix; same prefix, another question
    assert workload.build(tokenizer, 7, seed=1) == prompts  # seeded
    assert workload.describe()["prefix_len"] == 200
    with pytest.raises(WorkloadError, match="kind 'shared_prefix' needs num_prefixes"):
        Workload("s", "shared_prefix", input_len=8, output_len=8, prefix_len=100)
    with pytest.raises(WorkloadError, match="prefix_len and num_prefixes are for kind 'shared_prefix'"):
        Workload("r", "random", input_len=8, output_len=8, prefix_len=100)


def test_a_trace_keeps_its_order_times_lengths_and_shared_blocks(tokenizer, tmp_path):
    path = jsonl(
        tmp_path,
        "trace.jsonl",
        [
            {"timestamp": 1000, "input_length": 120, "output_length": 9, "hash_ids": [7]},
            {"timestamp": 1250, "input_length": 700, "output_length": 12, "hash_ids": [7, 8]},
            {"timestamp": 3000, "input_length": 40, "output_length": 5},
            {"timestamp": 3500, "input_length": 50, "output_length": 5},
        ],
    )
    prompts = Workload("t", "mooncake_trace", path=path).build(tokenizer, 3)
    assert [(p.prompt_len, p.output_len, p.arrival_s) for p in prompts] == [
        (120, 9, 0.0),
        (700, 12, 0.25),
        (40, 5, 2.0),
    ]
    assert all(count(tokenizer, p.text) == p.prompt_len for p in prompts)
    first, second = (tokenizer(p.text).input_ids for p in prompts[:2])
    assert first[:100] == second[:100]  # hash id 7 is one block wherever it recurs
    capped = Workload("t", "mooncake_trace", path=path, input_len=300, output_len=4).build(tokenizer, 2)
    assert [(p.prompt_len, p.output_len) for p in capped] == [(120, 4), (300, 4)]
    with pytest.raises(WorkloadError, match="the trace has 4 requests, num_prompts asks for 6"):
        Workload("t", "mooncake_trace", path=path).build(tokenizer, 6)


@pytest.mark.parametrize(
    "line, problem",
    [
        ({"timestamp": 5, "input_length": 10}, "line 2: field 'output_length' is missing"),
        ({"timestamp": -1, "input_length": 10, "output_length": 1}, "line 2: field 'timestamp' must be a number"),
        (
            {"timestamp": 1, "input_length": 10, "output_length": 1},
            "line 2: timestamp 1 is earlier than the line before",
        ),
        ({"timestamp": 5, "input_length": 0, "output_length": 1}, "line 2: field 'input_length' must be an integer"),
        ({"timestamp": 5, "input_length": 9, "output_length": 1, "hash_ids": ["a"]}, "line 2: field 'hash_ids'"),
        ("{not json", "line 2: invalid JSON"),
    ],
)
def test_a_bad_trace_line_is_named(tokenizer, tmp_path, line, problem):
    path = jsonl(tmp_path, "bad.jsonl", [{"timestamp": 2, "input_length": 10, "output_length": 1}, line])
    with pytest.raises(WorkloadError, match=f"bad.jsonl, {problem}"):
        Workload("t", "mooncake_trace", path=path).build(tokenizer, 2)


def test_categories_come_from_spec_bench_and_from_a_files_own_field(tokenizer, tmp_path):
    bench = jsonl(
        tmp_path,
        "question.jsonl",
        [
            {"question_id": 1, "category": "translation", "turns": ["Translate: bonjour"]},
            {"question_id": 2, "category": "math_reasoning", "turns": ["What is 2+2?"]},
        ],
    )
    prompts = Workload("b", "spec_bench", path=bench, output_len=8).build(tokenizer, 2)
    assert sorted(p.category for p in prompts) == ["math_reasoning", "translation"]
    own = jsonl(tmp_path, "own.jsonl", [{"prompt": "a", "task": "qa"}, {"prompt": "b", "task": "rag"}])
    prompts = resolve_workload("custom", {"path": own, "category_field": "task"}).build(tokenizer, 2)
    assert sorted(p.category for p in prompts) == ["qa", "rag"]
    bad = jsonl(tmp_path, "bad.jsonl", [{"prompt": "a", "category": 3}])
    with pytest.raises(WorkloadError, match=r"bad.jsonl, line 1: field 'category' must be a non-empty string"):
        resolve_workload("custom", {"path": bad}).build(tokenizer, 1)


def test_multi_turn_files_load_as_conversations(tokenizer, tmp_path):
    bench = jsonl(
        tmp_path,
        "mt.jsonl",
        [
            {"category": "writing", "turns": ["Write a haiku.", "Now make it rhyme.", "Shorter."]},
            {"category": "qa", "turns": ["One turn only."]},
        ],
    )
    (prompt,) = Workload("b", "spec_bench", path=bench, output_len=16, turns=3).build(tokenizer, 1)
    assert prompt.text == conversation_prompt("", "Write a haiku.") == "User: Write a haiku.\nAssistant:"
    assert prompt.prompt_len == count(tokenizer, prompt.text) and prompt.output_len == 16
    assert prompt.turns == (("Now make it rhyme.", 16), ("Shorter.", 16)) and prompt.category == "writing"
    share = tmp_path / "sharegpt.json"
    share.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "hi"},
                        {"from": "gpt", "value": "hello there friend"},
                        {"from": "human", "value": "how are you?"},
                        {"from": "gpt", "value": "fine"},
                    ]
                }
            ]
        )
    )
    (chat,) = Workload("s", "sharegpt", path=str(share), turns=2).build(tokenizer, 1)
    assert chat.output_len == len(tokenizer.encode("hello there friend", add_special_tokens=False))
    assert chat.turns == (("how are you?", len(tokenizer.encode("fine", add_special_tokens=False))),)
    with pytest.raises(WorkloadError, match="no conversation with 3 user turns or more"):
        Workload("s", "sharegpt", path=str(share), turns=3).build(tokenizer, 1)
    with pytest.raises(WorkloadError, match="turns > 1 needs a file of conversations"):
        Workload("r", "random", input_len=8, output_len=8, turns=2)
    assert conversation_prompt("User: a\nAssistant:", "b", reply=" x") == "User: a\nAssistant: x\nUser: b\nAssistant:"


def test_trace_and_conversation_patterns_validate_and_describe():
    trace = resolve_pattern("trace_replay", {"replay_speed": 4, "num_prompts": 3})
    assert trace.describe()["arrivals"] == "the trace's own times / 4" and trace.describe()["replay_speed"] == 4.0
    prompts = [SimpleNamespace(arrival_s=t) for t in (0.0, 2.0, 4.0)]
    assert trace.offsets_for(prompts) == [0.0, 0.5, 1.0]
    assert resolve_pattern("multi_turn").describe()["think_time_s"] == 1.0
    assert "replay_speed" not in resolve_pattern("throughput_low").describe()
    for bad in ({"replay_speed": 0}, {"replay_speed": float("inf")}):
        with pytest.raises(PatternError, match="replay_speed must be"):
            resolve_pattern("trace_replay", bad)
    with pytest.raises(PatternError, match="think_time_s must be a number of seconds >= 0"):
        AccessPattern("x", think_time_s=-1)


def record(
    index, *, success=True, tpot_ms=20.0, ttft=0.1, drafted=8, accepted=4, steps=2, category=None, turn=None, key=None
):
    tokens = 11
    return SimpleNamespace(
        index=index,
        prompt_key=key,
        success=success,
        output_tokens=tokens,
        ttft=ttft,
        latency=ttft + tpot_ms / 1000 * (tokens - 1),
        category=category,
        turn=turn,
        spec_decoding={"num_draft_tokens": drafted, "num_accepted_draft_tokens": accepted, "num_spec_steps": steps},
    )


def runs(records):
    return [SimpleNamespace(records=records)]


def test_per_category_figures_and_whether_categories_differ():
    reference = runs([record(i, tpot_ms=40.0, category=c) for i, c in enumerate("aabb")])
    sd = runs(
        [
            record(0, tpot_ms=10.0, accepted=7, category="a"),
            record(1, tpot_ms=12.0, accepted=6, category="a"),
            record(2, tpot_ms=30.0, accepted=1, category="b"),
            record(3, tpot_ms=34.0, accepted=2, category="b"),
        ]
    )
    a, b = breakdown(reference, sd, lambda r: r.category)
    assert (a.name, a.requests, a.acceptance_rate, a.acceptance_length) == ("a", 2, 13 / 16, 1 + 13 / 4)
    assert a.speedup_median_tpot == pytest.approx(40 / 11) and b.speedup_median_tpot == pytest.approx(40 / 32)
    assert (a.request_rate_low, a.request_rate_high) == (6 / 8, 7 / 8)
    # Two requests a side cannot reach p < 0.05 by permutation (the smallest p of 2 + 2 is 1/3).
    assert difference([a, b]).startswith("no difference measurable: the highest and lowest groups' prompts")
    many = runs(
        [record(i, accepted=6 + i % 2 if i < 8 else 1 + i % 2, category="a" if i < 8 else "b") for i in range(16)]
    )
    separated = breakdown(
        runs([record(i, category="a" if i < 8 else "b") for i in range(16)]), many, lambda r: r.category
    )
    text = difference(separated)
    assert text.startswith("differs: a 81% (8 prompts) against b 19% (8 prompts); permutation test of prompts, p = ")
    assert float(text.split("p = ")[1].split()[0]) < 0.01
    overlapping = breakdown(
        reference,
        runs([record(i, accepted=4 + (i % 2), category=c) for i, c in enumerate("aabb")]),
        lambda r: r.category,
    )
    assert difference(overlapping).startswith("no difference measurable")
    assert difference(separated[:1]).startswith("no difference measurable: fewer than two groups")


def test_groups_differ_by_their_prompts_not_by_the_repeats_that_sent_them_again():
    # Three repeats of one run send the same 4 prompts per group (a data file as long as the run), and greedy
    # decoding accepts the same on each: 12 requests a group, but 4 prompts.  Counted as requests, 12 against
    # 12 separate at p < 0.01; 4 prompts against 4 cannot go below 2/70 (0.029), nor below 0.05 after pairs.
    def repeats(group, offset):
        return [
            record(i, accepted=offset + i % 4, category=group, key=f"{group}{i % 4}") for i in range(12)
        ]  # the prompt's key: the same prompt in every repeat

    sd = runs(repeats("a", 4) + repeats("b", 0) + repeats("c", 2))
    reference = runs([record(i, category=c) for c in "abc" for i in range(12)])
    groups = breakdown(reference, sd, lambda r: r.category)
    a = groups[0]
    assert a.requests == 12 and len(a.request_rates) == 12 and a.prompt_rates == (4 / 8, 5 / 8, 6 / 8, 7 / 8)
    text = difference(groups)
    assert text.startswith("no difference measurable: the highest and lowest groups' prompts overlap too much: ")
    assert "a 69% (4 prompts, 12 requests) against b 19% (4 prompts, 12 requests)" in text
    assert float(text.split("p = ")[1].split()[0]) > 0.05
    # Had each request been a prompt of its own, the same rates would have "differed".
    alone = breakdown(reference, runs([replace_key(r, None) for r in sd[0].records]), lambda r: r.category)
    assert difference(alone).startswith("differs: a 69% (12 prompts) against b 19% (12 prompts)")


def replace_key(record_, key):
    return SimpleNamespace(**{**vars(record_), "prompt_key": key})


def test_per_turn_figures_are_ordered_by_turn_and_unavailable_without_sd_figures():
    reference = runs([record(0, turn=t) for t in (0, 1, 2)])
    sd = runs([record(0, turn=2), record(0, turn=0), record(0, turn=1)])
    sd[0].records[0].spec_decoding = None
    turns = breakdown(reference, sd, lambda r: r.turn)
    assert [t.name for t in turns] == ["turn 1", "turn 2", "turn 3"]
    assert math.isnan(turns[2].acceptance_rate) and "per-request SD figures" in turns[2].problem
    assert breakdown(reference, sd, lambda r: r.category) == []


def test_a_category_check_names_what_fell_short():
    result = SimpleNamespace(
        reference_runs=runs([record(i, tpot_ms=40.0, category=c) for i, c in enumerate("ab")]),
        speculative_runs=runs([record(0, accepted=7, category="a"), record(1, accepted=1, category="b")]),
    )
    groups = GroupedFigures(result)
    assert groups.assert_category("a", min_rate=0.8, min_speedup=1.5) is result
    with pytest.raises(AssertionError, match=r"category 'b' \(1 requests\) fell short:\n  acceptance_rate: 0.125"):
        groups.assert_category("b", min_rate=0.5)
    with pytest.raises(AssertionError, match="no category 'c' in this result; it has: a, b"):
        groups.assert_category("c", min_rate=0.1)
    with pytest.raises(ValueError, match="grouping must be one of category, turn"):
        groups.by("workload")


def test_groups_reach_the_summary_the_terminal_and_a_plot():
    from pytest_specdec.report.group_figures import group_lines, group_plot

    reference = runs([record(i, tpot_ms=40.0, category=c) for i, c in enumerate("ab")])
    sd = runs([record(0, tpot_ms=10.0, accepted=7, category="a"), record(1, tpot_ms=30.0, accepted=1, category="b")])
    groups = breakdown(reference, sd, lambda r: r.category)
    row = {
        "test": "t.py::test_c",
        "config": "ngram k=4",
        "workload": "spec_bench",
        "groups": {"category": {"figures": [g.as_dict() for g in groups], "difference": difference(groups)}},
    }
    lines = group_lines([row])
    assert lines[0] == (
        "t.py::test_c by category (accepted / length / TPOT speedup): a 88% / 4.50 / 4.00x, b 12% / 1.50 / 1.33x"
    )
    assert lines[1].startswith("  no difference measurable: fewer than two groups")
    from pytest_specdec.report.group_figures import group_sections

    text = "\n".join(group_sections([row], str))
    assert (
        "**Per category**" in text
        and "| t.py::test_c | a | 1 | 88% | 88%-88% | 4.50 | 4.00x | 25.0 / 100.0 | 100 / 100 |" in text
    )
    assert "| t.py::test_c | b | 1 | 12% | 12%-12% | 1.50 | 1.33x | 25.0 / 33.3 | 100 / 100 |" in text
    assert group_plot([row], "category").startswith(b"\x89PNG") and group_plot([row], "turn") is None


def test_a_trace_or_conversation_reproduces_with_the_plugins_own_client(tmp_path):
    import shlex

    from pytest_specdec.measure.reproduce import reproduce_commands

    command = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    run = SimpleNamespace(server_command=command, spec=None)
    server = SimpleNamespace(command=command, url="http://127.0.0.1:8000", model="m")
    pattern = resolve_pattern("trace_replay", {"replay_speed": 2, "num_prompts": 4})
    commands = reproduce_commands(run, run, server, pattern, tmp_path / "p.jsonl", "tok", 3, True, replay=True)
    argv = shlex.split(commands["bench"])
    assert argv[:4] == ["/venv/bin/python", "-m", "pytest_specdec", "replay"]
    assert json.loads(argv[argv.index("--pattern") + 1])["replay_speed"] == 2.0
    assert argv[argv.index("--prompts") + 1] == str(tmp_path / "p.jsonl") and "--ignore-eos" in argv
    plain = reproduce_commands(
        run, run, server, resolve_pattern("throughput_low"), tmp_path / "p.jsonl", "tok", 3, True
    )
    assert shlex.split(plain["bench"])[2:4] == ["pytest_specdec", "bench"]
    # Another engine's load is rerun by the client that spoke its body (vllm bench serve would send vLLM's:
    # on llama.cpp it dropped cache_prompt: false).
    llamacpp = shlex.split(
        reproduce_commands(
            run, run, server, resolve_pattern("throughput_low"), tmp_path / "p.jsonl", "tok", 3, True, engine="llamacpp"
        )["bench"]
    )
    assert llamacpp[2:4] == ["pytest_specdec", "replay"] and llamacpp[llamacpp.index("--engine") + 1] == "llamacpp"
