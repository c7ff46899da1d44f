"""Constrained traffic without a server: declaring a constraint, each engine's request words (as strict as
its request model), the refusals at collection, and the validity check's messages."""

import json
from types import SimpleNamespace

import pytest

from pytest_specdec.engines import EngineConfigError, engine_named
from pytest_specdec.load.constraints import Constraint, ConstraintError, parse_constraint, streamed_text
from pytest_specdec.load.structured import bundled_entries, constraint_kinds
from pytest_specdec.load.workloads import WorkloadError, resolve_workload
from pytest_specdec.measure.validity import check_output, side_validity, validity_failure

SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
TOOL = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_a_constraint_is_checked_at_declaration():
    assert parse_constraint({"json_schema": SCHEMA}).kind == "json_schema"
    assert parse_constraint({"tool": TOOL}).label() == "tool_call(get_weather)"
    for bad, said in [
        ({"json_schema": {"type": "nonsense"}}, "not a valid JSON schema"),
        ({"regex": "("}, "does not compile"),
        ({"choice": []}, "non-empty list"),
        ({"grammar": "x"}, "unknown constraint 'grammar'"),
        ({"regex": "a", "choice": ["a"]}, "one key"),
        ({"tool": {"name": "f", "strict": True}}, "unknown function field 'strict'"),
    ]:
        with pytest.raises(ConstraintError, match=said):
            parse_constraint(bad)


def test_a_workload_override_constrains_every_prompt_and_unconstrained_drops_them():
    workload = resolve_workload("code_edit", {"constraint": {"regex": "[a-z]+"}})
    assert workload.describe()["constraint"] == {"kind": "regex", "value": "[a-z]+"}
    assert constraint_kinds(workload) == {"regex"}
    with pytest.raises(WorkloadError, match="does not compile"):
        resolve_workload("code_edit", {"constraint": {"regex": "("}})
    structured = resolve_workload("structured")
    assert constraint_kinds(structured) == {"json_schema", "choice"}
    assert constraint_kinds(structured.with_overrides(unconstrained=True)) == set()
    assert constraint_kinds(resolve_workload("tool_calls")) == {"tool_call"}
    assert len(bundled_entries("structured")) == 6 and len(bundled_entries("tool_calls")) == 3


def test_vllm_sends_structured_outputs_and_named_tool_calls():
    vllm = engine_named("vllm")
    body = vllm.constrain({"prompt": "p"}, "json_schema", SCHEMA, "completions")
    assert body["structured_outputs"] == {"json": SCHEMA}
    assert vllm.constrain({}, "choice", ["a", "b"], "completions")["structured_outputs"] == {"choice": ["a", "b"]}
    assert vllm.constrain({}, "regex", "[0-9]+", "chat")["structured_outputs"] == {"regex": "[0-9]+"}
    tool = vllm.constrain({"messages": []}, "tool_call", TOOL, "chat")
    assert tool["tools"] == [{"type": "function", "function": TOOL}]
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # vLLM's StructuredOutputsParams takes exactly one kind: the body never carries two.
    assert sum(k in body["structured_outputs"] for k in ("json", "regex", "choice", "grammar")) == 1


def test_vllm_refuses_a_named_tool_call_it_would_answer_with_http_400():
    vllm = engine_named("vllm")
    with pytest.raises(EngineConfigError, match="endpoint='chat'"):
        vllm.check_constraint("tool_call", "completions")
    with pytest.raises(EngineConfigError, match="--tool-call-parser"):
        vllm.check_constraint("tool_call", "chat", ("--enforce-eager",))
    vllm.check_constraint("tool_call", "chat", ("--tool-call-parser=hermes",))
    vllm.check_constraint("regex", "completions")


