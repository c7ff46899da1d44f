"""The traffic production meets beyond single-turn prompts: shared prefixes, traces, conversations.

- ``shared_prefix``: ``num_prefixes`` long prefixes of ``prefix_len`` tokens
  (a system prompt, a document, a repository), request i on prefix
  ``i % num_prefixes`` followed by its own question of ``input_len`` tokens;
  every prompt is exactly ``prefix_len + input_len`` tokens.  With prefix
  caching on (vLLM's default), the comparison measures SD where real serving
  runs it: on a cached prefix.
- ``mooncake_trace``: the request trace format of Mooncake (Kimi's serving
  traces) that GuideLLM and AIPerf replay: one JSON object per line with
  ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``
  (one id per 512-token block; requests with a block id in common share that
  block's tokens, so prefix caching sees what the trace saw).  The first
  ``num_prompts`` requests are used in order, each with its arrival time;
  the ``trace_replay`` access pattern sends them at those times.
- conversations (sharegpt or spec_bench files with ``turns`` > 1): each turn's
  prompt is the conversation so far, with the real reply of every earlier
  turn (`conversation_prompt`); `load.conversations` sends them.
"""

from __future__ import annotations

import json
from typing import Any

from .datafiles import _error, _jsonl_lines, _type_problem
from .synthetic import Tok, _fit, random_prompt, rng_for
from .workloads import Prompt, Workload, WorkloadError, conversation_prompt, register_builder  # noqa: F401

TRACE_BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for a block of this many tokens
_TRACE_FIELDS = ("timestamp", "input_length", "output_length")


def build_shared_prefix(w: Workload, tok: Tok, n: int, base: list[int]) -> list[Prompt]:
    who = f"workload {w.name!r}"
    prefixes = [random_prompt(tok, rng_for(base, 3, p), w.prefix_len, who) for p in range(w.num_prefixes)]
    pool = tok.allowed_ids()
    out = []
    for i in range(n):
        prefix = prefixes[i % w.num_prefixes]
        rng = rng_for(base, 4, i)
        question = [int(x) for x in rng.choice(pool, w.input_len)]
        # Fitted as a whole: the prefix stays as it is, the question takes up the tokenizer's merges.
        text = _fit(tok, rng, w.prefix_len + w.input_len, lambda s, prefix=prefix: prefix + s, question, pool, who)
        out.append(Prompt(text, w.prefix_len + w.input_len, w.output_len))
    return out


def _trace_entries(w: Workload, n: int) -> list[dict[str, Any]]:
    entries, previous = [], None
    for where, obj in _jsonl_lines(w):
        for key in _TRACE_FIELDS:
            if key not in obj:
                raise _error(w, where, f"field {key!r} is missing")
        stamp = obj["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp < 0:
            raise _error(w, where, _type_problem("timestamp", stamp, "a number of milliseconds >= 0"))
        if previous is not None and stamp < previous:
            raise _error(
                w, where, f"timestamp {stamp} is earlier than the line before ({previous}): a trace is in arrival order"
            )
        for key in ("input_length", "output_length"):
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _error(w, where, _type_problem(key, value, "an integer >= 1"))
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise _error(w, where, _type_problem("hash_ids", ids, "a list of integers"))
        previous = stamp
        entries.append({**obj, "where": where})
        if len(entries) == n:
            break
    if len(entries) < n:
        raise WorkloadError(
            f"workload {w.name!r}: {w.path}: the trace has {len(entries)} requests, num_prompts asks for {n}"
        )
    return entries


def build_trace(w: Workload, tok: Tok, n: int, base: list[int]) -> list[Prompt]:
    """The trace's first `n` requests in order: arrival times from its timestamps, lengths as it gives them
    (capped by the input_len / output_len overrides, to scale a trace down), blocks shared by hash id."""
    entries = _trace_entries(w, n)
    pool = tok.allowed_ids()
    start = entries[0]["timestamp"]
    blocks: dict[int, list[int]] = {}
    out = []
    for i, entry in enumerate(entries):
        length = min(entry["input_length"], w.input_len or entry["input_length"])
        if length <= tok.n_special:
            raise WorkloadError(
                f"workload {w.name!r}: {w.path}, {entry['where']}: input_length {length} leaves "
                "no room beside the tokenizer's special tokens"
            )
        ids: list[int] = []
        for block in entry.get("hash_ids", []):
            if block not in blocks:  # seeded by the id alone: the same block wherever it recurs
                rng = rng_for(base, 5, block & 0x7FFFFFFF)
                blocks[block] = [int(x) for x in rng.choice(pool, TRACE_BLOCK_TOKENS)]
            ids += blocks[block]
        rng = rng_for(base, 6, i)
        wanted = length - tok.n_special
        ids = (ids + [int(x) for x in rng.choice(pool, max(0, wanted - len(ids)))])[:wanted]
        text = _fit(tok, rng, length, lambda s: s, ids, pool, f"workload {w.name!r}")
        output = min(entry["output_length"], w.output_len or entry["output_length"])
        out.append(Prompt(text, length, output, arrival_s=(entry["timestamp"] - start) / 1000.0))
    return out


def trace_line(prompt: Prompt) -> str:
    """A prompt as a line of the replay file `reproduce` writes (text, lengths, arrival, category, turns)."""
    return json.dumps(
        {
            "prompt": prompt.text,
            "output_tokens": prompt.output_len,
            "prompt_len": prompt.prompt_len,
            "arrival_s": prompt.arrival_s,
            "category": prompt.category,
            "turns": [list(turn) for turn in prompt.turns],
        }
    )


register_builder(("shared_prefix",), build_shared_prefix, Tok)
register_builder(("mooncake_trace",), build_trace, Tok)
