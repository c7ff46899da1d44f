"""SGLang: ``python -m sglang.launch_server`` with its ``--speculative-*`` flags.

The test's vLLM vocabulary maps onto SGLang's algorithms: eagle -> EAGLE,
eagle3 -> EAGLE3 (both with ``--speculative-draft-model-path``), draft_model
-> STANDALONE, ngram -> NGRAM, mtp -> EAGLE without a draft path (what SGLang
makes of NEXTN, ``_resolve_speculative_algorithm_alias`` in
python/sglang/srt/server_args.py).  Every draft is a chain of k tokens
(top-k 1, BFS breadth 1), as vLLM drafts, so the two engines measure the same
thing.  SGLang's own SD figures are per request, in the response's
``meta_info``; its /metrics has only windowed gauges, no counters.  Its
OpenAI routes leave ``meta_info`` out of streamed chunks
(serving_completions.py), so the plugin streams from the native
``/generate``: each event carries the request's text and ``output_ids`` so
far (or only the new ones, with ``--incremental-streaming-output``) and its
``meta_info``, whose ``completion_tokens`` tells the two apart.  The run's SD
counters are the sum of its requests' figures (`counts_per_request`).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Engine, EngineConfigError, LaunchRequest, draft_length, refuse_unknown
from .per_request import ACCEPTED, DRAFT_LENGTH, DRAFTED, HISTOGRAM, PER_STEP_ACCEPTED, PER_STEP_DRAFTED, PROBLEM, STEPS
from .forced_acceptance import FORCING_KEY, forced_keys, LENGTH_KEY, RATES_KEY, ForcedAcceptance, forced_acceptance

TITLE = "SGLang"
# vLLM method -> SGLang --speculative-algorithm.
ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "ngram": "NGRAM", "mtp": "EAGLE"}
DRAFT_METHODS = frozenset({"eagle", "eagle3", "draft_model"})
# Forced acceptance (engines/forced_acceptance.py) through the environment (sgl-project/sglang#10771, srt/environ.py):
# a mean length counting the target's token, applied in the EAGLE verify step shared by EAGLE, EAGLE-3 and MTP.
SIMULATE_LENGTH = "SGLANG_SIMULATE_ACC_LEN"
SIMULATE_METHOD = "SGLANG_SIMULATE_ACC_METHOD"
SIMULATED_METHODS = frozenset({"eagle", "eagle3", "mtp"})
# Flags `command` sets itself: a second copy in server_args would silently win (argparse keeps the last).
OWN_FLAGS = (
    "--model-path",
    "--model",
    "--host",  # the plugin binds loopback and claims a free port itself
    "--port",
    "--served-model-name",  # requests and readiness use the marker's model name
    "--tp-size",
    "--enable-metrics",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-ngram-min-bfs-breadth",
    "--speculative-ngram-max-bfs-breadth",
)
# sglang PR #21225 (Mar 2026) removed --speculative-ngram-{min,max}-match-window-size with no alias (an
# upstream test asserts they are gone): a flag for vLLM's prompt_lookup_* fails on one side of that change.
WINDOW_REFUSAL = (
    "has no setting for the n-gram match window: --speculative-ngram-min/max-match-window-size "
    "were removed in 2026 (sglang PR #21225) without an alias, so no flag works on both old and "
    "new releases; leave {key} out"
)

# meta_info names across releases (spec_decoding_meta.py keeps the older ones as aliases "for one release";
# older tokenizer_manager.py sent spec_accept_token_num/spec_draft_token_num and no histogram).
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
VERIFY_KEY = "spec_verify_ct"
# What NGRAM runs whatever the test declares (server_args.py defaults, read by the n-gram worker as
# server_args.speculative_ngram_max_trie_depth and speculative_ngram_match_type; releases before sglang PR
# #21225 matched suffix windows of 1-12 tokens, --speculative-ngram-min/max-match-window-size): a trie of
# the n-grams of every prompt and output it has served, matched BFS up to depth 18.  cpp_ngram/result.cpp
# pads a draft the trie cannot fill with token 0 and counts the padding as proposed; one cache serves
# every request.  The plugin refuses prompt_lookup_min/max (no flag works across releases, WINDOW_REFUSAL),
# so a test that leaves them out declares vLLM's prompt lookup of 5-grams and gets SGLang's own matcher.
NGRAM_ACCEPTANCE_NOTE = (
    "SGLang's NGRAM runs its own matcher, not the test's: a BFS trie of the n-grams of every prompt and output "
    "it has served (--speculative-ngram-match-type BFS, --speculative-ngram-max-trie-depth 18; suffix windows "
    "of 1-12 tokens before 2026) that shares one n-gram cache across requests, where vLLM's prompt lookup matches the request's "
    "own text on prompt_lookup_min-prompt_lookup_max tokens (5-5 when the test leaves them out, as it must "
    "on SGLang, whose window flags changed names in 2026); it counts the zero padding of drafts its trie "
    "could not fill as proposed tokens: its acceptance rate is not vLLM's (lower where drafts are short, "
    "and dependent on the requests served before)"
)
ACCEPTANCE_COUNTING = (
    "per request (meta_info, final response only): spec_verify_ct verify steps; proposed drafts counted as "
    "k a step, padding included, or by some releases only the drafts it could fill (then no per-step arrays); "
    "accepted drafts from the histogram of drafts accepted per step, the bonus token excluded; its metrics "
    "page has only windowed gauges, so a run's counters are the sum of its responses"
)
ADAPTIVE_FLAG = "--speculative-adaptive"


def speculative_flags(config: Mapping[str, Any]) -> list[str]:
    """SGLang's flags for a checked config (draft path already resolved).

    ``--speculative-num-draft-tokens`` counts the root (last verified) token
    too, so k proposed tokens is k+1 (cpp_ngram/result.cpp puts ``last_token``
    first; the EAGLE family forces steps+1 when top-k is 1).
    """
    method, k = config["method"], config["num_speculative_tokens"]
    flags = ["--speculative-algorithm", ALGORITHMS[method]]
    if method in DRAFT_METHODS:
        flags += ["--speculative-draft-model-path", str(config["model"])]
    if method == "ngram":
        # topk becomes max_bfs_breadth (speculative_hook.py `_handle_ngram`): breadth 1 keeps the draft a
        # chain, not a tree.  No window/trie-depth flags: their names changed in 2026 (see WINDOW_REFUSAL).
        return flags + [
            "--speculative-num-draft-tokens",
            str(k + 1),
            "--speculative-ngram-min-bfs-breadth",
            "1",
            "--speculative-ngram-max-bfs-breadth",
            "1",
        ]
    # All three together: setting top-k or draft tokens without num-steps is an AssertionError
    # (`_handle_eagle_family`), and leaving all three out lets SGLang choose k itself.
    return flags + [
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(k + 1),
    ]


def meta_info_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``meta_info`` of a native /generate response, or of a chat completion asked with return_meta_info."""
    found = payload.get("meta_info")
    if found is None and isinstance(payload.get("choices"), list) and payload["choices"]:
        first = payload["choices"][0]
        found = first.get("meta_info") if isinstance(first, Mapping) else None
    return found if isinstance(found, Mapping) else None


