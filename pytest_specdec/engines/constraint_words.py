"""Each engine's own request words for an output constraint (load.constraints: json_schema, regex, choice,
tool_call), and why it refuses the ones it cannot send.

`Engine.constrain` and `Engine.check_constraint` (engines/base.py) read this table by the engine's name, so an
engine module needs no change to speak here, and an engine not in the table (a downstream one) refuses every
constraint by name at collection rather than sending a body its server would ignore or refuse.  Each entry
cites the request model it follows; re-read it before relying on it.
"""

from __future__ import annotations

import json
from typing import Any, Callable

Words = Callable[[dict, str, Any, str], dict]


def _choice_regex(choices: list[str]) -> str:
    import re

    return "(" + "|".join(re.escape(c) for c in choices) + ")"


def _vllm(body: dict, kind: str, value: Any, endpoint: str) -> dict:
    # vLLM 0.32, vllm/entrypoints/openai/completion/protocol.py and chat_completion/protocol.py:
    # `structured_outputs: StructuredOutputsParams` (vllm/sampling_params.py: exactly one of json, regex, choice,
    # grammar, json_object, structural_tag), on both routes.  A tool call is the chat route's `tools` with a
    # named `tool_choice` ({"type": "function", "function": {"name"}}), which vLLM turns into the function's
    # parameters schema for its structured outputs and streams as `delta.tool_calls[].function.arguments`.
    if kind == "tool_call":
        function = {key: value[key] for key in ("name", "description", "parameters") if key in value}
        return {
            **body,
            "tools": [{"type": "function", "function": function}],
            "tool_choice": {"type": "function", "function": {"name": value["name"]}},
        }
    field = {"json_schema": "json", "regex": "regex", "choice": "choice"}[kind]
    return {**body, "structured_outputs": {field: value}}


def _vllm_refusal(kind: str, endpoint: str, server_args: tuple[str, ...]) -> str:
    if kind != "tool_call":
        return ""
    if endpoint != "chat":
        return "sends tool calls on its chat route only: give the workload endpoint='chat'"
    if not any(arg.split("=", 1)[0] == "--tool-call-parser" for arg in server_args):
        # vLLM 0.32 answers HTTP 400 'tool_choice=function "NAME" requires --tool-call-parser to be set'.
        return "forces a named tool call only on a server started with --tool-call-parser (add it to server_args)"
    return ""


def _gbnf_literal(text: str) -> str:
    return json.dumps(text)  # GBNF string literals escape as JSON's do (\" \\ \n)


def _llamacpp(body: dict, kind: str, value: Any, endpoint: str) -> dict:
    # llama.cpp's server (tools/server/server-common.cpp, params_from_json_cmpl, b11549): `json_schema` (a
    # schema it converts to a grammar) and `grammar` (GBNF) on /completion, /v1/completions and, through the
    # OpenAI chat parser, /v1/chat/completions.  A choice list is a one-rule GBNF grammar.
    if kind == "json_schema":
        return {**body, "json_schema": value}
    return {**body, "grammar": "root ::= " + " | ".join(_gbnf_literal(c) for c in value)}


def _llamacpp_refusal(kind: str, endpoint: str, server_args: tuple[str, ...]) -> str:
    if kind == "regex":
        return "takes a JSON schema or a GBNF grammar, no regex (declare a choice or a json_schema instead)"
    if kind == "tool_call":
        return (
            "forces tool calls only through its --jinja chat templates' tool_choice 'required', not one named "
            "function; the plugin does not measure it"
        )
    return ""


def _sglang(body: dict, kind: str, value: Any, endpoint: str) -> dict:
    # SGLang's native /generate (the route the plugin streams, engines/sglang.py): `sampling_params` takes
    # `json_schema` (a JSON string), `regex` and `ebnf` (python/sglang/srt/sampling/sampling_params.py,
    # SamplingParams.__init__; docs/advanced_features/structured_outputs: one of them per request).
    sampling = dict(body.get("sampling_params") or {})
    if kind == "json_schema":
        sampling["json_schema"] = json.dumps(value)
    else:
        sampling["regex"] = value if kind == "regex" else _choice_regex(value)
    return {**body, "sampling_params": sampling}


def _sglang_refusal(kind: str, endpoint: str, server_args: tuple[str, ...]) -> str:
    if kind == "tool_call":
        return "has no chat route the plugin measures (see its chat refusal), so it sends no tool calls"
    return ""


def _trtllm(body: dict, kind: str, value: Any, endpoint: str) -> dict:
    # trtllm-serve (tensorrt_llm/serve/openai_protocol.py, ResponseFormat: `type` of "json", "json_schema",
    # "regex", "ebnf", ..., with `schema` / `regex` beside it), on CompletionRequest and ChatCompletionRequest
    # as `response_format`; its models forbid unknown fields, so nothing else is sent.  The server decodes
    # it only when started with `guided_decoding_backend: xgrammar` in its options (its docs).
    if kind == "json_schema":
        return {**body, "response_format": {"type": "json", "schema": value}}
    regex = value if kind == "regex" else _choice_regex(value)
    return {**body, "response_format": {"type": "regex", "regex": regex}}


def _trtllm_refusal(kind: str, endpoint: str, server_args: tuple[str, ...]) -> str:
    if kind == "tool_call":
        return "forces tool calls through its tool parsers, which the plugin has not read; it sends no tool calls"
    return ""


# engine name -> (its words, why it refuses a kind on an endpoint: "" when it can send it)
WORDS: dict[str, tuple[Words, Callable[[str, str, tuple], str]]] = {
    "vllm": (_vllm, _vllm_refusal),
    "llamacpp": (_llamacpp, _llamacpp_refusal),
    "sglang": (_sglang, _sglang_refusal),
    "trtllm": (_trtllm, _trtllm_refusal),
}


def refusal(engine: str, kind: str, endpoint: str, server_args: tuple[str, ...] = ()) -> str:
    """Why `engine` cannot send a `kind` constraint on `endpoint` ("" when it can)."""
    if engine not in WORDS:
        return "sends no constrained requests (the plugin knows no request words for it)"
    return WORDS[engine][1](kind, endpoint, tuple(server_args))


def constrained_body(engine: str, body: dict, kind: str, value: Any, endpoint: str) -> dict:
    """`body` (the engine's own request) with the constraint in the engine's words."""
    return WORDS[engine][0](body, kind, value, endpoint)
