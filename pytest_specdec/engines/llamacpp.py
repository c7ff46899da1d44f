"""llama.cpp: ``llama-server`` with a draft model or an n-gram mode, serving GGUF files.

The command is llama-server's own command line.  Where no ``llama-server``
binary is installed (none is packaged for Debian 12/13, and PyPI ships none
that runs on an AVX2-only CPU), the same flags go to
``python -m pytest_specdec.engines.llamacpp_serve``, which runs llama.cpp's
server code from the ``xllamacpp`` wheel (see that module).  Set
``SPECDEC_LLAMA_SERVER`` to a binary to use it instead.

Translation of the one vocabulary (flags as of llama.cpp's late-2026 server,
``common/arg.cpp``; the old ``--draft-max``/``--draft-min`` names now stop
the server):

- ``draft_model``: ``--spec-type draft-simple -md DRAFT --spec-draft-n-max k
  --spec-draft-n-min 0 --spec-draft-p-min 0`` (a draft model alone does not
  enable drafting; p-min 0 drafts all k tokens, as vLLM does);
- ``ngram``: ``--spec-type ngram-simple --spec-ngram-simple-size-n N
  --spec-ngram-simple-size-m k --spec-ngram-simple-min-hits 1``.  It matches
  one n-gram length N, where vLLM's prompt lookup tries every length from
  ``prompt_lookup_max`` down to ``prompt_lookup_min``: a range is refused,
  and the sizes resolve as vLLM resolves them (both 5 when neither is
  given, one given stands for both; `base.ngram_sizes`).

Its own SD figures: each response's ``timings.draft_n`` /
``timings.draft_n_accepted`` (final chunk; present only once something was
drafted) and the ``llamacpp:spec_decode_*`` counters on /metrics
(``--metrics``), per draft position too.  Counters are flushed when a
request's slot is released: read after the run's requests have finished.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from .base import Engine, EngineConfigError, LaunchRequest, draft_length, is_python, ngram_sizes, refuse_unknown
from .forced_acceptance import FORCING_KEY, forced_keys, ForcedAcceptance, forced_acceptance
from .per_request import ACCEPTED, DRAFTED

TITLE = "llama.cpp"
BINARY_ENV = "SPECDEC_LLAMA_SERVER"
SHIM_MODULE = "pytest_specdec.engines.llamacpp_serve"
# The shim is one standalone file: every Python runs it by path (`server_program`), this environment's as
# another's (another xllamacpp build).
SHIM_PATH = str(Path(__file__).with_name("llamacpp_serve.py"))
PREFIX = "llamacpp:spec_decode_"
_COUNTERS = {
    PREFIX + "num_drafts_total": "num_drafts",
    PREFIX + "num_draft_tokens_total": "num_draft_tokens",
    PREFIX + "num_accepted_tokens_total": "num_accepted_tokens",
}
_PER_POSITION = PREFIX + "num_accepted_tokens_per_pos_total"
# Requests in flight at once: the plugin's patterns go up to a few dozen on a CPU.
DEFAULT_SLOTS = 16
# One context of this many tokens shared by every slot (--kv-unified): without it llama-server splits
# -c between the slots, 512 tokens each at 16 slots, and any longer request failed on llama.cpp only.
DEFAULT_CONTEXT = 8192
# Flags the plugin sets from the marker; a copy in server_args would silently win or clash.
OWN_FLAGS = frozenset(
    {
        "-m",
        "--model",
        "--host",
        "--port",
        "-a",
        "--alias",
        "--metrics",
        "--spec-type",
        "-md",
        "--model-draft",
        "--spec-draft-model",
        "--spec-draft-n-max",
        "--spec-draft-n-min",
        "--spec-draft-p-min",
        "-kvu",
        "--kv-unified",
        "--no-kv-unified",  # would split -c between the slots again (see DEFAULT_CONTEXT)
        # The n-gram matcher and k the test declares: "--spec-ngram-simple-size-m 8" ran k=8 under the test's k.
        "--spec-ngram-simple-size-n",
        "--spec-ngram-simple-size-m",
        "--spec-ngram-simple-min-hits",
        # Forced acceptance the marker declares (speculative_config's synthetic keys): a copy would override it.
        "--spec-synth-len",
        "--spec-synth-rates",
        # The same settings under the names builds before the 2026 refactor take (`LEGACY_FLAGS`), and aliases.
        "--spec-ngram-size-n",
        "--spec-ngram-size-m",
        "--spec-ngram-min-hits",
        "--draft-max",
        "--draft",
        "--draft-n",
        "--draft-min",
        "--draft-n-min",
        "--draft-p-min",
    }
)


def server_program(python: str, build: str | None = None) -> list[str]:
    """The `build` a spec names (a llama-server binary, or the Python of an environment with another
    xllamacpp); else ``llama-server`` when one is installed (or named by SPECDEC_LLAMA_SERVER), else the
    xllamacpp shim under `python`, run by its file whichever environment `python` is: a builds A/B launches
    both builds' servers alike, so what differs between them is the build.  Run as a module (``-m``), this
    environment's shim would import the whole plugin into the server's process, another's would not
    (benchmarks/shim_launch.py compares the two launches)."""
    if build is not None:
        return [build, SHIM_PATH] if is_python(build) else [build]
    named = os.environ.get(BINARY_ENV)
    if named:
        return [named]
    found = shutil.which("llama-server")
    if found:
        return [found]
    return [python, SHIM_PATH]


# llama.cpp renamed its speculative flags in PR #22397 ("spec : refactor params", April 2026; xllamacpp
# from 2026.5): a llama-server from before takes these old names and turns draft-simple on from -md
# alone (builds after it refuse the old names: "the argument has been removed").
LEGACY_FLAGS = {
    "--spec-draft-n-max": "--draft-max",
    "--spec-draft-n-min": "--draft-min",
    "--spec-draft-p-min": "--draft-p-min",
    "--spec-ngram-simple-size-n": "--spec-ngram-size-n",
    "--spec-ngram-simple-size-m": "--spec-ngram-size-m",
    "--spec-ngram-simple-min-hits": "--spec-ngram-min-hits",
}
NEW_FLAG_PROBE = "--spec-draft-n-max"


@functools.lru_cache(maxsize=None)
def help_text(binary: str) -> str | None:
    """A llama-server binary's own ``--help``, read once per binary; None when it cannot be run."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr


def knows_current_flags(binary: str) -> bool:
    """Whether a llama-server binary takes the flag names after the refactor, from its own ``--help``.
    One that cannot say gets the current names; a failed start names the flag."""
    text = help_text(binary)
    return text is None or NEW_FLAG_PROBE in text


# Forced acceptance's flags (ggml-org/llama.cpp#27711); a build whose --help lacks them cannot force.
FORCED_FLAG_PROBE = "--spec-synth-len"
# The shim's xllamacpp has forced acceptance when its speculative parameters have `synth_len`.
_SYNTH_PROBE = (
    "import sys, xllamacpp; sys.stdout.write(str(hasattr(xllamacpp.CommonParams().speculative, 'synth_len')))"
)


@functools.lru_cache(maxsize=None)
def knows_forced_acceptance(program: tuple[str, ...]) -> bool:
    """Whether the llama-server `program` runs (a binary, or the xllamacpp shim under a Python) can force
    acceptance: the binary's own --help, the shim's xllamacpp's parameters.  Read once per program."""
    if len(program) == 1:
        return FORCED_FLAG_PROBE in (help_text(program[0]) or "")
    try:
        done = subprocess.run([program[0], "-c", _SYNTH_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "True"


def forced_flags(forced: ForcedAcceptance | None) -> list[str]:
    """llama-server's flags for a forced acceptance: the mean length as declared, else the per-position rates."""
    if forced is None:
        return []
    if forced.declared_length is not None:
        return ["--spec-synth-len", f"{forced.declared_length:g}"]
    return ["--spec-synth-rates", ",".join(f"{rate:g}" for rate in forced.rates)]


def legacy_flags(arguments: list[str]) -> list[str]:
    """The plugin's flags in a pre-refactor build's names (`LEGACY_FLAGS`; no ``--spec-type draft-simple``)."""
    out: list[str] = []
    index = 0
    while index < len(arguments):
        if arguments[index] == "--spec-type" and arguments[index + 1 : index + 2] == ["draft-simple"]:
            index += 2
            continue
        out.append(LEGACY_FLAGS.get(arguments[index], arguments[index]))
        index += 1
    return out


def _ngram_size(config: Mapping[str, Any]) -> int:
    low, high = ngram_sizes(TITLE, config)
    if low != high:
        raise EngineConfigError(
            TITLE,
            "speculative_config.prompt_lookup_min",
            "matches one n-gram length (--spec-ngram-simple-size-n), not a range: give "
            f"prompt_lookup_min equal to prompt_lookup_max (got {low} and {high}), or only one "
            "of them",
        )
    return high


class LlamaCpp(Engine):
    name = "llamacpp"
    title = TITLE
    devices = ("cpu", "gpu")
    methods = frozenset({"draft_model", "ngram"})
    own_flags = frozenset(OWN_FLAGS)
    ready_path = "/health"  # 503 while the model loads
    build_binaries = ("llama-server",)  # a --build path may name the binary itself (`check_build`)
    model_format = "gguf"  # one GGUF file (serving/gguf_models.py makes the bundled model and drafts one)
    version_paths = ("/props",)  # {"build_info": "b11549-64fbe0fe", ...}
    # llama-server streams one event per token, accepted draft or not: events are not steps (its
    # per-request timings and counters are totals, so per-step analyses are unavailable on it).
    events_are_steps = False
    # llama-server's /metrics (with --metrics): requests decoding and deferred (waiting for a slot), and its
    # SD counters; it has no KV cache usage or preemption series (the KV is one unified context, --kv-unified).
    series_metrics = {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
        "draft_tokens": PREFIX + "num_draft_tokens_total",
        "accepted_tokens": PREFIX + "num_accepted_tokens_total",
    }

    def check(self, spec) -> None:
        if spec.tensor_parallel_size != 1:
            raise EngineConfigError(
                TITLE,
                "tensor_parallel_size",
                "has no tensor parallelism across processes; "
                "split layers with server_args such as ['--split-mode', 'layer'] instead",
            )
        super().check(spec)
        config = spec.speculative_config
        if config is None:
            return
        draft_length(TITLE, config)
        if config["method"] == "draft_model":
            if not config.get("model"):
                raise EngineConfigError(
                    TITLE, "speculative_config.model", "needs the draft model's GGUF for method 'draft_model'"
                )
            refuse_unknown(TITLE, config, {"num_speculative_tokens", "model", "p_min", *forced_keys(config)})
            p_min = config.get("p_min", 0)
            if p_min is not None and (
                isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0 <= p_min <= 1
            ):
                raise EngineConfigError(
                    TITLE,
                    "speculative_config.p_min",
                    f"takes a probability in [0, 1] (None: the build's own default), got {p_min!r}",
                )
        else:
            _ngram_size(config)
            refuse_unknown(
                TITLE,
                config,
                {"num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"},
                "n-gram lookup takes no draft model",
            )

    def check_forced(self, spec, forced: ForcedAcceptance, device: str | None) -> None:
        program = tuple(server_program(sys.executable, spec.build))
        if not knows_forced_acceptance(program):
            raise EngineConfigError(
                TITLE,
                f"speculative_config.{FORCING_KEY}",
                f"{' '.join(program)} cannot force acceptance (no {FORCED_FLAG_PROBE} in its --help, or no synth_len "
                "in its xllamacpp; llama.cpp added it in ggml-org/llama.cpp#27711, xllamacpp in 2026.10)",
            )

    def command(self, launch: LaunchRequest) -> list[str]:
        spec = launch.spec
        program = server_program(launch.python, spec.build)
        command = [
            "-m",
            launch.model_path,
            "--alias",
            spec.model,
            "--host",
            launch.host,
            "--port",
            str(launch.port),
            "--metrics",
            "-np",
            str(DEFAULT_SLOTS),
            "-c",
            str(DEFAULT_CONTEXT),
            "--kv-unified",
        ]
        config = launch.speculative_config
        if config is not None:
            k = draft_length(TITLE, config)
            if config["method"] == "draft_model":
                # p-min 0 unless the marker says: draft all k tokens every step, as vLLM does (builds before
                # 2026.5 stopped a draft at the first token under 0.75 probability by default, a different
                # drafter under the same k). p_min None leaves each build its own default.
                command += ["--spec-type", "draft-simple", "-md", str(config["model"])]
                command += ["--spec-draft-n-max", str(k), "--spec-draft-n-min", "0"]
                if (p_min := config.get("p_min", 0)) is not None:
                    command += ["--spec-draft-p-min", f"{p_min:g}"]
                command += forced_flags(forced_acceptance(config))
            else:
                command += [
                    "--spec-type",
                    "ngram-simple",
                    "--spec-ngram-simple-size-n",
                    str(_ngram_size(config)),
                    "--spec-ngram-simple-size-m",
                    str(k),
                    "--spec-ngram-simple-min-hits",
                    "1",
                ]
        if len(program) == 1 and not knows_current_flags(program[0]):  # the shim reads every build's layout
            command = legacy_flags(command)
        return program + command + list(spec.server_args)

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        # "verbose" adds each chunk's token id (`__verbose.tokens`): /v1/completions streams none otherwise.
        # "cache_prompt": false prefills every prompt in full. llama-server otherwise reuses a slot's KV for
        # the longest common prefix with what it served before, so an SD server that had served the same
        # prompts in an earlier test ran against a reference measured cold: a TTFT and a throughput speedup
        # beyond what drafting could give, and outputs unequal to the reference's (the reused KV was computed
        # in other batches; the figures: docs/benchmarks.md, "Figures the code once quoted").
        return {**openai, "verbose": True, "cache_prompt": False}

    # Each slot keeps its own prompt cache: at 16 in flight a prompt is prefilled in up to 16 slots, at 4 in
    # at most 4.
    draw_concurrency = 4

    def draw_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        # Hundreds of samples of one prompt, untimed: prefilling each in full would cost minutes a side, the
        # cached prefix a fraction of that.
        return {**self.completion_payload(openai), "cache_prompt": True}

    def stream_event(self, data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        # With "verbose", each chunk carries its token ids under `__verbose.tokens`: moved to where OpenAI's
        # shape (and vLLM's return_token_ids) has them, which the output-equivalence check compares.
        tokens = (data.get("__verbose") or {}).get("tokens")
        choices = data.get("choices")
        if tokens and choices and not choices[0].get("token_ids"):
            data = {**data, "choices": [{**choices[0], "token_ids": tokens}, *choices[1:]]}
        return data

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        """The request's drafted and accepted tokens from the final chunk's ``timings``.

        llama-server keeps no per-step breakdown per request (only the
        counters have positions), so this is the summary form; a response
        whose timings name no draft drafted nothing (the fields appear once
        one draft was made).
        """
        timings = payload.get("timings")
        if not isinstance(timings, Mapping) or "predicted_n" not in timings:
            return None
        drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
        for name, value in (("draft_n", drafted), ("draft_n_accepted", accepted)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"timings.{name} must be an int >= 0, got {value!r}")
        if accepted > drafted:
            raise ValueError(f"timings.draft_n_accepted = {accepted} exceeds timings.draft_n = {drafted}")
        return {DRAFTED: drafted, ACCEPTED: accepted}  # no step count: llama-server keeps none per request

    def counters(self, metrics_text: str, model_names, where: str):
        """The ``llamacpp:spec_decode_*`` counters (one model per server: no model label to match)."""
        from .counters import SpecDecodeCounters, parse_prometheus

        totals: dict[str, float] = {}
        per_position: dict[int, float] = {}
        for sample in parse_prometheus(metrics_text):
            if sample.name in _COUNTERS:
                totals[_COUNTERS[sample.name]] = totals.get(_COUNTERS[sample.name], 0.0) + sample.value
            elif sample.name == _PER_POSITION:
                position = int(sample.label("position") or 0)
                per_position[position] = per_position.get(position, 0.0) + sample.value
        missing = sorted(set(_COUNTERS) - {name for name, attr in _COUNTERS.items() if attr in totals})
        if missing:
            return SpecDecodeCounters.unavailable(
                f"no {missing[0]} at {where} (llama-server started without --metrics, or an older build)"
            )
        return SpecDecodeCounters(accepted_per_position=dict(sorted(per_position.items())), **totals)

    def check_build(self, build: str) -> None:
        pass  # a llama-server binary or the Python of an environment with xllamacpp: both launch

    def build_version(self, build: str | None) -> str | None:
        if build is None:  # this environment's: what `server_program` would run
            build = server_program(sys.executable)[0]
        if is_python(build):
            return xllamacpp_version(build)
        try:  # llama-server --version: "version: 8929 (64fbe0fe)" on stderr
            done = subprocess.run([build, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = re.search(r"version: (\d+) \((\w+)\)", done.stdout + done.stderr)
        return f"llama.cpp b{found.group(1)}-{found.group(2)}" if found else None

    def version_from(self, path: str, payload: Any) -> str | None:
        build = payload.get("build_info") if isinstance(payload, dict) else None
        # A build made outside llama.cpp's git tree reports build 0 ("b0-unknown"): no version at all.
        return build if isinstance(build, str) and build and not build.startswith(("b0-", "unknown")) else None

    def local_version(self, command: list[str]) -> str | None:
        if SHIM_MODULE in command:  # the shim run as a module (by hand): this interpreter's
            return xllamacpp_version(sys.executable)
        if SHIM_PATH in command[1:]:  # the shim by its file (`server_program`): ask the Python that runs it,
            # the word before the shim's path, behind any wrapper a launch hook put first (taskset, numactl)
            return xllamacpp_version(command[command.index(SHIM_PATH) - 1])
        return None  # a llama-server binary: only its /props can say, and it did not


def xllamacpp_version(python: str) -> str | None:
    """``xllamacpp X`` as installed for `python` (this interpreter's, or another environment's), else None."""
    if python == sys.executable:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"xllamacpp {version('xllamacpp')}"
        except PackageNotFoundError:
            return None
    probe = "import importlib.metadata as m; print(m.version('xllamacpp'))"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"xllamacpp {done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else None


ENGINE = LlamaCpp()
