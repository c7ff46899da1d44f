"""What every engine module provides, and the request every launch starts from.

An engine is one inference server (vLLM, SGLang, TensorRT-LLM, llama.cpp)
behind one small interface, as a snapshot library keeps one extension per
format: its command line built from the test's one speculative vocabulary
(vLLM's ``speculative_config`` keys: ``method``, ``num_speculative_tokens``,
``model``, ``prompt_lookup_max``/``min``), the files that command reads, and
where its own SD figures are (a response field, a metrics page).  Anything an
engine cannot express fails with an `EngineConfigError` naming the engine and
the field, at collection, before any server starts.  Pure logic: nothing here
imports an engine or touches the network.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import constraint_words
from .counters import SpecDecodeCounters
from .forced_acceptance import FORCING_KEY, ForcedAcceptance
from .registry import engine_named
from .per_request import PER_REQUEST_FIELDS  # noqa: F401 - the vocabulary `request_sd` speaks
from .rerun import RerunRequest, plugin_replay
from .server_spec import ServerSpec


# How vLLM counts a run's SD figures (its spec_decode_num_* counters), the definition every engine's is read
# against: an engine that counts otherwise says how in its `Engine.acceptance_counting`.
VLLM_ACCEPTANCE_COUNTING = (
    "drafted: the tokens each verify step proposed (a step that proposes none counts neither as a step nor "
    "as tokens); accepted: those the target kept, the bonus token excluded; acceptance length: "
    "1 + accepted / steps"
)

# The share of a GPU assumed for an engine whose own share the plugin does not read.
UNREAD_GPU_SHARE = 0.9


def is_python(path: str) -> bool:
    """Whether a build path names a Python interpreter (``python``, ``python3.11``), not an engine's binary."""
    return re.fullmatch(r"python[0-9.]*", os.path.basename(path)) is not None


