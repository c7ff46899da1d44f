"""A server that lies, stalls or dies on purpose: fault injection for the verdict tests.

Speaks enough of vLLM's OpenAI API (``/health``, ``/v1/models``, streamed
``/v1/completions`` and ``/v1/chat/completions``, Prometheus ``/metrics`` with the SD counters) for the
plugin to measure it in endpoint mode, and breaks in one way per mode.  It
never stands in for a measurement the product promises: every figure it
yields is made up, and the tests only check that the plugin either computes
the figure correctly or fails with the fault named.

    python fault_server.py --port P --model NAME [--mode MODE] [--variant N]

Modes:
  ok               a well-behaved server (counters grow, token ids, usage)
  no-counters      /metrics has no vllm:spec_decode_* counters
  counter-reset    counters start again from zero after the first requests (a pod restart)
  replica-switch   /metrics alternates between two replicas (other _created times)
  no-token-ids     streams text without token_ids (older vLLM, other engines)
  no-usage         the stream ends without the usage chunk
  bare-stream      neither token ids nor usage: text only (llama.cpp, older vLLM)
  alias            serves two names; the counters carry the first, the test uses the second
  mixed-k          drafts 8 tokens a step with acceptance length 7, where the marker says k=4
  error-event      an error event arrives mid-stream
  broken-stream    the connection closes mid-stream
  wrong-model      /v1/models lists another model
  stall            stops answering mid-run (the third request never finishes)
  die              the process exits mid-run
  metrics-timeout  /metrics never answers
  cold-start       the first request decodes ten times slower, each later one closer to warm (a cold GPU server)
  cold-forever     every request is slower than the one before (a server that never settles)
  drift            decodes three times slower once told to (POST /fault/slow: the machine slowed mid-session)
  queued           its metrics say one request runs at a time, the rest wait, and each finished one was preempted
``--variant`` changes the generated text, so two servers can disagree.
``--dialect llamacpp`` speaks llama-server's formats instead of vLLM's: ``llamacpp:spec_decode_*``
counters without labels, token ids under each chunk's ``__verbose.tokens``, and the final chunk's
``timings.draft_n``/``draft_n_accepted``.  ``--dialect trtllm`` speaks trtllm-serve's: /metrics is
a JSON list of iteration statistics (``specDecodingStats``) that each read drains, and the stream
carries text only.  ``--dialect sglang`` answers SGLang's native /generate: running totals of text and
``output_ids`` with each request's SD figures in ``meta_info`` (``spec_verify_ct``,
``spec_accept_histogram``, ``spec_num_proposed_drafts``), version at /server_info.  The modes apply
as they do to vLLM's formats ("no-counters": no SD statistics).
``--dialect toy`` speaks the toy engine of tests/support/toy_engine.py: it requires ``toy_drafts: true`` in the
body, names token ids ``ids``, has no /metrics, and puts each request's ``toy_sd`` on its last event.
``--facts JSON`` adds engine facts: ``version`` (served at /version, or as /props' ``build_info``
in the llamacpp dialect) and the labels of
``vllm:cache_config_info`` (e.g. ``{"enable_prefix_caching": "False"}``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = (
    "ok",
    "no-counters",
    "counter-reset",
    "replica-switch",
    "no-token-ids",
    "no-usage",
    "bare-stream",
    "alias",
    "mixed-k",
    "error-event",
    "broken-stream",
    "wrong-model",
    "stall",
    "die",
    "metrics-timeout",
    "cold-start",
    "cold-forever",
    "drift",
    "ttft-slow-first-run",
    "queued",
    "useful-drafts",  # sglang: spec_num_proposed_drafts counts only the drafts it could fill, not k a step
)
CHUNK_S = 0.002  # the time between two streamed chunks of a warm server
# trtllm-serve's CompletionRequest (tensorrt_llm/serve/openai_protocol.py): a pydantic model with
# extra="forbid", so any other field, vLLM's return_token_ids included, is a 400.
TRTLLM_COMPLETION_FIELDS = frozenset(
    {
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "lora_request",
        "prompt_ignore_length",
        "use_beam_search",
        "top_k",
        "top_p_min",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "early_stopping",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "return_context_logits",
        "detokenize",
        "thinking_token_budget",
        "add_special_tokens",
        "response_format",
        "disaggregated_params",
        "priority",
        "conversation_params",
    }
)
TRTLLM_STREAM_OPTIONS = frozenset({"include_usage", "continuous_usage_stats"})
# Its ChatCompletionRequest (the same file, also extra="forbid"): messages where a completion has a prompt,
# max_tokens accepted as the alias of max_completion_tokens.
TRTLLM_CHAT_FIELDS = (TRTLLM_COMPLETION_FIELDS - {"prompt", "suffix", "echo", "best_of", "logprobs"}) | {
    "messages",
    "logprobs",
    "top_logprobs",
    "best_of",
    "echo",
    "tools",
    "tool_choice",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "documents",
    "cache_salt",
}
ROUTES = ("/v1/completions", "/v1/chat/completions")
# SGLang's SamplingParams (python/sglang/srt/sampling/sampling_params.py, a keyword-only struct): /generate
# builds it from the request's sampling_params, so any other key is refused (TypeError, the request fails).
SGLANG_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_new_tokens",
        "n",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "custom_params",
        "stream_interval",
        "logit_bias",
        "sampling_seed",
    }
)


def sglang_refusal(request: dict) -> str | None:
    """What SGLang's /generate says about `request` (None when it passes): a text, and sampling_params
    whose every key SamplingParams takes."""
    if not isinstance(request.get("text"), str):
        return "text: a prompt string is required"
    params = request.get("sampling_params") or {}
    if not isinstance(params, dict):
        return f"sampling_params must be an object, got {params!r}"
    unknown = sorted(set(params) - SGLANG_SAMPLING_KEYS)
    return f"SamplingParams.__init__() got an unexpected keyword argument '{unknown[0]}'" if unknown else None


def sglang_spec_meta(mode: str, steps: int) -> dict:
    """A request's SD figures after `steps` verify steps at k = 4, each accepting one draft: every step's 4
    slots counted as proposed, or (``useful-drafts``) only the drafts filled, fewer and no multiple of k."""
    proposed = 3 * steps + 1 if mode == "useful-drafts" and steps else 4 * steps
    return {"spec_verify_ct": steps, "spec_accept_histogram": [0, steps], "spec_num_proposed_drafts": proposed}


def trtllm_refusal(request: dict, chat: bool = False) -> str | None:
    """What trtllm-serve's request validation says about `request`, None when it passes."""
    unknown = sorted(set(request) - (TRTLLM_CHAT_FIELDS if chat else TRTLLM_COMPLETION_FIELDS))
    unknown += [
        f"stream_options.{key}" for key in sorted(set(request.get("stream_options") or {}) - TRTLLM_STREAM_OPTIONS)
    ]
    return f"{unknown[0]}: Extra inputs are not permitted" if unknown else None


