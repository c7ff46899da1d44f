"""`endpoint="chat"`: the prompt as the user's message on /v1/chat/completions, for every engine with a chat route.

Pure logic (the workload, the body, the route, the row) and whole plugin runs against the strict fault server,
which refuses a chat body on /v1/completions, a completion body on /v1/chat/completions, and (as trtllm-serve)
any field its ChatCompletionRequest does not declare.  The real servers' chat streams are checked in
tests/integration/test_openai_chat_cpu.py.
"""

import asyncio
import fnmatch
import json

import httpx
import pytest
from tests.support.fault_suite import ENGINE_SUITE, MODEL, FaultServers, run_suite

from pytest_specdec.config.plans import plan_for
from pytest_specdec.config.settings import Settings
from pytest_specdec.engines import engine_named
from pytest_specdec.engines.base import EngineConfigError
from pytest_specdec.load.client import run_load
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.streaming import RequestOptions, completion_body, request_path
from pytest_specdec.load.workloads import Prompt, WorkloadError, resolve_workload
from pytest_specdec.measure.reproduce import reproduce_commands
from pytest_specdec.report.row.sampling import sampling_cells, sampling_markdown

from tests.support.fault_server import prompt_refusal, trtllm_refusal  # noqa: E402 - the strict fake's own validation


def test_the_endpoint_is_a_workload_setting_validated_and_described_only_when_chat():
    chat = resolve_workload("code_edit", {"input_len": 64, "output_len": 8, "endpoint": "chat"})
    plain = resolve_workload("code_edit", {"input_len": 64, "output_len": 8})
    assert chat.endpoint == "chat" and plain.endpoint == "completions"
    # Older baselines and reports describe completions workloads exactly as before; chat is a different traffic.
    assert "endpoint" not in plain.describe() and chat.describe()["endpoint"] == "chat"
    assert chat.describe() != plain.describe()
    with pytest.raises(WorkloadError, match="override 'endpoint' must be one of completions, chat, got 'responses'"):
        resolve_workload("code_edit", {"input_len": 64, "output_len": 8, "endpoint": "responses"})
    with pytest.raises(WorkloadError, match="endpoint must be one of completions, chat"):
        type(plain)(name="x", kind="code_edit", input_len=8, output_len=8, endpoint="chat/completions")


def test_a_chat_body_carries_the_prompt_as_the_users_message_and_goes_to_the_chat_route():
    options = RequestOptions(endpoint="chat")
    body = completion_body("m", "Fix the bug.", 16, options)
    assert body["messages"] == [{"role": "user", "content": "Fix the bug."}] and "prompt" not in body
    assert body["max_tokens"] == 16 and body["ignore_eos"] is True and body["stream"] is True
    # A conversation's messages go as they are.
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert completion_body("m", turns, 16, options)["messages"] == turns
    assert "messages" not in completion_body("m", "x", 16, RequestOptions()) and prompt_refusal(body, chat=True) is None
    for name in ("vllm", "llamacpp", "trtllm"):
        engine = engine_named(name)
        assert request_path(engine, "chat") == "/v1/chat/completions"
        assert request_path(engine, "completions") == engine.completion_path
        # Each engine's own fields ride along unchanged; trtllm-serve's strict validation takes the chat body.
        payload = engine.completion_payload(body)
        assert payload["messages"] == body["messages"]
    assert trtllm_refusal(engine_named("trtllm").completion_payload(body), chat=True) is None
    assert trtllm_refusal(engine_named("vllm").completion_payload(body), chat=True) == (
        "return_token_ids: Extra inputs are not permitted"
    )
    with pytest.raises(ValueError, match="endpoint must be one of completions, chat, got 'responses'"):
        RequestOptions(endpoint="responses")


def test_sglang_refuses_chat_at_collection_naming_the_field_and_why():
    with pytest.raises(EngineConfigError) as refused:
        engine_named("sglang").check_endpoint("chat")
    assert refused.value.field == "workload.endpoint" and "meta_info" in str(refused.value)
    engine_named("sglang").check_endpoint("completions")

    markers = {
        "specdec": pytest.mark.specdec(
            model=MODEL, engine="sglang", speculative_config={"method": "ngram", "num_speculative_tokens": 4}
        ).mark,
        "workload": pytest.mark.workload("code_edit", input_len=64, output_len=8, endpoint="chat").mark,
    }
    plan = plan_for(markers.get, Settings(device="gpu"), {}, {})
    assert plan.error.startswith("invalid @pytest.mark.workload: workload.endpoint: SGLang cannot serve 'chat'")


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp", "trtllm"])
def test_the_strict_fake_refuses_a_body_on_the_other_route(dialect):
    servers = FaultServers()
    try:
        url = servers.start("ok", dialect=dialect)
        prompts = [Prompt("one two three", 3, 8)]
        pattern = AccessPattern("p", num_prompts=1)
        for endpoint in ("completions", "chat"):
            load = asyncio.run(run_load(url, MODEL, prompts, pattern, engine=dialect, endpoint=endpoint))
            assert load.records[0].success and load.records[0].output_tokens == 8, load.records[0].error
            assert load.records[0].text.split() and load.records[0].ttft > 0
        # The chat body sent to the completions route: refused, as a real server refuses a missing prompt.
        body = completion_body(MODEL, "one two", 8, RequestOptions(endpoint="chat"))
        refused = httpx.post(f"{url}/v1/completions", json=engine_named(dialect).completion_payload(body), timeout=5)
        assert refused.status_code == 400 and ("prompt" in refused.text or "messages" in refused.text)
        assert httpx.post(f"{url}/v1/responses", json=body, timeout=5).status_code == 404
    finally:
        servers.stop()