def _first(meta: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    return next(((name, meta[name]) for name in names if meta.get(name) is not None), None)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"SGLang meta_info.{name} must be an int >= 0, got {value!r}")
    return value


def request_figures(meta: Mapping[str, Any]) -> dict | None:
    """vLLM's per-request form from SGLang's ``meta_info``, as far as the response alone says; see
    `SGLang.request_sd`.  Never raises (it runs inside the request's stream, where an exception failed the
    request): figures that cannot be read come back as ``{"problem": why}``."""
    try:
        return _read_figures(meta)
    except ValueError as exc:
        return {PROBLEM: str(exc)}


def _read_figures(meta: Mapping[str, Any]) -> dict | None:
    verify = _first(meta, (VERIFY_KEY,))
    histogram = _first(meta, HISTOGRAM_KEYS)
    proposed = _first(meta, PROPOSED_KEYS)
    accepted = _first(meta, ACCEPTED_KEYS)
    steps = _count(*verify) if verify else None
    figures: dict[str, Any] = {}
    if steps is not None:
        figures[STEPS] = steps
    if proposed:
        figures[DRAFTED] = _count(*proposed)
    if accepted:
        figures[ACCEPTED] = _count(*accepted)
    if histogram is None:
        return figures or None  # rates alone (spec_accept_rate/length) are no counts
    name, counts = histogram
    if isinstance(counts, (str, bytes)) or not isinstance(counts, list):
        raise ValueError(f"SGLang meta_info.{name} must be a list of ints, got {counts!r}")
    counts = [_count(f"{name}[{i}]", c) for i, c in enumerate(counts)]
    if steps is None and not any(counts):
        steps = figures[STEPS] = 0  # an empty histogram without a count: no verify step yet
    if sum(counts) != steps:
        raise ValueError(
            f"SGLang meta_info.{name} counts {sum(counts)} verify steps but {VERIFY_KEY} is "
            f"{steps}: the histogram is not this request's"
        )
    from_histogram = sum(i * c for i, c in enumerate(counts))
    if accepted and figures[ACCEPTED] != from_histogram:
        raise ValueError(
            f"SGLang meta_info.{accepted[0]} is {accepted[1]} but {name} accepts {from_histogram} drafts in all"
        )
    figures[ACCEPTED] = from_histogram
    if proposed and figures[DRAFTED] < from_histogram:
        raise ValueError(f"SGLang meta_info.{proposed[0]} = {proposed[1]} is fewer than the {from_histogram} accepted")
    if steps == 0:
        figures.update({PER_STEP_ACCEPTED: [], PER_STEP_DRAFTED: []})
        return figures
    figures[HISTOGRAM] = counts  # the per-step arrays need the server's k (`settled_figures`)
    return figures