# vLLM's default --max-logprobs (vllm/config/model.py, max_logprobs: 20): more top logprobs are refused.
VLLM_MAX_LOGPROBS = 20


def vllm_chat_logprobs_refusal(request: dict) -> str | None:
    """What vLLM's ChatCompletionRequest (vllm/entrypoints/openai/chat_completion/protocol.py) says about a
    chat's ``logprobs: bool | None`` and ``top_logprobs: int`` (None when they pass): an integer logprobs is
    no boolean, top ones need ``logprobs: true`` and at most --max-logprobs of them."""
    logprobs, top = request.get("logprobs"), request.get("top_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        return f"logprobs: Input should be a valid boolean, got {logprobs!r}"
    if top is None:
        return None
    if isinstance(top, bool) or not isinstance(top, int):
        return f"top_logprobs: `top_logprobs` must be an integer, got {top!r}"
    if not 0 <= top <= VLLM_MAX_LOGPROBS:
        return f"top_logprobs: {top} is outside 0..{VLLM_MAX_LOGPROBS} (--max-logprobs)"
    if top > 0 and not logprobs:
        return "top_logprobs: when using `top_logprobs`, `logprobs` must be set to true."
    return None


def chat_logprobs(words: list[str], top: int) -> dict:
    """A chat chunk's ``logprobs`` as vLLM streams them: one ``content`` entry per token (``token``,
    ``logprob``, ``bytes``) with its ``top_logprobs`` as a list of such entries, the sampled token first."""

    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    alternatives = [f" {WORDS[(WORDS.index(word.strip()) + n) % len(WORDS)]}" for word in words for n in (1, 2)]
    content = []
    for position, word in enumerate(words):
        tops = [entry(word, -0.1), *(entry(alt, -2.5 - n) for n, alt in enumerate(alternatives[2 * position :][:2]))]
        content.append({**entry(word, -0.1), "top_logprobs": tops[:top]})
    return {"content": content}


def vllm_refusal(request: dict, chat: bool = False) -> str | None:
    """What vLLM's request validation says about the fields the plugin sends it beyond OpenAI's (None when
    they pass): ``cache_salt`` must be a non-empty string of at most 128 characters without '@', '/', '\\'
    or NUL (vllm/entrypoints/generate/base/protocol.py, validate_cache_salt); a chat's logprobs as
    `vllm_chat_logprobs_refusal` says."""
    if chat and (refusal := vllm_chat_logprobs_refusal(request)):
        return refusal
    salt = request.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        return "Parameter 'cache_salt' must be a non-empty string if provided."
    if len(salt) > 128 or any(char in salt for char in "@/\\\0"):
        return "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\', or NUL."
    return None


def prompt_refusal(request: dict, chat: bool) -> str | None:
    """What an OpenAI server's validation says about the prompt of `request` on its route: a completion
    needs a text ``prompt``; a chat completion needs ``messages``, each a role and a text content."""
    if not chat:
        return None if isinstance(request.get("prompt"), str) else "prompt: Field required (a string)"
    messages = request.get("messages")
    if "prompt" in request or not isinstance(messages, list) or not messages:
        return "messages: Field required (a non-empty list), and a chat completion takes no prompt"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            return f"messages: each needs a role of system, user or assistant, got {message!r}"
        if not isinstance(message.get("content"), str):
            return f"messages: each needs a text content, got {message!r}"
    return None


def prompt_text(request: dict) -> str:
    """The text the fake's tokens derive from: the prompt, or the chat's messages in a template of its own."""
    if "messages" in request:
        return "".join(f"<|{m['role']}|>{m['content']}" for m in request["messages"]) + "<|assistant|>"
    return request["prompt"]


# Words the bundled model's tokenizer keeps as one token each (with their leading space):
# a text-only stream of n of them tokenizes back to exactly n tokens.
WORDS = (
    "the of and to in is that for it with as on was be at by this have from or one had not but what all "
    "were when we there can an your which their said if do will each about how up out them then she many "
    "some so"
).split()
ALIAS = "first-served-name"


class State:
    def __init__(self, mode: str, model: str, variant: int, facts: dict | None = None, dialect: str = "vllm"):
        self.mode, self.model, self.variant, self.facts = mode, model, variant, dict(facts or {})
        self.dialect = dialect
        self.iterations: list[dict] = []  # trtllm: iteration statistics not yet read
        self.chunk_s = CHUNK_S
        self.content_spread = 0.0
        self.lock = threading.Lock()
        self.requests = 0
        self.drafts = self.draft_tokens = self.accepted = 0
        self.created = time.time()
        self.scrapes = 0
        self.metrics_asked = 0  # GET /metrics requests received, answered or not (GET /fault/metrics-asked)
        self.slow_first_left = 4  # ttft-slow-first-run: measured requests still to be slowed
        self.since_measured = 0  # cold-forever: requests since the last measured one
        self.in_flight = 0  # requests being answered now: the running (and, queued, waiting) gauges

    def count(self, tokens: int) -> None:
        with self.lock:
            self.requests += 1
            if self.mode == "mixed-k":  # a server run with k=8, accepting 6 of 8 per step
                steps = max(1, tokens // 7)
                self.drafts += steps
                self.draft_tokens += 8 * steps
                self.accepted += 6 * steps
            else:
                drafted, accepted = request_drafting(tokens)  # acceptance length 2, rate 25%
                self.drafts += max(1, tokens // 2)
                self.draft_tokens += drafted
                self.accepted += accepted
                stats = {
                    "numDraftTokens": drafted,
                    "numAcceptedTokens": accepted,
                    "numRequestsWithDraftTokens": max(1, tokens // 2),
                }
                self.iterations.append(
                    {
                        "iter": self.requests,
                        "numActiveRequests": 1,
                        **({"specDecodingStats": stats} if self.mode != "no-counters" else {}),
                    }
                )
            # The first request after /metrics was first read: inside the measured run, however many
            # warm-up rounds went before it (the warm-up reads no counters).
            if self.mode == "counter-reset" and self.scrapes and not getattr(self, "was_reset", False):
                self.was_reset = True
                # The pod restarted: a new process, counters from zero.
                self.drafts = self.draft_tokens = self.accepted = 0
                self.created = time.time()

    def metrics(self) -> str:
        if self.dialect == "llamacpp":
            return self.llamacpp_metrics()
        if self.dialect == "trtllm":  # drained on read, as trtllm-serve's /metrics is
            with self.lock:
                self.scrapes += 1
                entries, self.iterations = self.iterations, []
            return json.dumps(entries)
        with self.lock:
            self.scrapes += 1
            drafts, draft_tokens, accepted, created = self.drafts, self.draft_tokens, self.accepted, self.created
            if self.mode == "replica-switch" and self.scrapes % 2 == 0:
                # Another replica behind the load balancer: its own process and history.
                drafts, draft_tokens, accepted, created = (
                    drafts + 500,
                    draft_tokens + 2000,
                    accepted + 700,
                    created - 3600,
                )
            in_flight, requests = self.in_flight, self.requests
        running = min(in_flight, 1) if self.mode == "queued" else in_flight
        gauge = f'{{engine="0",model_name="{self.model}"}}'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            f"vllm:num_requests_running{gauge} {float(running)}",
            f"vllm:num_requests_waiting{gauge} {float(in_flight - running)}",
            f"vllm:kv_cache_usage_perc{gauge} {0.05 * running}",
            f"vllm:num_preemptions_total{gauge} {float(requests if self.mode == 'queued' else 0)}",
        ]
        info = {k: v for k, v in self.facts.items() if k != "version"}
        if info:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted({"engine": "0", **info}.items()))
            lines += ["# TYPE vllm:cache_config_info gauge", f"vllm:cache_config_info{{{labels}}} 1.0"]
        if self.mode != "no-counters":
            # vLLM labels its counters with the first served name only.
            labels = f'engine="0",model_name="{ALIAS if self.mode == "alias" else self.model}"'
            for name, value in (
                ("num_drafts", drafts),
                ("num_draft_tokens", draft_tokens),
                ("num_accepted_tokens", accepted),
            ):
                lines += [
                    f"# TYPE vllm:spec_decode_{name} counter",
                    f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
                    f"vllm:spec_decode_{name}_created{{{labels}}} {created}",
                ]
            # Per position as vLLM counts them: never more acceptances at a position than drafts.
            shares = (1, 1, 1, 1, 1, 1, 0, 0) if self.mode == "mixed-k" else (0.5, 0.3, 0.15, 0.05)
            per_position = (
                [drafts * share for share in shares]
                if self.mode == "mixed-k"
                else [round(accepted * share) for share in shares]
            )
            for position, value in enumerate(per_position):
                lines.append(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}} '
                    f"{float(value)}"
                )
        return "\n".join(lines) + "\n"

    def llamacpp_metrics(self) -> str:
        """llama-server's /metrics: one model per server, so no labels; per position as it counts them."""
        with self.lock:
            self.scrapes += 1
            drafts, draft_tokens, accepted = self.drafts, self.draft_tokens, self.accepted
        lines = ["# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {accepted}"]
        if self.mode != "no-counters":
            for name, value in (
                ("num_draft_tokens", draft_tokens),
                ("num_accepted_tokens", accepted),
                ("num_drafts", drafts),
            ):
                lines += [
                    f"# TYPE llamacpp:spec_decode_{name}_total counter",
                    f"llamacpp:spec_decode_{name}_total {value}",
                ]
            for position, share in enumerate((0.5, 0.3, 0.15, 0.05)):
                lines.append(
                    f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{position}"}} '
                    f"{round(accepted * share)}"
                )
        return "\n".join(lines) + "\n"


