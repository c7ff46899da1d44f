import pytest

from pytest_specdec.config.spec import MarkerError, ServerSpec, parse_specdec_marker

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


def parse(**kwargs):
    return parse_specdec_marker((), kwargs)


def field_of(**kwargs):
    with pytest.raises(MarkerError) as info:
        parse(**kwargs)
    return info.value.field, str(info.value)


def test_full_marker_round_trips():
    spec = parse(
        model="specdec:smollm2-135m",
        speculative_config=NGRAM,
        server_args=["--max-num-seqs", "8"],
        tensor_parallel_size=2,
        requires_gpu=True,
    )
    assert spec.method == "ngram"
    assert spec.server_args == ("--max-num-seqs", "8")
    assert spec.tensor_parallel_size == 2 and spec.requires_gpu
    assert spec.label() == "specdec:smollm2-135m [ngram k=4 tp=2] --max-num-seqs 8"


def test_reference_drops_only_the_speculative_config():
    spec = parse(model="m", speculative_config=NGRAM, server_args=["--enforce-eager"])
    ref = spec.reference()
    assert ref.speculative_config is None
    assert ref.server_args == ("--enforce-eager",) and ref.model == "m"
    assert ref != spec and ref.label() == "m [no SD] --enforce-eager"


def test_equal_configs_share_a_key_whatever_the_dict_order():
    a = parse(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    b = parse(model="m", speculative_config={"prompt_lookup_max": 3, "num_speculative_tokens": 4, "method": "ngram"})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != parse(model="m", speculative_config={**NGRAM, "num_speculative_tokens": 3})


@pytest.mark.parametrize(
    "kwargs, field, text",
    [
        ({"model": "m", "spec_config": {}}, "spec_config", "unknown specdec marker argument"),
        ({}, "model", "is required"),
        ({"model": ""}, "model", "non-empty"),
        ({"model": "m", "speculative_config": "ngram"}, "speculative_config", "must be a mapping"),
        ({"model": "m", "speculative_config": ["ngram"]}, "speculative_config", "got list"),
        (
            {"model": "m", "speculative_config": {"num_speculative_tokens": 2}},
            "speculative_config.method",
            "is required",
        ),
        (
            {"model": "m", "speculative_config": {"method": "nagram", "num_speculative_tokens": 2}},
            "speculative_config.method",
            "unknown method 'nagram'",
        ),
        (
            {"model": "m", "speculative_config": {"method": "ngram", "num_speculative_tokens": 0}},
            "speculative_config.num_speculative_tokens",
            ">= 1, got 0",
        ),
        (
            {"model": "m", "speculative_config": {"method": "ngram", "num_speculative_tokens": "4"}},
            "speculative_config.num_speculative_tokens",
            "got '4'",
        ),
        (
            {"model": "m", "speculative_config": {"method": "ngram"}},
            "speculative_config.num_speculative_tokens",
            "required",
        ),
        (
            {"model": "m", "speculative_config": {"method": "eagle3", "num_speculative_tokens": 1}},
            "speculative_config.model",
            "needs a draft model",
        ),
        (
            {
                "model": "m",
                "speculative_config": {
                    "method": "draft_model",
                    "num_speculative_tokens": 3,
                    "model": "specdec:smollm2-135m@layers=99",
                },
            },
            "speculative_config.model",
            "layers must be an integer from 1 to 29",
        ),
        ({"model": "specdec:gpt2"}, "model", "unknown bundled model"),
        ({"model": "m", "server_args": "--enforce-eager"}, "server_args", "list of strings"),
        ({"model": "m", "server_args": ["--max-num-seqs", 8]}, "server_args", "must be a string"),
        ({"model": "m", "server_args": ["--port", "8000"]}, "server_args", "--port is not allowed"),
        ({"model": "m", "server_args": ["--speculative-config={}"]}, "server_args", "speculative_config"),
        ({"model": "m", "tensor_parallel_size": 0}, "tensor_parallel_size", ">= 1"),
        ({"model": "m", "tensor_parallel_size": True}, "tensor_parallel_size", ">= 1"),
        ({"model": "m", "requires_gpu": "yes"}, "requires_gpu", "True or False"),
    ],
)
def test_bad_fields_are_named(kwargs, field, text):
    got_field, message = field_of(**kwargs)
    assert got_field == field
    assert text in message


def test_positional_arguments_are_refused():
    with pytest.raises(MarkerError, match="keyword arguments only"):
        parse_specdec_marker(("m",), {})


def test_extra_methods_extend_the_known_set():
    config = {"method": "future_mtp", "num_speculative_tokens": 1}
    with pytest.raises(MarkerError):
        parse(model="m", speculative_config=config)
    spec = parse_specdec_marker((), {"model": "m", "speculative_config": config}, extra_methods=["future_mtp"])
    assert spec.method == "future_mtp"


def test_spec_is_usable_as_dict_key():
    assert {ServerSpec("m"): 1}[ServerSpec("m", origin="elsewhere")] == 1


def test_label_tells_configs_with_the_same_method_and_k_apart():
    a = parse(model="m", speculative_config={**NGRAM, "prompt_lookup_min": 5})
    assert a.label() == "m [ngram k=4 prompt_lookup_min=5]"
    draft = parse(
        model="m",
        speculative_config={
            "method": "draft_model",
            "num_speculative_tokens": 3,
            "model": "specdec:smollm2-135m@layers=8",
        },
    )
    assert draft.label() == "m [draft_model k=3 draft=specdec:smollm2-135m@layers=8]"


SCHEDULE = "speculative_config.num_speculative_tokens_per_batch_size"


def with_schedule(rows, k=4):
    return {
        "model": "m",
        "speculative_config": {**NGRAM, "num_speculative_tokens": k, "num_speculative_tokens_per_batch_size": rows},
    }


@pytest.mark.parametrize(
    "rows, field, text",
    [
        ([], SCHEDULE, "must be a non-empty list"),
        ("1-4:2", SCHEDULE, "must be a non-empty list"),
        ({"1-4": 2}, SCHEDULE, "got {'1-4': 2}"),  # the dict form of vLLM's first proposal is not what 0.32 reads
        ([[1, 4]], f"{SCHEDULE}[0]", "3-item row"),
        ([[1, 4, 2], "5 8 1"], f"{SCHEDULE}[1]", "3-item row"),
        ([[1, 4, 2], [5, 8, 1.0]], f"{SCHEDULE}[1]", "every item must be an integer, got [5, 8, 1.0]"),
        ([[1, 4, True]], f"{SCHEDULE}[0]", "integer"),
        ([[1, 4, "2"]], f"{SCHEDULE}[0]", "integer"),
        ([[0, 4, 2]], f"{SCHEDULE}[0]", "batch sizes must be >= 1, got range 0..4"),
        ([[1, 4, 2], [8, 5, 1]], f"{SCHEDULE}[1]", "start 8 is above end 5"),
        ([[1, 4, -1]], f"{SCHEDULE}[0]", "k must be >= 0"),
        ([[1, 4, 2], [4, 8, 1]], f"{SCHEDULE}[1]", "range 4..8 overlaps range 1..4 of row [0]"),
        ([[5, 8, 1], [1, 6, 2]], f"{SCHEDULE}[0]", "range 5..8 overlaps range 1..6 of row [1]"),
        ([[2, 4, 2], [5, 8, 1]], f"{SCHEDULE}[0]", "must start at batch size 1"),
    ],
)
def test_a_bad_k_schedule_names_the_field_and_row(rows, field, text):
    got_field, message = field_of(**with_schedule(rows))
    assert got_field == field
    assert text in message
    assert message.startswith(f"{field}: ")


def test_a_k_schedule_vllm_accepts_is_accepted_as_written():
    from pytest_specdec.config.spec import check_k_schedule

    # vLLM sorts the rows itself, carries a k through a gap (9..15 run at k=1 here), runs a k above
    # num_speculative_tokens at num_speculative_tokens, and takes k=0 as "no speculation".
    rows = [[16, 64, 0], [1, 1, 6], [2, 8, 1]]
    spec = parse(**with_schedule(rows))
    assert spec.speculative_config["num_speculative_tokens_per_batch_size"] == rows  # passed to vLLM unchanged
    assert check_k_schedule(rows) == [(1, 1, 6), (2, 8, 1), (16, 64, 0)]
    assert check_k_schedule(((1, 4, 2),)) == [(1, 4, 2)]  # tuples travel to vLLM as JSON lists
    assert "num_speculative_tokens_per_batch_size=[[16, 64, 0], [1, 1, 6], [2, 8, 1]]" in spec.label()
    assert spec != parse(**with_schedule([[1, 1, 6], [2, 8, 1], [16, 64, 0]]))  # another server command
