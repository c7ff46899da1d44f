"""TensorRT-LLM: ``trtllm-serve`` (PyTorch backend) with an options file holding ``speculative_config``.

The speculative settings are not flags but LLM-API fields, read from the file
``--extra_llm_api_options`` names (newer releases also call it ``--config``;
releases up to 1.0 know only the long name, so that is the one emitted).  The
file is JSON, which YAML reads as it is, so no YAML library is needed.  Its
own SD figures: the iteration stats ``GET /metrics`` returns (their
``specDecodingStats``) once ``enable_iter_perf_stats`` is on, and per request
each streamed choice's ``avg_decoded_tokens_per_iter`` (`request_sd`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .base import Engine, EngineConfigError, LaunchRequest, draft_length, ngram_sizes, refuse_unknown
from .rerun import with_files_written
from .per_request import ACCEPTED, STEPS
from .forced_acceptance import forced_keys, LENGTH_KEY, RATES_KEY, ForcedAcceptance, forced_acceptance

TITLE = "TensorRT-LLM"
DRAFT_METHODS = frozenset({"eagle3", "draft_model"})
# Forced acceptance (engines/forced_acceptance.py) through the environment (NVIDIA/TensorRT-LLM#9371,
# _torch/speculative/interface.py): how many drafts every step accepts; 0 turns it off.
FORCE_ACCEPTED = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"
# EagleDecodingConfig on the PyTorch backend runs the EAGLE-3 modes only: an EAGLE-1/2 head given as
# method "eagle" would be loaded as an EAGLE-3 drafter and measure something else.
EAGLE_REFUSAL = (
    "runs EAGLE-3 only on its PyTorch backend (EagleDecodingConfig's EAGLE-3 modes): an EAGLE-1/2 "
    "head would be loaded as an EAGLE-3 drafter; use method 'eagle3' with an EAGLE-3 draft"
)
# vLLM method -> decoding_type (tensorrt_llm/llmapi/llm_args.py, a pydantic union keyed by it).
DECODING_TYPES = {
    "eagle3": "Eagle3",
    # What llm_args.py declares: `class DraftTargetDecodingConfig` has `decoding_type:
    # Literal["Draft_Target"]`, the key of the `SpeculativeConfig` union the options file is validated
    # against.  "DraftTarget" (the docs' spelling) is only the `from_dict` table's key of releases up to
    # 1.0, which read the options file through that table: those releases refuse this name.
    "draft_model": "Draft_Target",
    "ngram": "NGram",
    "mtp": "MTP",
}
# Flags `command` sets itself (click keeps the last copy, so one in server_args would silently win).
# Host and port: the plugin binds loopback on a port it claimed; the served name is the model path's basename.
OWN_FLAGS = (
    "--backend",
    "--extra_llm_api_options",
    "--config",
    "--tp_size",
    "--tensor_parallel_size",
    "--host",
    "--port",
    "--served_model_name",
    "--served-model-name",
)
STATS_KEY = "specDecodingStats"
# How many iterations trtllm-serve queues for /metrics (iter_stats_max_iterations, 1000 when unset): the
# plugin reads the queue before and after each repeat, so a repeat of more iterations lost its oldest.
# A read that returns the whole cap may have lost some: its counters are unavailable, never short.
ITER_STATS_CAP = 100_000
# How it counts, as the executor does (PyExecutor's specDecodingStats; LlmRequest::getAvgDecodedTokensPerIter).
ACCEPTANCE_COUNTING = (
    "numDraftTokens counts every draft slot a step verified (padding included), numAcceptedTokens the drafts "
    "the target kept (the bonus token excluded), numRequestsWithDraftTokens the (request, step) pairs; per "
    "request, avg_decoded_tokens_per_iter is output tokens / iterations, the prefill's iteration included"
)
# Drafter.pad_draft_tokens_for_cuda_graph (tensorrt_llm/_torch/speculative/drafter.py) pads each request's
# draft with zeros to the static maximum, "e.g., NGram mismatches": a step whose lookup found nothing is
# verified, and counted, as a full draft that is rejected.  vLLM's prompt lookup proposes nothing then.
NGRAM_ACCEPTANCE_NOTE = (
    "TensorRT-LLM's NGram drafter pads a draft it found no match for to max_draft_len, and its statistics "
    "count that step as drafting and the padding as drafted tokens, where vLLM's prompt lookup proposes and "
    "counts nothing: its acceptance rate is not vLLM's (lower where the text has few repeats)"
)
# The streamed choices' running figure of each request (tensorrt_llm/serve/openai_protocol.py,
# CompletionResponseStreamChoice and the chat one): its generated tokens over its decoding iterations.
AVG_DECODED = "avg_decoded_tokens_per_iter"
# specDecodingStats field -> SpecDecodeCounters field (C++ `struct SpecDecodingStats`, camelCase in JSON).
STATS_FIELDS = {
    "numRequestsWithDraftTokens": "num_drafts",
    "numDraftTokens": "num_draft_tokens",
    "numAcceptedTokens": "num_accepted_tokens",
}


def options_path(launch: LaunchRequest) -> str:
    """Where the options file goes: the server's log folder, one per port."""
    return str(Path(launch.work_dir) / f"trtllm-options-{launch.port}.yaml")