def test_llamacpp_sends_json_schema_or_a_gbnf_choice_and_refuses_regex_and_tools_by_name():
    llama = engine_named("llamacpp")
    assert llama.constrain({}, "json_schema", SCHEMA, "completions") == {"json_schema": SCHEMA}
    assert llama.constrain({}, "choice", [' "a"', "b"], "completions") == {"grammar": 'root ::= " \\"a\\"" | "b"'}
    for kind, said in [("regex", "no regex"), ("tool_call", "tool_choice 'required'")]:
        with pytest.raises(EngineConfigError, match=f"llama.cpp.*{kind}.*{said}"):
            llama.check_constraint(kind, "completions")


def test_sglang_and_trtllm_send_their_own_fields():
    sglang = engine_named("sglang")
    body = sglang.constrain({"text": "p", "sampling_params": {"max_new_tokens": 4}}, "json_schema", SCHEMA, "")
    assert json.loads(body["sampling_params"]["json_schema"]) == SCHEMA
    assert body["sampling_params"]["max_new_tokens"] == 4
    assert sglang.constrain({}, "choice", ["a.b", "c"], "")["sampling_params"] == {"regex": "(a\\.b|c)"}
    with pytest.raises(EngineConfigError, match="SGLang"):
        sglang.check_constraint("tool_call", "chat")
    trtllm = engine_named("trtllm")
    assert trtllm.constrain({}, "json_schema", SCHEMA, "completions")["response_format"] == {
        "type": "json",
        "schema": SCHEMA,
    }
    assert trtllm.constrain({}, "regex", "x+", "completions")["response_format"] == {"type": "regex", "regex": "x+"}
    with pytest.raises(EngineConfigError, match="TensorRT-LLM"):
        trtllm.check_constraint("tool_call", "chat")


def test_the_validator_names_what_is_wrong():
    schema = parse_constraint({"json_schema": SCHEMA})
    assert check_output(schema, '{"age": 3}') is None
    assert check_output(schema, '{"age": "3"}') == "schema violation at age: '3' is not of type 'integer'"
    assert check_output(schema, '{"age": 3').startswith("not JSON:")
    assert check_output(parse_constraint({"regex": "[0-9]+"}), "12a") == "does not match the regex '[0-9]+'"
    assert "none of the choices" in check_output(parse_constraint({"choice": ["yes", "no"]}), "maybe")
    assert check_output(parse_constraint({"tool": TOOL}), '{"city": 5}').startswith("schema violation at city")


def _run(texts, constraint, repeat=0):
    records = [
        SimpleNamespace(index=i, text=t, success=True, output_tokens=len(t), constraint=constraint)
        for i, t in enumerate(texts)
    ]
    return SimpleNamespace(repeat=repeat, records=records)


def test_an_invalid_output_fails_naming_request_side_output_and_message_and_who_is_to_blame():
    schema = parse_constraint({"json_schema": SCHEMA})
    reference = side_validity("reference", [_run(['{"age": 1}', '{"age": 2}'], schema)])
    speculative = side_validity("speculative", [_run(['{"age": 1}', '{"age": "two"}'], schema)], max_tokens=100)
    assert (reference.valid, speculative.valid, len(speculative.invalid)) == (2, 1, 1)
    message = validity_failure(reference, speculative, "m [ngram k=4]")
    assert "speculative: 1 of 2 invalid" in message
    assert "request 1 [json_schema(age)]: schema violation at age: 'two' is not of type 'integer'" in message
    assert "output '{\"age\": \"two\"}'" in message
    assert "SD's drafted tokens bypassed the grammar" in message
    both = validity_failure(speculative, speculative, "m")
    assert "the engine's constrained decoding" in both and "not speculative decoding" in both
    assert validity_failure(reference, reference, "m") is None
    cut = side_validity("speculative", [_run(['{"age": 1'], schema)], max_tokens=5)
    assert "stopped at max_tokens" in cut.invalid[0].describe()


def test_a_forced_tool_calls_arguments_are_its_streamed_text():
    assert streamed_text({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}}) == '{"ci'
    assert streamed_text({"text": "a"}) == "a" and streamed_text({"delta": {"content": "b"}}) == "b"
    assert streamed_text({"delta": {"role": "assistant"}}) == ""
    assert isinstance(parse_constraint(Constraint("regex", '"a"')), Constraint)