def package_version(python: str, distributions: tuple[str, ...]) -> str | None:
    """``name X`` for the first of `distributions` installed for `python` (another environment's), else None."""
    probe = (
        "import importlib.metadata as m\n"
        f"for name in {list(distributions)!r}:\n"
        "    try:\n        print(name, m.version(name)); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


class EngineConfigError(ValueError):
    """A speculative setting the chosen engine cannot run; names the engine and the field."""

    def __init__(self, engine: str, field_name: str, message: str):
        self.engine = engine
        self.field = field_name
        super().__init__(f"{field_name}: {engine} {message}")


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a launch command may depend on; what the launch hook receives."""

    spec: "ServerSpec"
    device: str  # "gpu" or "cpu"
    host: str
    port: int
    model_path: str  # resolved `spec.model` (a directory for bundled models, a GGUF file for llama.cpp)
    speculative_config: Mapping | None  # with a bundled draft name resolved to its path
    kv_cache_bytes: int | None  # CPU only
    python: str = sys.executable
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the server
    # The engine can report each request's per-step acceptance (see engines.vllm.supports_per_request_metrics).
    per_request_metrics: bool = False
    # Where the engine's extra files go (TensorRT-LLM's options file): the server's log folder.
    work_dir: str = ""

    def default_command(self) -> list[str]:
        return engine_named(self.spec.engine).command(self)


def draft_length(engine: str, config: Mapping[str, Any]) -> int:
    """k, the draft tokens per step, which every engine needs; named as the field it came from."""
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise EngineConfigError(
            engine,
            "speculative_config.num_speculative_tokens",
            f"needs the draft length k as an integer >= 1, got {k!r}",
        )
    return k


# vLLM's prompt lookup when a test leaves its sizes out (vllm/config/speculative.py, 0.32): both 5,
# and one size given stands for both.  Every engine resolves the declared matcher this one way.
NGRAM_DEFAULT_SIZE = 5


def ngram_sizes(engine: str, config: Mapping[str, Any]) -> tuple[int, int]:
    """(prompt_lookup_min, prompt_lookup_max) as vLLM resolves them: the matcher the test declares."""
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise EngineConfigError(
                engine, f"speculative_config.{key}", f"needs an n-gram size as an integer >= 1, got {value!r}"
            )
    low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
    if low is None and high is None:
        low = high = NGRAM_DEFAULT_SIZE
    elif low is None:
        low = high
    elif high is None:
        high = low
    if low > high:
        raise EngineConfigError(
            engine, "speculative_config.prompt_lookup_min", f"must be <= prompt_lookup_max, got {low} > {high}"
        )
    return low, high


def refuse_unknown(engine: str, config: Mapping[str, Any], understood: set[str], why: str = "") -> None:
    """Fail on the first key of `config` this engine has no translation for (silently dropping it would
    measure another configuration than the test declares)."""
    for key in sorted(set(config) - understood - {"method"}):
        raise EngineConfigError(
            engine,
            f"speculative_config.{key}",
            f"has no setting for {key!r} with method {config.get('method')!r}"
            + (f" ({why})" if why else "")
            + f"; it understands {sorted(understood)}",
        )


class Engine:
    """One engine's translation and readings.  Subclasses set the names and override what differs."""

    name = ""  # the marker's `engine` value
    title = ""  # how people write it
    devices: tuple[str, ...] = ("gpu",)
    methods: frozenset[str] = frozenset()  # the speculative methods (vLLM's names) it can run
    # Flags the command sets from the marker's fields: a copy in server_args would silently override them.
    own_flags: frozenset[str] = frozenset()
    # Why a flag is the plugin's, where there is more to say than that the marker sets it.
    flag_reasons: Mapping[str, str] = {}
    # The route that answers once the server can take requests, and the one that lists what it serves.
    ready_path = "/health"
    models_path = "/v1/models"
    # What a model name must resolve to for it: "hf" (a Hugging Face directory) or "gguf" (one GGUF file).
    model_format = "hf"
    # The flag that makes it report each request's per-step acceptance, if it has one.
    per_request_flag = ""
    # Where its version is: a JSON route, read by `version_from`.
    version_paths: tuple[str, ...] = ("/version",)
    # The streamed completion route; the body and events are OpenAI's unless `completion_payload` and
    # `stream_event` say otherwise.
    completion_path = "/v1/completions"
    # The streamed chat route (OpenAI's body with ``messages``; chunks carry ``delta.content``), which applies
    # the model's chat template; "" where the engine has none the plugin can measure (`chat_refusal` says why).
    chat_path = "/v1/chat/completions"
    chat_refusal = ""
    # True for an engine whose metrics page has no run totals: the run's SD counters are then the sum of
    # its requests' own figures (`request_sd`), and a request without them makes the counters unavailable.
    counts_per_request = False
    # Whether reading the metrics page for engine facts leaves it as it was (trtllm-serve's drains the
    # iteration statistics the run's counters are summed from: reading it for facts would lose them).
    metrics_facts = True
    # The metrics (Prometheus names) behind the plugin's server series (serving.server_series.SERIES) that
    # its metrics page has; empty with `series_refusal` saying why where reading the page during a run cannot be
    # done without harm.
    series_metrics: Mapping[str, str] = {}
    series_refusal = ""
    # True when each streamed event is one engine step (vLLM sends a step's tokens together), so the
    # tokens per event estimate the accepted drafts where the server gives no per-step arrays.
    events_are_steps = True

    def check(self, spec: "ServerSpec") -> None:
        """Raise EngineConfigError for what this engine cannot run (called at collection)."""
        self.check_flags(spec)
        if spec.speculative_config is not None and spec.method not in self.methods:
            raise EngineConfigError(
                self.title,
                "speculative_config.method",
                f"cannot run method {spec.method!r}; it runs {sorted(self.methods)}",
            )

    # Whether it turns a forced mean length into per-position rates the least-variance way (engines.
    # forced_acceptance.honoured_band): False where the plugin cannot read how it does.
    forced_schedule_known = False

    def check_forced(self, spec: "ServerSpec", forced: ForcedAcceptance, device: str | None) -> None:
        """Refuse, at collection, a forced acceptance (engines.forced_acceptance) this engine, its build or the
        session's device cannot set.  An engine that forces acceptance overrides this; the rest refuse it."""
        raise EngineConfigError(
            self.title,
            f"speculative_config.{FORCING_KEY}",
            "has no setting the plugin knows that forces acceptance (engines/forced_acceptance.py lists those "
            "it translates)",
        )

    def check_endpoint(self, endpoint: str) -> None:
        """Refuse a workload's endpoint this engine cannot serve as measured (called at collection)."""
        if endpoint == "chat" and not self.chat_path:
            raise EngineConfigError(self.title, "workload.endpoint", f"cannot serve 'chat' here: {self.chat_refusal}")

    def check_constraint(self, kind: str, endpoint: str, server_args: Sequence[str] = ()) -> None:
        """Refuse an output constraint (load.constraints) this engine cannot send on `endpoint` (at collection)."""
        if why := constraint_words.refusal(self.name, kind, endpoint, tuple(server_args)):
            raise EngineConfigError(self.title, "workload.constraint", f"cannot send a {kind} constraint: {why}")

    def constrain(self, body: dict[str, Any], kind: str, value: Any, endpoint: str) -> dict[str, Any]:
        """`body` (from `completion_payload`) with an output constraint in this engine's own request words."""
        return constraint_words.constrained_body(self.name, body, kind, value, endpoint)

    # File names of the engine's own server binaries a build path may name (besides a Python): bisect names a
    # build by its folder when the file is one of these.
    build_binaries: tuple[str, ...] = ()

    def check_build(self, build: str) -> None:
        """Refuse a build path this engine cannot launch (EngineConfigError naming it): by default only the
        Python of an environment that holds the engine."""
        if not is_python(build):
            raise EngineConfigError(
                self.title, "build", f"needs the Python of an environment that holds it (.../bin/python), not {build}"
            )

    def build_version(self, build: str | None) -> str | None:
        """``distribution version`` of the engine a build path would launch (None: this environment's), read
        before it starts; None when it cannot say (the server's own version is still read once it runs)."""
        return None

    def check_flags(self, spec: "ServerSpec") -> None:
        """Refuse a server_args flag the command sets itself from the marker's fields."""
        for arg in spec.server_args:
            written = arg.split("=", 1)[0]
            flag = self.flag_name(written)
            named = flag if flag == written else f"{written} (the engine reads it as {flag})"
            if flag in self.flag_reasons:
                raise EngineConfigError(
                    self.title, "server_args", f"flag {named} is not allowed here: {self.flag_reasons[flag]}"
                )
            if flag in self.own_flags:
                raise EngineConfigError(
                    self.title,
                    "server_args",
                    f"flag {named} is set by the plugin from the "
                    "marker's fields; a second copy would silently override it",
                )

    def flag_name(self, flag: str) -> str:
        """The option a server_args flag sets, as `own_flags` names it (the flag itself by default)."""
        return flag

    def command(self, launch: LaunchRequest) -> list[str]:
        raise NotImplementedError

    # How it counts drafted and accepted tokens, in one line; vLLM's unless the engine says otherwise.
    acceptance_counting = VLLM_ACCEPTANCE_COUNTING

    def acceptance_note(self, spec: "ServerSpec") -> str | None:
        """Why this engine's acceptance for `spec` is not vLLM's (a reader must not compare the two), or None;
        by default its `acceptance_counting` where that is not vLLM's (an engine whose counting differs for
        some methods only overrides this to name them)."""
        return None if self.acceptance_counting == VLLM_ACCEPTANCE_COUNTING else self.acceptance_counting

    def restart_command(self, command: Sequence[str]) -> str:
        """A shell line that starts its server again as `command` did, still runnable once the session's
        temporary folder is gone (`rerun.with_files_written` carries a file it reads); as run by default."""
        return shlex.join(command)

    def replay_command(self, rerun: RerunRequest) -> list[str]:
        """The command that sends a saved run's load to its server again (`RerunRequest`): the plugin's own
        `replay` under the Python running this session by default."""
        return plugin_replay(rerun)

    def settle_request_sd(self, figures: Mapping[str, Any], spec: "ServerSpec") -> dict:
        """A request's figures from `request_sd` once the run is over, completed with what the server's
        configuration (`spec`) says and its stream could not (SGLang: k); unchanged by default."""
        return dict(figures)

    # Facts (serving.engine_facts) a fallback switches off against the engine's default, with what the
    # side that logged no fallback ran; and the fix to print for each fact that differs between the sides.
    fallback_defaults: Mapping[str, str] = {}
    confound_fixes: Mapping[str, str] = {}

    def sd_cost(self, fact: str, reference: str, speculative: str, method: str) -> str | None:
        """Why `fact` differs because the engine itself changed it for SD's `method` (its own log says so), with
        the alternative it offers: SD's cost, compared, not a confound.  None (the default): a confound."""
        return None

    def same_path(self, facts) -> tuple[tuple[str, ...], dict[str, str]]:
        """Reference server flags and environment that put a reference on the path the engine forced on the SD
        side for `facts` (those `sd_cost` named), for the mechanism figure; none by default."""
        return (), {}

    def facts_from_log(self, text: str) -> dict[str, str]:
        """What its server's start-up log names (version, dtype, scheduling, ...): none by default."""
        return {}

    def facts_from_metrics(self, samples) -> dict[str, str]:
        """What its metrics page's info gauges name (KV cache size, ...): none by default."""
        return {}

    def facts_from_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """What the server's environment settles that its log does not say (vLLM's model runner): none by default."""
        return {}

    def spec_env(self, spec: "ServerSpec") -> dict[str, str]:
        """Environment the server of `spec` must have, over the session's: what its config sets through the
        environment on this engine (forced acceptance on SGLang and TensorRT-LLM).  None by default."""
        return {}

    def launch_env(self) -> dict[str, str]:
        """Environment its server process gets unless the caller set the variable (none by default)."""
        return {}

    def per_request_metrics_available(self, python: str = sys.executable) -> bool:
        """Whether the build `python` runs can be told to report per-request acceptance (`per_request_flag`)."""
        return False

    def served_name(self, launch: LaunchRequest) -> str:
        """The model name the launched server lists at /v1/models once ready (the marker's by default)."""
        return launch.spec.model

    def launch_files(self, launch: LaunchRequest) -> dict[str, str]:
        """Files the command reads, {path: text}, written before the launch (none by default)."""
        return {}

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        """The request body for `completion_path`, from the OpenAI completion body the client builds
        (unchanged by default)."""
        return openai

    def scoped_payload(self, body: dict[str, Any], scope: str) -> dict[str, Any]:
        """`body` confined to the prompt-cache namespace `scope` (one per run, `load.streaming.run_cache_scope`),
        so no run is served from prefixes an earlier run left on the same server; unchanged for an engine
        without such a field (its timed requests may turn the prompt cache off instead)."""
        return body

    # Requests in flight while drawing samples for a distribution test (`draw_payload`): batched like a loaded
    # server, each prompt's samples one after another so its cached prefix serves the rest.
    draw_concurrency = 16

    def draw_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        """The body for a draw of many samples of one prompt (`assert_same_distribution`), where no time is
        measured: an engine that turns its prompt cache off for timed runs may keep it on here."""
        return self.completion_payload(openai)

    def stream_event(self, data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """One streamed event in OpenAI's completion-chunk shape (``choices[0].text``/``token_ids`` as
        deltas, ``usage``); `state` is the request's own, for engines that stream running totals."""
        return data

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        """A request's own SD figures from its final response payload, in vLLM's per-request form: keys
        of `PER_REQUEST_FIELDS` only (``per_step_accepted``/``per_step_drafted``, or the totals
        ``num_spec_steps``/``num_draft_tokens``/``num_accepted_draft_tokens``, whichever it has);
        None when the payload carries none."""
        return None

    def counters(self, metrics_text: str, model_names, where: str) -> "SpecDecodeCounters":
        """The run's SD counters from the engine's metrics page."""
        return SpecDecodeCounters.unavailable(f"{self.title} exposes no SD counters at {where}")

    def version_from(self, path: str, payload: Any) -> str | None:
        """The engine's version from the JSON of one of `version_paths`."""
        found = payload.get("version") if isinstance(payload, dict) else None
        return found if isinstance(found, str) else None

    def gpu_memory_share(self, server_args) -> tuple[float, str]:
        """The share of each GPU's total memory its server takes, and where that figure came from: the plugin
        waits for that much to be free before starting it (the GPU memory gate)."""
        return UNREAD_GPU_SHARE, f"assumed ({self.title}'s own share is not read)"

    def installed_build(self, device: str) -> tuple[str, str | None]:
        """(distribution, version) of the build this Python would run, for a session's fingerprint."""
        return self.name, None

    def local_version(self, command: list[str]) -> str | None:
        """The version of what `command` ran, from installed packages, where the server cannot say (None)."""
        return None