def speculative_section(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``speculative_config`` section for a checked config (draft path already resolved)."""
    method, k = config["method"], config["num_speculative_tokens"]
    section: dict[str, Any] = {"decoding_type": DECODING_TYPES[method]}
    if method == "mtp":
        # num_nextn_predict_layers is MTP's draft length in every release; main deprecates it for
        # max_draft_len but still reads it.
        return {**section, "num_nextn_predict_layers": k}
    section["max_draft_len"] = k
    if method in DRAFT_METHODS:
        section["speculative_model"] = str(config["model"])
    else:  # ngram: every field set, since the defaults changed between releases
        # Always set: NGram's own default drifted between releases (4, then 0, then 2).
        section.update(
            max_matching_ngram_size=ngram_sizes(TITLE, config)[1],
            is_keep_all=True,
            is_use_oldest=True,
            # Per request, as vLLM's prompt lookup: a pool shared across requests makes one
            # request's acceptance depend on the ones before it.
            is_public_pool=False,
        )
    return section


def iteration_counters(entries: list, where: str):
    """The SD counters summed over trtllm-serve's iteration stats (one `/metrics` answer).

    Each entry is one iteration; its ``specDecodingStats`` counts that
    iteration's proposed and accepted draft tokens and the requests that
    drafted (PyExecutor fills it per iteration), so the sums are the figures of
    the iterations listed; ``num_drafts`` is the number of (request, step)
    pairs that drafted.  Entries without the section (iterations before
    speculation started) are skipped; unavailable, with the reason naming
    `where`, when the list is empty, is not a list, or no entry has it (never
    zeros: iteration stats off reads the same as nothing counted).
    """
    from .counters import SpecDecodeCounters

    if not isinstance(entries, list):
        return SpecDecodeCounters.unavailable(
            f"{where} answered {type(entries).__name__}, not {TITLE}'s list of iteration stats"
        )
    if not entries:
        return SpecDecodeCounters.unavailable(
            f"{where} listed no iteration stats: an empty list (each read drains the queue, and the server "
            "keeps none without enable_iter_perf_stats)"
        )
    if len(entries) >= ITER_STATS_CAP:
        return SpecDecodeCounters.unavailable(
            f"{where} returned {len(entries)} iteration stats, the whole queue (iter_stats_max_iterations="
            f"{ITER_STATS_CAP}): older iterations may have been dropped, so the sums could be short"
        )
    sections = [entry[STATS_KEY] for entry in entries if isinstance(entry, Mapping) and STATS_KEY in entry]
    if not sections:
        return SpecDecodeCounters.unavailable(
            f"{where}: none of its {len(entries)} iteration stats has {STATS_KEY} (no speculative decoding ran)"
        )
    totals = dict.fromkeys(STATS_FIELDS.values(), 0.0)
    for number, section in enumerate(sections):
        for name, attr in STATS_FIELDS.items():
            value = section.get(name) if isinstance(section, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return SpecDecodeCounters.unavailable(
                    f"{where}: {STATS_KEY} #{number} has no number {name} (got {value!r})"
                )
            totals[attr] += value
    return SpecDecodeCounters(**totals)


class TensorRTLLM(Engine):
    name = "trtllm"
    title = TITLE
    devices = ("gpu",)
    methods = frozenset(DECODING_TYPES)
    own_flags = frozenset(OWN_FLAGS)
    ready_path = "/health"
    version_paths = ("/version",)  # {"version": "1.x.y"}
    metrics_facts = False  # /metrics drains the iteration stats the counters are summed from
    acceptance_counting = ACCEPTANCE_COUNTING
    series_refusal = (
        "trtllm-serve's /metrics hands out each iteration's statistics once: reading it during a run would take "
        "them from the run's SD counters, which are summed from them"
    )

    def check(self, spec) -> None:
        """Refuse what trtllm-serve cannot run as declared.

        The served name is not refused: trtllm-serve has no served-model-name
        option, and serves the model under the basename of the path it loads
        (``OpenAIServer.__init__``); the plugin asks /v1/models for it.
        """
        config = spec.speculative_config
        if config is not None and config.get("method") == "eagle":
            raise EngineConfigError(TITLE, "speculative_config.method", EAGLE_REFUSAL)
        super().check(spec)
        if config is None:
            return
        method = config["method"]
        draft_length(TITLE, config)
        if method in DRAFT_METHODS and not config.get("model"):
            raise EngineConfigError(TITLE, "speculative_config.model", f"method {method!r} needs a draft model")
        if method == "ngram":
            low, high = ngram_sizes(TITLE, config)
            if low != 1:
                # The NGram drafter tries every match size from max_matching_ngram_size down to 1; vLLM's
                # lookup tries prompt_lookup_max down to prompt_lookup_min (min = max when only max is given).
                raise EngineConfigError(
                    TITLE,
                    "speculative_config.prompt_lookup_min",
                    f"NGram matches every size from max_matching_ngram_size down to 1, so it "
                    f"cannot run sizes {low}-{high} as declared (vLLM makes the minimum equal "
                    "the maximum when only prompt_lookup_max is given, and both 5 when neither "
                    f"is): declare prompt_lookup_min=1 with prompt_lookup_max={high}",
                )
            understood = {"num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
        else:
            understood = {"num_speculative_tokens", "model"} if method in DRAFT_METHODS else {"num_speculative_tokens"}
        refuse_unknown(TITLE, config, understood | forced_keys(config))

    forced_schedule_known = True  # a whole number of drafts every step

    def check_forced(self, spec, forced: ForcedAcceptance, device: str | None) -> None:
        if forced.declared_length is None:
            raise EngineConfigError(
                TITLE,
                f"speculative_config.{RATES_KEY}",
                f"forces a number of accepted drafts per step ({FORCE_ACCEPTED}), not per-position rates: "
                f"declare {LENGTH_KEY}",
            )
        accepted = forced.declared_length - 1
        if accepted != int(accepted):
            raise EngineConfigError(
                TITLE,
                f"speculative_config.{LENGTH_KEY}",
                f"reads {FORCE_ACCEPTED} as a whole number of accepted drafts on its two-model path (a fraction "
                f"there turns forcing off with a warning; NVIDIA/TensorRT-LLM#13569 added fractions to the "
                f"one-model path only): declare a whole length, got {forced.declared_length:g}",
            )

    def spec_env(self, spec) -> dict[str, str]:
        forced = forced_acceptance(spec.speculative_config)
        if forced is None or forced.declared_length is None:
            return {}
        # Accepted drafts per step, the target's own token not counted (speculative/interface.py).
        return {FORCE_ACCEPTED: str(int(forced.declared_length - 1))}

    def served_name(self, launch: LaunchRequest) -> str:
        """trtllm-serve serves a local model directory under its basename (`OpenAIServer`), a hub id as given;
        it has no option to rename it, so readiness and every request use that name."""
        path = Path(launch.model_path)
        return path.name if path.is_dir() else launch.model_path

    def launch_files(self, launch: LaunchRequest) -> dict[str, str]:
        # The PyTorch backend keeps no stats without enable_iter_perf_stats, and only the newest 1000 by default.
        options: dict[str, Any] = {"enable_iter_perf_stats": True, "iter_stats_max_iterations": ITER_STATS_CAP}
        if launch.speculative_config is not None:
            options["speculative_config"] = speculative_section(launch.speculative_config)
        return {options_path(launch): json.dumps(options, indent=2, sort_keys=True) + "\n"}

    def command(self, launch: LaunchRequest) -> list[str]:
        """The trtllm-serve command; the model is served under its path's basename (no name option)."""
        if launch.device != "gpu":
            raise ValueError(f"{TITLE} runs on device 'gpu' only, got {launch.device!r}")
        spec = launch.spec
        command = [
            "trtllm-serve",
            launch.model_path,
            "--host",
            launch.host,
            "--port",
            str(launch.port),
            "--backend",
            "pytorch",
            "--extra_llm_api_options",
            options_path(launch),
        ]
        if spec.tensor_parallel_size != 1:
            command += ["--tp_size", str(spec.tensor_parallel_size)]
        return command + list(spec.server_args)

    def restart_command(self, command) -> str:
        """The trtllm-serve command with its options file written first, beside where it runs: the file was
        in the session's log folder, which pytest deletes with its temporary folder."""
        files = {}
        for flag in ("--extra_llm_api_options", "--config"):
            if flag in command[:-1] and Path(path := command[command.index(flag) + 1]).is_file():
                files[path] = Path(path).read_text(encoding="utf-8")
        return with_files_written(command, files)

    def acceptance_note(self, spec) -> str | None:
        return NGRAM_ACCEPTANCE_NOTE if spec.method == "ngram" else None

    def stream_event(self, data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        # Each streamed choice carries the request's running avg_decoded_tokens_per_iter, the usage event
        # that ends the stream none: the last one seen rides on the usage event, where `request_sd` reads it
        # beside the output token count it needs.
        for choice in data.get("choices") or ():
            if isinstance(choice, Mapping) and choice.get(AVG_DECODED) is not None:
                state[AVG_DECODED] = choice[AVG_DECODED]
        if data.get("usage") and AVG_DECODED in state:
            return {**data, AVG_DECODED: state[AVG_DECODED]}
        return data

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        """The request's steps and accepted drafts from ``avg_decoded_tokens_per_iter`` and its output tokens.

        The figure is the request's generated tokens over its decoding
        iterations (``LlmRequest::getAvgDecodedTokensPerIter``), the prefill
        that made the first token one of them (the samplers count it), so for
        N tokens the iterations are N / avg: the verify steps one fewer, and
        the accepted drafts N minus the iterations (each iteration's own token
        is not a draft).  vLLM's acceptance length 1 + accepted / steps follows;
        the drafted tokens do not (no per-request count), so per-request
        acceptance rates stay unavailable.  A server without speculation
        reports 1.0: every iteration a step accepting nothing.  None where the
        event is not the usage event that ends the stream.
        """
        avg, usage = payload.get(AVG_DECODED), payload.get("usage")
        if avg is None or not isinstance(usage, Mapping):
            return None
        tokens = usage.get("completion_tokens")
        if isinstance(avg, bool) or not isinstance(avg, (int, float)) or avg < 0:
            raise ValueError(f"choices[0].{AVG_DECODED} must be a number >= 0, got {avg!r}")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"usage.completion_tokens must be an int >= 0, got {tokens!r}")
        if avg == 0 or tokens == 0:
            return None  # no decoding iteration yet: nothing to count
        iterations = round(tokens / avg)
        # The figure is a C++ float of tokens / iterations: a ratio that is not one was not that.
        if not 1 <= iterations <= tokens or abs(tokens / avg - iterations) > 0.01:
            raise ValueError(
                f"choices[0].{AVG_DECODED} = {avg!r} is not {tokens} output tokens over a whole number of "
                "decoding iterations"
            )
        return {STEPS: iterations - 1, ACCEPTED: tokens - iterations}

    def __init__(self):
        # Running totals per metrics URL: each read of trtllm-serve's /metrics drains its queue, so
        # one read covers only the iterations since the last; the plugin takes after - before.
        self._totals: dict[str, Any] = {}
        self._read_before: set[str] = set()

    def counters(self, metrics_text: str, model_names, where: str):
        """The SD counters from ``GET /metrics``, as running totals of its iteration stats.

        A read that drains an empty queue is a valid reading (nothing ran since
        the last): zeros where nothing was ever counted, so that the read
        before a run can be subtracted; a run whose iterations never carried
        specDecodingStats still ends unavailable, from the read after it.
        """
        from .counters import SpecDecodeCounters

        try:
            entries = json.loads(metrics_text)
        except ValueError as exc:
            return SpecDecodeCounters.unavailable(f"{where} is not {TITLE}'s JSON iteration stats: {exc}")
        read = iteration_counters(entries, where)
        held = self._totals.get(where)
        if read.present:
            self._totals[where] = read if held is None else held + read
        elif not (isinstance(entries, list) and not entries):
            return read  # not a list, or a malformed section: say what is wrong
        if where in self._totals:
            return self._totals[where]
        first = where not in self._read_before  # the zero a run's counters start from
        self._read_before.add(where)
        return SpecDecodeCounters() if first else read


ENGINE = TensorRTLLM()