def settled_figures(figures: Mapping[str, Any], k: int) -> dict:
    """A request's figures from `request_figures` completed with k, the draft length the server was started
    with (``--speculative-num-steps``/``--speculative-num-draft-tokens`` from the test's
    speculative_config), never a division of the counts.

    SGLang counts proposals two ways across releases: every verify step's k
    slots, padding included (``spec_num_proposed_drafts == k * spec_verify_ct``
    in sglang PR #33518's checks), or only the drafts it could propose (fewer).
    The first gives vLLM's per-step arrays (k proposed each step); the second
    only the totals, since the histogram does not say which step proposed how
    many: the per-step arrays are then left out (unavailable, the analyses
    estimate them from the stream and say so), never k read as proposed/steps
    (9 over 3 steps at k = 4 once read as k = 3).  More proposals than k a
    step, or a step accepting more than k, is not this server's count: the
    figures are unreadable (``problem``), never an exception.
    """
    out = dict(figures)
    counts = out.pop(HISTOGRAM, None)
    if PROBLEM in out or counts is None:
        return out
    steps, drafted = out[STEPS], out.get(DRAFTED)
    most = max((i for i, c in enumerate(counts) if c), default=0)
    if most > k:
        return {
            PROBLEM: f"SGLang's histogram has a verify step accepting {most} drafts, more than the server's k = {k}"
        }
    if drafted is not None and drafted > k * steps:
        return {
            PROBLEM: f"SGLang counted {drafted} proposed drafts over {steps} verify steps, more than the server's "
            f"k = {k} a step: not a count of this server's drafts"
        }
    if drafted == k * steps:  # every step's k slots counted: k proposed in each step
        # The histogram keeps how many steps accepted i drafts, not when: the steps come out sorted by
        # acceptance, so a request's order is lost (position-in-output analyses see a reordered request).
        out[PER_STEP_ACCEPTED] = [i for i, c in enumerate(counts) for _ in range(c)]
        out[PER_STEP_DRAFTED] = [k] * steps
    out[DRAFT_LENGTH] = k
    return out


# OpenAI body field -> SGLang sampling_params field (the seed is `sampling_seed` there).
SGLANG_SAMPLING = {"top_p": "top_p", "top_k": "top_k", "seed": "sampling_seed"}