def request_drafting(tokens: int) -> tuple[int, int]:
    """(draft tokens, accepted) of one request of `tokens` outputs, as `State.count` adds them up."""
    steps = max(1, tokens // 2)
    return 4 * steps, tokens - steps


def chunk_s(mode: str, number: int, base: float = CHUNK_S) -> float:
    """Seconds between chunks of request `number` (1-based) in `mode`, `base` once warm."""
    CHUNK_S = base  # noqa: N806 (the module's default, overridden per server by --chunk-s)
    if mode == "cold-start":  # 10x slower at first, settling geometrically, as the H100's first server did
        return CHUNK_S * (1 + 9 * 0.4 ** (number - 1))
    if mode == "cold-forever":  # 25% slower every request: rounds never agree, whatever the jitter
        return CHUNK_S * 1.25**number
    if mode == "drift-slowed":
        return 3 * CHUNK_S
    return CHUNK_S


def tokens_for(prompt: str, count: int, variant: int) -> list[int]:
    seed = hashlib.sha256(f"{variant}:{prompt}".encode()).digest()
    return [100 + seed[i % len(seed)] % 50 for i in range(count)]


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _json(self, code: int, payload) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {})
            elif self.path == "/version" and "version" in state.facts and state.dialect in ("vllm", "trtllm"):
                self._json(200, {"version": state.facts["version"]})
            elif self.path == "/server_info" and state.dialect == "sglang" and "version" in state.facts:
                self._json(200, {"version": state.facts["version"], "tp_size": 1})
            elif self.path == "/props" and state.dialect == "llamacpp":  # llama-server always has it
                self._json(200, {"build_info": state.facts.get("version", "b0-unknown"), "total_slots": 16})
            elif self.path == "/v1/models":
                served = (
                    ["someone-else"]
                    if state.mode == "wrong-model"
                    else [ALIAS, state.model]
                    if state.mode == "alias"
                    else [state.model]
                )
                self._json(200, {"object": "list", "data": [{"id": name} for name in served]})
            elif self.path == "/metrics" and state.dialect == "toy":  # the toy engine has no metrics page
                self._json(404, {"error": "not found"})
            elif self.path == "/fault/metrics-asked":  # the fake's own count, for tests of how often it is read
                self._json(200, {"metrics_asked": state.metrics_asked})
            elif self.path == "/metrics":
                with state.lock:
                    state.metrics_asked += 1
                if state.mode == "metrics-timeout":
                    time.sleep(3600)
                body = state.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self._json(404, {"error": "not found"})

        def _event(self, payload) -> None:
            data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_POST(self):
            with state.lock:
                state.in_flight += 1
            try:
                self._post()
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _post(self):
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/fault/slow" and state.mode == "drift":
                state.mode = "drift-slowed"
                self._json(200, {"mode": state.mode})
                return
            if state.dialect == "sglang":
                self._sglang_generate(request)
                return
            if self.path not in ROUTES:
                self._json(404, {"detail": f"Not Found: {self.path}"})
                return
            chat = self.path == "/v1/chat/completions"
            if state.dialect == "toy" and not request.get("toy_drafts"):  # its own request field, required
                self._json(400, {"error": "toy servers need toy_drafts: true"})
                return
            if state.dialect == "trtllm" and (refusal := trtllm_refusal(request, chat)):
                self._json(400, {"object": "error", "message": refusal, "type": "BadRequestError", "code": 400})
                return
            if state.dialect == "vllm" and (refusal := vllm_refusal(request, chat)):
                self._json(400, {"object": "error", "message": refusal, "type": "BadRequestError", "code": 400})
                return
            if refusal := prompt_refusal(request, chat):
                self._json(400, {"object": "error", "message": refusal, "type": "BadRequestError", "code": 400})
                return
            if request.get("model") != state.model:
                self._json(404, {"error": {"message": f"model {request.get('model')!r} does not exist"}})
                return
            count = int(request.get("max_tokens", 16))
            with state.lock:
                number = state.requests + 1
                if state.mode == "cold-forever":
                    # Slower from the start of each warm-up: a measured request (over 16 tokens: warm-up ones
                    # ask for 16 at most) starts the count again, so a second warm-up still answers in time.
                    state.since_measured = 0 if count > 16 else state.since_measured + 1
                    number = state.since_measured or 16  # a measured request: as slow as a long warm-up's end
            ids = tokens_for(prompt_text(request), count, state.variant)
            # --content-spread: this server's pace depends on the prompt, as SD's does on what it can draft
            # (the same prompt always paces the same; the reference's pace does not depend on it).
            digest = hashlib.sha256(prompt_text(request).encode()).digest()[0] / 255
            pace = (1 + state.content_spread * (2 * digest - 1)) if count > 16 else 1.0
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            # ttft-slow-first-run: the first measured run's requests (warm-up ones ask for 16 tokens at most)
            # wait 80 ms before their first token: a side cold for one run, fine when measured again.
            if state.mode == "ttft-slow-first-run" and count > 16:
                with state.lock:
                    slow, state.slow_first_left = state.slow_first_left > 0, state.slow_first_left - 1
                if slow:
                    time.sleep(0.08)
            kind = "chat.completion.chunk" if chat else "text_completion"
            if chat:  # OpenAI's chat stream opens with the reply's role, before any token
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                self._event({"id": "chatcmpl-1", "object": kind, "model": state.model, "choices": [role]})
            for position in range(0, count, 2):  # two tokens per chunk, as SD packs them
                if state.mode == "die" and number >= 3 and position >= 4:
                    os._exit(17)
                if state.mode == "stall" and number >= 3 and position >= 4:
                    time.sleep(3600)
                if state.mode == "broken-stream" and number >= 2 and position >= 4:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # mid-chunk: the client sees a cut stream
                    return
                if state.mode == "error-event" and number >= 2 and position >= 4:
                    self._event({"error": {"message": "engine crashed", "type": "InternalServerError", "code": 500}})
                    break
                chunk_ids = ids[position : position + 2]
                text = "".join(f" {WORDS[(token - 100) % len(WORDS)]}" for token in chunk_ids)
                choice = {
                    "index": 0,
                    **({"delta": {"content": text}} if chat else {"text": text}),
                    "finish_reason": None,
                }
                if chat and request.get("logprobs") is True and state.dialect == "vllm":
                    choice["logprobs"] = chat_logprobs(
                        [f" {w}" for w in text.split()], request.get("top_logprobs") or 0
                    )
                event = {"id": "cmpl-1", "object": kind, "model": state.model, "choices": [choice]}
                if state.mode not in ("no-token-ids", "bare-stream") and state.dialect != "trtllm":
                    if state.dialect == "llamacpp":
                        if request.get("verbose"):  # what "verbose": true adds to a chunk
                            event["__verbose"] = {"tokens": chunk_ids}
                    elif state.dialect == "toy":
                        choice["ids"] = chunk_ids  # its own name for them
                    elif request.get("return_token_ids"):  # vLLM streams ids only when asked
                        choice["token_ids"] = chunk_ids
                self._event(event)
                time.sleep(chunk_s(state.mode, number, state.chunk_s) * pace)
            else:
                if state.dialect == "llamacpp":  # the last chunk: finish_reason, usage and timings together
                    drafted, accepted = request_drafting(count)
                    timings = {"predicted_n": count, "predicted_ms": 1.0}
                    if drafted and state.mode != "no-counters":
                        timings.update(draft_n=drafted, draft_n_accepted=accepted)
                    last = {"delta": {}} if chat else {"text": ""}
                    self._event(
                        {
                            "choices": [{**last, "index": 0, "finish_reason": "length"}],
                            "model": state.model,
                            "object": kind,
                            "timings": timings,
                            "usage": {"completion_tokens": count, "prompt_tokens": 1, "total_tokens": count + 1},
                        }
                    )
                elif state.dialect == "toy":  # its per-request SD figures ride on the last event, in its names
                    drafted, accepted = request_drafting(count)
                    self._event(
                        {
                            "choices": [],
                            "usage": {"prompt_tokens": 1, "completion_tokens": count, "total_tokens": count + 1},
                            "toy_sd": {"steps": max(1, count // 2), "proposed": drafted, "accepted": accepted},
                        }
                    )
                elif state.mode not in ("no-usage", "bare-stream"):
                    self._event(
                        {
                            "id": "cmpl-1",
                            "object": kind,
                            "model": state.model,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": len(prompt_text(request).split()) or 1,
                                "completion_tokens": count,
                                "total_tokens": count + 1,
                            },
                        }
                    )
            # Counted before the stream ends, as vLLM's output loop records its metrics before the API server
            # writes the last chunk: a client that has its reply reads counters that include it.
            state.count(count)
            self._event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _sglang_generate(self, request: dict) -> None:
            """SGLang's native /generate, streamed: running totals of text and output_ids, and meta_info
            with the request's own SD figures so far (k = 4, one draft accepted per verify step, proposals
            counted either way SGLang's releases count them: `sglang_spec_meta`)."""
            if self.path != "/generate":
                self._json(404, {"detail": f"Not Found: {self.path}"})
                return
            if refusal := sglang_refusal(request):
                self._json(400, {"error": {"message": refusal}})
                return
            with state.lock:
                number = state.requests + 1
            count = int((request.get("sampling_params") or {}).get("max_new_tokens", 16))
            ids = tokens_for(request.get("text", ""), count, state.variant)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for end in range(2, count + 2, 2):
                if state.mode == "die" and number >= 3 and end > 4:
                    os._exit(17)
                so_far = ids[: min(end, count)]
                steps = len(so_far) // 2  # each verify step: one accepted draft and the bonus token
                meta = {
                    "id": f"req-{number}",
                    "prompt_tokens": 1,
                    "completion_tokens": len(so_far),
                    "finish_reason": {"type": "length", "length": count} if end >= count else None,
                }
                if state.mode != "no-counters":
                    meta.update(sglang_spec_meta(state.mode, steps))
                self._event(
                    {
                        "text": "".join(f" {WORDS[(t - 100) % len(WORDS)]}" for t in so_far),
                        "output_ids": so_far,
                        "meta_info": meta,
                    }
                )
                time.sleep(chunk_s(state.mode, number, state.chunk_s))
            # Counted before the stream ends, as vLLM's output loop records its metrics before the API server
            # writes the last chunk: a client that has its reply reads counters that include it.
            state.count(count)
            self._event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--variant", type=int, default=0)
    parser.add_argument("--facts", type=json.loads, default={})
    parser.add_argument("--chunk-s", type=float, default=CHUNK_S)
    parser.add_argument("--content-spread", type=float, default=0.0)  # pace 1 +- this, by prompt
    parser.add_argument("--dialect", choices=("vllm", "llamacpp", "trtllm", "sglang", "toy"), default="vllm")
    args = parser.parse_args()
    state = State(args.mode, args.model, args.variant, args.facts, args.dialect)
    state.chunk_s = args.chunk_s
    state.content_spread = args.content_spread
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state))
    server.daemon_threads = True
    print(f"fault server {args.mode} on {args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
