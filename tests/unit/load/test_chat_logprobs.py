"""Chat requests ask for logprobs as chat APIs take them, and the client reads the chat shape back.

vLLM's ChatCompletionRequest has ``logprobs: bool | None`` and ``top_logprobs: int`` (at most its
--max-logprobs, 20 by default); a chat chunk's logprobs are ``content[i]`` entries with ``token``,
``logprob``, ``bytes`` and a list of ``top_logprobs`` entries, where a completion has
``logprobs.top_logprobs`` as one dict per token.  The strict fake (tests/support/fault_server.py) holds vLLM's rules.
"""

from __future__ import annotations


from tests.support.fault_server import chat_logprobs, vllm_refusal  # noqa: E402 - the strict fake's copy of vLLM's validation

from pytest_specdec.load.streaming import RequestOptions, completion_body, position_logprobs  # noqa: E402


def chat_body(logprobs):
    return completion_body("m", "hello", 8, RequestOptions(endpoint="chat", logprobs=logprobs))


def test_a_chat_request_asks_for_top_logprobs_with_a_boolean_logprobs():
    body = chat_body(2)
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    assert vllm_refusal(body, chat=True) is None


def test_a_completion_request_keeps_its_integer_logprobs():
    body = completion_body("m", "hello", 8, RequestOptions(logprobs=2))
    assert body["logprobs"] == 2 and "top_logprobs" not in body


def test_the_fake_refuses_what_vllm_s_chat_request_model_refuses():
    messages = [{"role": "user", "content": "x"}]
    assert "logprobs" in vllm_refusal({"messages": messages, "logprobs": 2}, chat=True)
    assert "logprobs" in vllm_refusal({"messages": messages, "logprobs": 1}, chat=True)
    assert "must be set to true" in vllm_refusal({"messages": messages, "top_logprobs": 2}, chat=True)
    assert "outside 0..20" in vllm_refusal({"messages": messages, "logprobs": True, "top_logprobs": 21}, chat=True)
    assert "integer" in vllm_refusal({"messages": messages, "logprobs": True, "top_logprobs": "2"}, chat=True)
    assert vllm_refusal({"messages": messages, "logprobs": True, "top_logprobs": 0}, chat=True) is None
    assert vllm_refusal({"prompt": "x", "logprobs": 2}) is None  # a completion's logprobs is a count


def test_chat_shaped_logprobs_read_as_the_completion_s_one_dict_per_token():
    shaped = chat_logprobs([" the", " of"], 2)
    assert [sorted(entry) for entry in shaped["content"]] == [["bytes", "logprob", "token", "top_logprobs"]] * 2
    positions = position_logprobs(shaped)
    assert len(positions) == 2 and all(
        len(tops) == 2 and tops[token] == -0.1 for tops, token in zip(positions, [" the", " of"])
    )
    completion = {"tokens": [" the"], "token_logprobs": [-0.1], "top_logprobs": [{" the": -0.1, " of": -2.5}]}
    assert position_logprobs(completion) == [{" the": -0.1, " of": -2.5}]
