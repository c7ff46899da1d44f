"""Real vLLM CPU servers with the bundled model (run with --specdec-cpu).

Tests are grouped by server configuration by the plugin, so this module
starts the reference server once and the n-gram server once.  Every server
starts with ``--enforce-eager`` (~25-35 s instead of 70 s here and 156-171 s
on a slower box of this kind): no test here is about vLLM's compilation.  That
a whole pytest run leaves no server behind is checked on the README's main job
(test_examples_cpu.py: every server it starts, vLLM's and llama.cpp's), not with a
server of its own here.
"""

import time

import httpx
import pytest

from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workloads import Prompt
from pytest_specdec.serving.server import ServerStartError, process_start, still_exiting, tagged_pids

BUNDLED = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
EAGER = ["--enforce-eager"]
# Repetitive code: the continuation repeats the prompt, so n-gram drafts get accepted.
REPETITIVE_CODE = (
    "def add(a, b):\n    return a + b\n\n"
    "def add(a, b):\n    return a + b\n\n"
    "def add(a, b):\n    return a + b\n\n"
    "def add("
)


def complete(server, prompt, max_tokens=32):
    response = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    response.raise_for_status()
    return response.json()["choices"][0]


def test_reference_server_answers_with_the_bundled_model(specdec_server, specdec_pool):
    server = specdec_server(model=BUNDLED, server_args=EAGER)
    # The agreement test's reference, still up: the tests with servers of their own (builds, gate, ...)
    # run after every pooled test (conftest.py), so nothing stopped it in between.
    assert specdec_pool.starts[server.spec.key] == 1, dict(specdec_pool.starts)
    choice = complete(server, "The capital of France is", max_tokens=8)
    assert "Paris" in choice["text"]
    assert not server.spec_decode_counters().present  # no speculation, no SD counters
    assert server.log_path.is_file() and "--kv-cache-memory-bytes" in server.log_path.read_text()


def prefix_cache_hits(server) -> float:
    return sum(s.value for s in server.metrics() if s.name == "vllm:prefix_cache_hits_total")


def test_a_run_meets_no_prefix_an_earlier_run_left_in_vllms_cache(specdec_server):
    # The shared reference has served other tests' runs: a run of prompts it had seen before was served from
    # its prefix cache while a fresh SD server prefilled them (TTFT 0.45x at concurrency 1 in the main job).
    server = specdec_server(model=BUNDLED, server_args=EAGER)
    # Long enough to fill cache blocks (only whole blocks are cached); the same prompt twice in one run.
    text = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(60))
    twice, once = AccessPattern("c1", max_concurrency=1, num_prompts=2), AccessPattern("c1", num_prompts=1)
    prompts = [Prompt(text, 0, 2)]

    def hits_of(pattern, **options):
        before = prefix_cache_hits(server)
        run = generate_load(server.url, server.model, prompts, pattern, **options)
        assert all(r.success for r in run.records), [r.error for r in run.records]
        return prefix_cache_hits(server) - before

    assert hits_of(twice) > 0  # within a run, the cache serves the prompt's second request
    assert hits_of(once) == 0  # the next run of the same prompt meets none of it
    # The control: runs that share the server's cache, as vllm bench serve's do, find the earlier one's.
    hits_of(once, isolate_cache=False)  # caches the prompt where every run without a salt looks
    assert hits_of(once, isolate_cache=False) > 0


@pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=EAGER)
def test_ngram_counters_move_on_a_repetitive_prompt(specdec):
    server = specdec.server()
    before = server.spec_decode_counters()
    complete(server, REPETITIVE_CODE, max_tokens=48)
    after = server.spec_decode_counters()
    # vLLM exposes when each engine's counters were created: the same process before and after.
    assert after.created and after.created == before.created and after.engines == before.engines
    delta = after.delta(before, where=server.url)
    assert delta.present
    assert delta.num_drafts > 0 and delta.num_draft_tokens >= delta.num_drafts
    assert delta.num_accepted_tokens > 0
    assert sum(delta.accepted_per_position.values()) == delta.num_accepted_tokens
    assert 0 < delta.acceptance_rate <= 1 and 1 < delta.acceptance_length <= 1 + NGRAM["num_speculative_tokens"]


@pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=EAGER)
def test_a_second_test_with_the_same_config_reuses_the_server(specdec, specdec_pool):
    server = specdec.server()
    assert specdec_pool.starts[specdec.spec.key] == 1
    assert complete(server, REPETITIVE_CODE, max_tokens=8)["text"]


def test_stopping_a_real_server_leaves_no_process(specdec_server, specdec_pool):
    # The reference: the n-gram group (moved to this module's n-gram test) ends with test_sampling_cpu.py's
    # draws on the reference's server, so this reuses the server that is up.
    server = specdec_server(model=BUNDLED, server_args=EAGER)
    pids = tagged_pids(server.tag)
    assert server.pid in pids and len(pids) >= 2  # the API server and vLLM's engine core
    # Each process's start time tells it from a process given its pid later (a reused pid is not a leak).
    # (A short-lived helper the server spawned may be gone already: nothing of it to wait for.)
    started = {pid: found[1] for pid in pids if (found := process_start(pid))}
    specdec_pool.stop_running()
    assert tagged_pids(server.tag) == []
    # A killed process loses its tag before it is gone; stop() waits for the very processes it started.
    assert still_exiting(started) == [], {pid: process_start(pid) for pid in still_exiting(started)}


def test_broken_speculative_config_fails_with_vllms_complaint(specdec_server):
    broken = {**NGRAM, "prompt_lookup_min": 5, "prompt_lookup_max": 2}
    began = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        specdec_server(model=BUNDLED, speculative_config=broken, server_args=EAGER)
    message = str(info.value)
    assert "exited with code" in message and "during start-up" in message
    assert "prompt_lookup_min=5 must be <= prompt_lookup_max=2" in message  # vLLM's own words
    assert time.monotonic() - began < 120