def test_a_conversation_on_chat_sends_the_replies_as_assistant_messages():
    servers = FaultServers()
    try:
        url = servers.start("ok")
        conversation = Prompt("first question", 2, 4, turns=(("second question", 4), ("third question", 4)))
        pattern = AccessPattern("p", num_prompts=1)
        load = asyncio.run(run_load(url, MODEL, [conversation], pattern, endpoint="chat"))
        # The fake refuses any message without a role of system, user or assistant or without text content:
        # three turns answered means the history went as alternating messages.
        assert [r.success for r in load.records] == [True, True, True], [r.error for r in load.records]
        assert [r.turn for r in load.records] == [0, 1, 2]
    finally:
        servers.stop()


class _Record:
    output_tokens, success = 8, True


class _Run:
    records = [_Record()]


class _Result:
    def __init__(self, workload: dict):
        self.workload, self.reference_runs, self.speculative_runs = workload, [_Run()], [_Run()]


def test_rows_and_reports_say_which_endpoint_a_test_used():
    cells = sampling_cells(_Result({"endpoint": "chat", "ignore_eos": True}))
    plain = sampling_cells(_Result({"ignore_eos": True}))
    assert cells["endpoint"] == "chat" and plain["endpoint"] == "completions"
    rows = [{"test": "t.py::chat", **cells}, {"test": "t.py::plain", **plain}]
    table = "\n".join(sampling_markdown(rows, str))
    assert "| t.py::chat | chat | greedy | length |" in table and "t.py::plain" not in table


def test_a_chat_runs_reproduce_command_is_the_plugins_replay_with_the_endpoint():
    class Server:
        url, model, command = "http://127.0.0.1:1", MODEL, ["python", "-m", "vllm.entrypoints.openai.api_server"]

    run = type("Run", (), {"server_command": Server.command, "spec": None})()
    commands = reproduce_commands(
        run, run, Server(), AccessPattern("p", num_prompts=1), "prompts.jsonl", "tok", 0, True, endpoint="chat"
    )
    assert "pytest_specdec replay" in commands["bench"] and "--endpoint chat" in commands["bench"]


CHAT_MATRIX = {
    # The same figures as on completions (test_faults.py's ENGINE_MATRIX), from each engine's chat stream.
    "vllm": "*FIGURES acceptance=0.250 drafted=* counted=64.0 ids=?8, 8, 8, 8? match=1.000*",
    "llamacpp": "*FIGURES acceptance=0.250 drafted=?{'num_draft_tokens': 16, 'num_accepted_draft_tokens': 4}, "
    "*counted=64.0 ids=?8, 8, 8, 8? match=1.000*",
    "trtllm": "*FIGURES acceptance=0.250 drafted=?None, None, None, None? counted=64.0 ids=?0, 0, 0, 0? match=1.000*",
}


@pytest.mark.parametrize("engine", list(CHAT_MATRIX))
def test_each_engines_chat_stream_gives_its_figures_end_to_end(tmp_path, monkeypatch, engine):
    servers = FaultServers()
    try:
        urls = {"reference": servers.start("ok", dialect=engine), "speculative": servers.start("ok", dialect=engine)}
        (tmp_path / "test_engine.py").write_text(ENGINE_SUITE)
        monkeypatch.setenv("FAULT_ENGINE", engine)
        monkeypatch.setenv("FAULT_ENDPOINT", "chat")
        ngram = {"prompt_lookup_min": 1, "prompt_lookup_max": 4} if engine == "trtllm" else {}
        monkeypatch.setenv("FAULT_NGRAM", json.dumps(ngram))
        done = run_suite(tmp_path, urls, "--specdec-report", str(tmp_path / "report"))
    finally:
        servers.stop()
    out = done.stdout + done.stderr
    assert "1 passed" in out, out[-3000:]
    assert any(fnmatch.fnmatch(line, CHAT_MATRIX[engine]) for line in out.splitlines()), out[-3000:]
    (row,) = json.loads((tmp_path / "report" / "results.json").read_text())["results"]
    assert row["endpoint"] == "chat"