class SGLang(Engine):
    name = "sglang"
    title = TITLE
    devices = ("gpu",)
    methods = frozenset(ALGORITHMS)
    own_flags = frozenset(OWN_FLAGS)
    ready_path = "/health"
    # Its scheduler's gauges (metrics/collector.py): token_usage is the KV pool's used share, 0-1.
    series_metrics = {
        "kv_cache_usage": "sglang:token_usage",
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
    }
    # Newer builds answer /server_info and keep /get_server_info as a deprecated alias (http_server.py).
    version_paths = ("/server_info", "/get_server_info")

    def check(self, spec) -> None:
        super().check(spec)
        if any(arg.split("=", 1)[0] == ADAPTIVE_FLAG for arg in spec.server_args):
            raise EngineConfigError(
                TITLE,
                "server_args",
                f"flag {ADAPTIVE_FLAG} changes k while the run goes on, "
                "which the per-request acceptance histogram does not record: the figures would "
                "describe a k the server did not keep; leave it out",
            )
        config = spec.speculative_config
        if config is None:
            return
        method = config["method"]
        draft_length(TITLE, config)
        if method in DRAFT_METHODS and not config.get("model"):
            raise EngineConfigError(TITLE, "speculative_config.model", f"method {method!r} needs a draft model")
        if method == "ngram" and "model" in config:
            raise EngineConfigError(
                TITLE,
                "speculative_config.model",
                "ignores a draft model with NGRAM (it accepts the path and never loads it): "
                "the run would not be what the marker says; leave model out",
            )
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            if key in config:
                raise EngineConfigError(TITLE, f"speculative_config.{key}", WINDOW_REFUSAL.format(key=key))
        understood = {"num_speculative_tokens", "model"} if method in DRAFT_METHODS else {"num_speculative_tokens"}
        why = "mtp drafts with the target's own layers" if method == "mtp" else ""
        refuse_unknown(TITLE, config, understood | forced_keys(config), why)

    forced_schedule_known = True  # match-expected: the floor or the ceiling of the length, weighted to its mean

    def check_forced(self, spec, forced: ForcedAcceptance, device: str | None) -> None:
        if spec.method not in SIMULATED_METHODS:
            raise EngineConfigError(
                TITLE,
                f"speculative_config.{FORCING_KEY}",
                f"simulates acceptance in its EAGLE verify step (speculative/eagle_utils.py), which serves "
                f"{', '.join(sorted(SIMULATED_METHODS))}; for method {spec.method!r} the plugin has not "
                "confirmed it applies",
            )
        if forced.declared_length is None:
            raise EngineConfigError(
                TITLE,
                f"speculative_config.{RATES_KEY}",
                f"simulates a mean acceptance length only ({SIMULATE_LENGTH}), not per-position rates: "
                f"declare {LENGTH_KEY}",
            )

    def spec_env(self, spec) -> dict[str, str]:
        forced = forced_acceptance(spec.speculative_config)
        if forced is None:
            return {}
        # The length counts the target's own token, as ours does; "match-expected" keeps its mean (older
        # builds defaulted to "multinomial", a clamped normal whose mean is not the length asked for).
        return {SIMULATE_LENGTH: f"{forced.length:g}", SIMULATE_METHOD: "match-expected"}

    acceptance_counting = ACCEPTANCE_COUNTING

    def acceptance_note(self, spec) -> str | None:
        return NGRAM_ACCEPTANCE_NOTE if spec.method == "ngram" else None

    def command(self, launch: LaunchRequest) -> list[str]:
        if launch.device != "gpu":
            raise ValueError(
                f"{TITLE} is run on device 'gpu' only, got {launch.device!r}: its CPU backend needs "
                "Intel AMX CPUs and a build from source, which the plugin does not set up"
            )
        spec = launch.spec
        command = [
            launch.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            launch.model_path,
            "--served-model-name",
            spec.model,
            "--host",
            launch.host,
            "--port",
            str(launch.port),
            "--enable-metrics",
        ]
        if spec.tensor_parallel_size != 1:
            command += ["--tp-size", str(spec.tensor_parallel_size)]
        if launch.speculative_config is not None:
            command += speculative_flags(launch.speculative_config)
        return command + list(spec.server_args)

    completion_path = "/generate"
    chat_path = ""
    chat_refusal = (
        "the plugin streams from SGLang's native /generate, which applies no chat template, and SGLang's "
        "/v1/chat/completions returns a request's SD figures (meta_info) only when not streaming, while its "
        "metrics page has no run totals: acceptance would be unavailable on every chat run"
    )
    counts_per_request = True

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        """The native /generate body for the client's OpenAI one (the single served model needs no name).

        Top logprobs are not asked for: SGLang returns them in another shape
        (``meta_info.output_top_logprobs``), so near-tie analysis is unavailable on SGLang.
        """
        sampling = {
            "max_new_tokens": openai["max_tokens"],
            "temperature": openai.get("temperature", 0.0),
            "ignore_eos": bool(openai.get("ignore_eos", False)),
        }
        # Sampling settings under SGLang's own names (its SamplingParams); absent fields keep its defaults.
        sampling.update({name: openai[key] for key, name in SGLANG_SAMPLING.items() if key in openai})
        return {"text": openai["prompt"], "sampling_params": sampling, "stream": True}

    def stream_event(self, data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        meta = data.get("meta_info")
        if not isinstance(meta, Mapping):
            return data  # an error event, or not SGLang's
        text, ids = data.get("text") or "", list(data.get("output_ids") or [])
        so_far = meta.get("completion_tokens")
        seen_ids, seen_text = state.get("ids", 0), state.get("text", 0)
        # Running totals (the default) hold every token so far: as many ids as completion_tokens.
        if isinstance(so_far, int) and seen_ids <= len(ids) == so_far:
            new_ids, new_text = ids[seen_ids:], text[seen_text:]
            state.update(ids=len(ids), text=len(text))
        else:
            new_ids, new_text = ids, text
        event: dict[str, Any] = {"meta_info": meta}
        if new_ids or new_text:
            event["choices"] = [{"text": new_text, "token_ids": new_ids}]
        if meta.get("finish_reason") and isinstance(so_far, int):
            event["usage"] = {"prompt_tokens": meta.get("prompt_tokens"), "completion_tokens": so_far}
        if "error" in data:
            event["error"] = data["error"]
        return event

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        """A finished request's SD figures from its ``meta_info`` (spec_decoding_meta.py).

        SGLang puts them on the finished response only (native /generate:
        top-level ``meta_info``; /v1/chat/completions with
        ``return_meta_info``, non-streaming only: ``choices[0].meta_info``),
        whether or not metrics are enabled.  Its totals (``num_spec_steps``,
        ``num_draft_tokens``, ``num_accepted_draft_tokens``, whichever exist)
        and, with a histogram (index i = drafts accepted in one verify step,
        bonus token excluded; value = steps), that histogram: k is not in the
        response, so the per-step arrays are made once the run is over, from
        the server's k (`settle_request_sd`).  None without spec_* keys;
        ``{"problem": why}``, naming the fields, when they disagree (a
        histogram that does not sum to spec_verify_ct), never an exception.
        """
        meta = meta_info_of(payload)
        return request_figures(meta) if meta is not None else None

    def settle_request_sd(self, figures: Mapping[str, Any], spec) -> dict:
        """The per-step arrays from the histogram, with k from the server's configuration (`settled_figures`)."""
        k = (spec.speculative_config or {}).get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:  # no SD on this server: nothing to settle
            return {key: value for key, value in figures.items() if key != HISTOGRAM}
        return settled_figures(figures, k)

    def counters(self, metrics_text: str, model_names, where: str):
        from .counters import SpecDecodeCounters

        return SpecDecodeCounters.unavailable(
            f"{TITLE} has no SD counters at {where}: sglang:spec_accept_length and sglang:spec_accept_rate are "
            "gauges over the last --decode-log-interval window (metrics/collector.py), not run totals; a run's "
            "counters are the sum of its responses' meta_info figures (counters_from_requests)"
        )


ENGINE = SGLang()
