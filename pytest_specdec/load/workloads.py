"""Workloads: which prompts are sent, and how many tokens each asks for.

A `Workload` is a cheap, frozen description (validated at collection, no
tokenizer, no file access); `Workload.build()` turns it into `Prompt`s with
exact token counts for one tokenizer.  Same (workload, tokenizer,
num_prompts, seed) -> same prompts.

Kinds: ``random`` (random token ids), ``code_edit`` (generated Python plus
an edit instruction whose answer mostly repeats the prompt: where n-gram and
suffix speculation win), ``sharegpt`` (JSON conversations: first human turn,
output = length of the reply), ``spec_bench`` (JSONL ``turns[0]``),
``burstgpt`` (CSV token counts -> random prompts of those lengths), ``jsonl``
(``"prompt"`` + optional ``"output_tokens"``, the format of `vllm bench serve`'s
custom dataset: custom, swe_bench, mlperf; a ``"category"`` field, or the one
``category_field`` names, labels each prompt), ``shared_prefix`` (a few long
common prefixes, ``prefix_len`` tokens each, ``num_prefixes`` of them, each
followed by a question of ``input_len`` tokens), ``mooncake_trace`` (a JSONL
trace of ``timestamp`` ms, ``input_length``, ``output_length`` and ``hash_ids``:
the first ``num_prompts`` requests in order, each with its arrival time, blocks of
one hash id sharing their tokens) and ``custom_builder`` (a user function
``(tokenizer, num_prompts, seed)``).  Spec-Bench prompts carry their
``category``; ``turns`` > 1 makes sharegpt and spec_bench files conversations
(`load.traffic`: each turn carries the conversation so far).

Overrides scale a workload down.  For data files ``input_len`` caps prompt
length (longer prompts are truncated), and ``output_len`` replaces the
per-prompt length of sharegpt and burstgpt; for jsonl it is only the default
for lines without ``"output_tokens"`` (a file that names its lengths means them).
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from .constraints import ConstraintError, parse_constraint
from .sampling import GREEDY, Sampling, SamplingError

# Repeat r > 0 of a run sends prompts (and arrivals) seeded repeat_seed(seed, r):
# methods that remember earlier requests (suffix decoding's global tree,
# prefix caching) would otherwise see each repeat's exact prompts and outputs
# again and speed up run after run.  The reference's repeat r uses the same
# seed, and so does a baseline's, which lets the gate compare repeats in pairs.
REPEAT_SEED_STRIDE = 7919


def repeat_seed(seed: int, repeat: int) -> int:
    return seed + repeat * REPEAT_SEED_STRIDE


SYNTHETIC_KINDS = ("random", "code_edit", "shared_prefix")
FILE_KINDS = ("sharegpt", "spec_bench", "speed_bench", "burstgpt", "jsonl", "mooncake_trace")
# The bundled constrained workloads (load/structured.py): prompts that carry their own output constraints.
CONSTRAINED_KINDS = ("structured", "tool_calls")
KINDS = SYNTHETIC_KINDS + FILE_KINDS + CONSTRAINED_KINDS + ("custom_builder",)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")  # the workload's `Sampling` (load/sampling.py)
# stop="length": every request runs to max_tokens (ignore_eos); "natural": a request may end at the model's
# end of sequence, as production traffic does (max_tokens then only caps it).
STOP_RULES = {"length": True, "natural": False}
# endpoint="completions": the prompt as raw text (/v1/completions); "chat": the prompt as the user's message
# (/v1/chat/completions), which the server wraps in the model's chat template, as chat products send it.
ENDPOINTS = ("completions", "chat")
OVERRIDE_KEYS = (
    "input_len",
    "output_len",
    "path",
    "ignore_eos",
    "turns",
    "prefix_len",
    "num_prefixes",
    "category_field",
    "categories",  # text files with categories: only the entries of these (SPEED-Bench: a category or a tier)
    "stop",
    "endpoint",
    "constraint",  # load.constraints: every prompt's output constrained (None: the prompts' own, if any)
    "unconstrained",  # true: the same prompts with no constraint (the free side of a constrained comparison)
    *SAMPLING_KEYS,
)
CONVERSATION_KINDS = ("sharegpt", "spec_bench", "speed_bench")  # files whose entries have turns
CATEGORY_KINDS = ("spec_bench", "speed_bench", "jsonl")  # text files whose entries name a category
DEFAULT_FILE_OUTPUT_LEN = 256


# How each kind of workload is built: the builder modules (synthetic, datafiles, traffic) register theirs
# when the package loads them, so this module, which they all import, imports none of them.
_BUILDERS: dict[str, tuple[Callable, Callable]] = {}
TEXT_FILE_BUILDER = "text_file"  # sharegpt, spec_bench and jsonl: entries of a text file


def register_builder(kinds: tuple[str, ...], build: Callable, wrap_tokenizer: Callable) -> None:
    """`build(workload, wrap_tokenizer(tokenizer), num_prompts, base_seed)` makes the prompts of `kinds`."""
    for kind in kinds:
        _BUILDERS[kind] = (build, wrap_tokenizer)


def conversation_prompt(history: str, user: str, reply: str | None = None) -> str:
    """The conversation so far (`history`, ending after the assistant's last reply), then `user`'s turn and
    the cue for the next reply.  Plain text: completions take no chat template, and every engine reads it."""
    before = f"{history}{reply}\n" if reply is not None else history
    return f"{before}User: {user}\nAssistant:"


class MissingDataPath(Exception):
    """A data-file workload whose file nobody named: an environment gap, not a marker mistake."""


class WorkloadError(ValueError):
    """A workload that cannot be resolved or built; the message says where and why."""


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_len: int  # len(tokenizer(text).input_ids)
    output_len: int  # max_tokens for this request
    category: str | None = None  # what kind of task it is (Spec-Bench's category, a file's field)
    arrival_s: float | None = None  # a trace's arrival time, seconds after its first request
    # A conversation's later user turns, (text, max_tokens) each: turn t+1 is sent with the conversation so
    # far, the real replies included (load.traffic.conversation_prompt); `text` is the first turn's prompt.
    turns: tuple[tuple[str, int], ...] = ()
    constraint: Any = None  # load.constraints.Constraint its output must meet; None: free text


def _check_len(workload: str, key: str, value: Any, what: str = "field") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"workload {workload!r}: {what} {key!r} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    input_len: int | None = None
    output_len: int | None = None
    path: str | None = None
    ignore_eos: bool = True
    turns: int = 1  # sharegpt / spec_bench: user turns per conversation (1: the first turn alone)
    prefix_len: int | None = None  # shared_prefix: tokens of each common prefix
    num_prefixes: int | None = None  # shared_prefix: how many prefixes the prompts share
    category_field: str = "category"  # jsonl / spec_bench: the field that names a prompt's category
    categories: tuple[str, ...] = ()  # CATEGORY_KINDS: only entries of these categories (empty: every one)
    builder: Callable[[Any, int, int], list[Prompt]] | None = field(default=None, compare=False)
    sampling: Sampling = GREEDY
    endpoint: str = "completions"  # ENDPOINTS
    constraint: Any = None  # load.constraints.Constraint for every prompt; None: the prompts' own, if any
    unconstrained: bool = False  # the prompts' constraints dropped: the free run beside a constrained one

    @property
    def stop(self) -> str:
        return "length" if self.ignore_eos else "natural"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise WorkloadError(f"workload name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise WorkloadError(f"workload {self.name!r}: unknown kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        for key in ("input_len", "output_len"):
            if getattr(self, key) is not None:
                _check_len(self.name, key, getattr(self, key))
        if self.kind in SYNTHETIC_KINDS and (self.input_len is None or self.output_len is None):
            raise WorkloadError(f"workload {self.name!r}: kind {self.kind!r} needs input_len and output_len")
        _check_len(self.name, "turns", self.turns)
        if self.turns > 1 and self.kind not in CONVERSATION_KINDS:
            raise WorkloadError(
                f"workload {self.name!r}: turns > 1 needs a file of conversations "
                f"({', '.join(CONVERSATION_KINDS)}), not kind {self.kind!r}"
            )
        if self.kind == "shared_prefix":
            for key in ("prefix_len", "num_prefixes"):
                if getattr(self, key) is None:
                    raise WorkloadError(f"workload {self.name!r}: kind 'shared_prefix' needs {key}")
                _check_len(self.name, key, getattr(self, key))
        elif self.prefix_len is not None or self.num_prefixes is not None:
            raise WorkloadError(f"workload {self.name!r}: prefix_len and num_prefixes are for kind 'shared_prefix'")
        if not isinstance(self.category_field, str) or not self.category_field:
            raise WorkloadError(
                f"workload {self.name!r}: category_field must be a non-empty string, got {self.category_field!r}"
            )
        if self.categories and self.kind not in CATEGORY_KINDS:
            raise WorkloadError(
                f"workload {self.name!r}: categories select entries of a file that names them "
                f"({', '.join(CATEGORY_KINDS)}), not of kind {self.kind!r}"
            )
        if (self.kind == "custom_builder") != (self.builder is not None):
            raise WorkloadError(f"workload {self.name!r}: a builder goes with kind 'custom_builder' and only with it")
        if self.path is not None and self.kind not in FILE_KINDS:
            raise WorkloadError(f"workload {self.name!r}: kind {self.kind!r} reads no data file, so it takes no path")
        if self.endpoint not in ENDPOINTS:
            raise WorkloadError(
                f"workload {self.name!r}: endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}"
            )

    def with_overrides(self, **overrides: Any) -> Workload:
        changes: dict[str, Any] = {}
        sampling = {key: overrides.pop(key) for key in SAMPLING_KEYS if key in overrides}
        if sampling:
            try:
                changes["sampling"] = replace(self.sampling, **sampling)
            except SamplingError as exc:
                raise WorkloadError(f"workload {self.name!r}: {exc}") from None
        for key, value in overrides.items():
            bad = f"workload {self.name!r}: override {key!r}"
            if key == "stop":
                if not isinstance(value, str) or value not in STOP_RULES:
                    raise WorkloadError(f"{bad} must be one of {', '.join(STOP_RULES)}, got {value!r}")
                key, value = "ignore_eos", STOP_RULES[value]
            elif key == "endpoint":
                if not isinstance(value, str) or value not in ENDPOINTS:
                    raise WorkloadError(f"{bad} must be one of {', '.join(ENDPOINTS)}, got {value!r}")
            elif key == "constraint":
                try:
                    changes[key] = None if value is None else parse_constraint(value, "constraint")
                except ConstraintError as exc:
                    raise WorkloadError(f"{bad}: {exc}") from None
                continue
            elif key not in OVERRIDE_KEYS:
                raise WorkloadError(f"{bad} is unknown; allowed: {', '.join(OVERRIDE_KEYS)}")
            if key in ("input_len", "output_len", "turns", "prefix_len", "num_prefixes"):
                _check_len(self.name, key, value, "override")
                if key == "input_len" and self.kind == "custom_builder":
                    raise WorkloadError(f"{bad} does not apply: its builder decides prompt lengths")
            elif key == "path":
                value = os.fspath(value) if isinstance(value, os.PathLike) else value
                if not isinstance(value, str) or not value:
                    raise WorkloadError(f"{bad} must be a non-empty string, got {value!r}")
                if self.kind not in FILE_KINDS:
                    raise WorkloadError(f"{bad} does not apply: kind {self.kind!r} reads no data file")
            elif key == "categories":
                value = (value,) if isinstance(value, str) else value
                if (
                    not isinstance(value, (list, tuple))
                    or not value
                    or not all(isinstance(v, str) and v for v in value)
                ):
                    raise WorkloadError(f"{bad} must be a category name or a non-empty list of them, got {value!r}")
                value = tuple(value)
            elif key in ("category_field", "endpoint"):
                if not isinstance(value, str) or not value:
                    raise WorkloadError(f"{bad} must be a non-empty string, got {value!r}")
            elif not isinstance(value, bool):
                raise WorkloadError(f"{bad} must be true or false, got {value!r}")
            changes[key] = value
        return replace(self, **changes) if changes else self

    def describe(self) -> dict:
        out = {
            "name": self.name,
            "kind": self.kind,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "path": self.path,
            "ignore_eos": self.ignore_eos,
        }
        # Only where they apply: older reports and baselines describe the same workloads unchanged.
        if self.turns != 1:
            out["turns"] = self.turns
        if self.kind == "shared_prefix":
            out.update(prefix_len=self.prefix_len, num_prefixes=self.num_prefixes)
        if self.category_field != "category":
            out["category_field"] = self.category_field
        if self.categories:
            out["categories"] = list(self.categories)
        if not self.sampling.greedy:
            out["sampling"] = self.sampling.describe()
        if self.endpoint != "completions":
            out["endpoint"] = self.endpoint
        if self.constraint is not None:
            out["constraint"] = self.constraint.describe()
        if self.unconstrained:
            out["unconstrained"] = True
        if self.builder is not None:
            out["builder"] = f"{getattr(self.builder, '__module__', '?')}.{getattr(self.builder, '__qualname__', '?')}"
        return out

    def build(self, tokenizer: Any, num_prompts: int, seed: int = 0) -> list[Prompt]:
        _check_len(self.name, "num_prompts", num_prompts, "argument")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise WorkloadError(f"workload {self.name!r}: seed must be an integer >= 0, got {seed!r}")
        if self.kind == "custom_builder":
            return self._build_custom(tokenizer, num_prompts, seed)
        if self.kind in FILE_KINDS and self.path is None:
            raise WorkloadError(_no_path_message(self.name))
        # Mixing the name in keeps two workloads built with the same seed from
        # sharing prompt prefixes (a prefix-cache win nobody asked for).
        base = [seed, zlib.crc32(f"{self.name}/{self.kind}".encode())]
        build, wrap = _BUILDERS.get(self.kind) or _BUILDERS[TEXT_FILE_BUILDER]
        try:
            return self._constrained(build(self, wrap(tokenizer), num_prompts, base))
        except UnicodeDecodeError as e:
            raise WorkloadError(f"workload {self.name!r}: {self.path}: not UTF-8 text (byte {e.start})") from None

    def _constrained(self, prompts: list[Prompt]) -> list[Prompt]:
        """The workload's own constraint on every prompt, or none on any when it runs `unconstrained`."""
        if self.unconstrained:
            return [replace(p, constraint=None) if p.constraint is not None else p for p in prompts]
        return [replace(p, constraint=self.constraint) for p in prompts] if self.constraint is not None else prompts

    def _build_custom(self, tokenizer: Any, num_prompts: int, seed: int) -> list[Prompt]:
        prompts = list(self.builder(tokenizer, num_prompts, seed))  # type: ignore[misc]
        if len(prompts) != num_prompts or not all(isinstance(p, Prompt) for p in prompts):
            raise WorkloadError(
                f"workload {self.name!r}: builder must return {num_prompts} Prompt objects, "
                f"got {len(prompts)} items of types {sorted({type(p).__name__ for p in prompts})}"
            )
        if self.output_len is not None:
            prompts = [replace(p, output_len=self.output_len) for p in prompts]
        return self._constrained(prompts)


def data_path_env_var(name: str) -> str:
    return "PYTEST_SPECDEC_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_PATH"


def data_path_ini_key(name: str) -> str:
    return "specdec_" + re.sub(r"[^A-Za-z0-9]", "_", name).lower() + "_path"


def _no_path_message(name: str) -> str:
    return (
        f"workload {name!r} reads a data file but no path was given: pass "
        f"@pytest.mark.workload({name!r}, path=...), set {data_path_env_var(name)}, "
        f"or set the ini key {data_path_ini_key(name)}"
    )


CATALOG: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("random_s", "random", input_len=1024, output_len=256),  # single-turn chat
        Workload("random_m", "random", input_len=10240, output_len=256),  # long chat, sub-agent
        Workload("random_l", "random", input_len=2048, output_len=2048),  # reasoning
        Workload("random_x", "random", input_len=10240, output_len=2048),  # agent
        Workload("code_edit", "code_edit", input_len=512, output_len=256),
        # Many requests over a few long common prefixes (a system prompt, a document, a repository).
        Workload("shared_prefix", "shared_prefix", input_len=128, output_len=256, prefix_len=2048, num_prefixes=4),
        Workload("sharegpt", "sharegpt"),
        Workload("spec_bench", "spec_bench", output_len=DEFAULT_FILE_OUTPUT_LEN),
        Workload("spec_bench_multiturn", "spec_bench", output_len=DEFAULT_FILE_OUTPUT_LEN, turns=2),
        # NVIDIA's SPEED-Bench from a local copy (load.datafiles): its qualitative split (categories) or a
        # throughput split (entropy tiers), chosen by the file given and `categories`.
        Workload("speed_bench", "speed_bench", output_len=DEFAULT_FILE_OUTPUT_LEN),
        Workload("sharegpt_multiturn", "sharegpt", turns=3),
        Workload("mooncake_trace", "mooncake_trace"),
        Workload("burstgpt", "burstgpt"),
        Workload("swe_bench", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
        Workload("mlperf", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
        Workload("custom", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
        # Bundled constrained traffic (load/structured.py): extraction under JSON schemas, a regex and a choice;
        # forced tool calls on chat.  Natural stops: a finished grammar allows only the end of sequence.
        Workload("structured", "structured", output_len=64, ignore_eos=False),
        Workload("tool_calls", "tool_calls", output_len=64, ignore_eos=False, endpoint="chat"),
    ]
}


def resolve_workload(
    name_or_workload: str | Workload,
    overrides: Mapping[str, Any] | None = None,
    *,
    registered: Mapping[str, Workload] = {},
    paths: Mapping[str, str] = {},
) -> Workload:
    """Name or Workload + overrides -> the Workload to build; no tokenizer or file needed.

    Registered workloads shadow catalog entries of the same name, so a
    downstream repo can redefine one.  ``paths`` maps workload names to data
    paths found in env vars / ini; an explicit path (override or the
    Workload's own) comes first.
    """
    if isinstance(name_or_workload, Workload):
        workload = name_or_workload
    elif isinstance(name_or_workload, str):
        known = {**CATALOG, **registered}
        if name_or_workload not in known:
            raise WorkloadError(f"unknown workload {name_or_workload!r}; known workloads: {', '.join(sorted(known))}")
        workload = known[name_or_workload]
    else:
        raise WorkloadError(f"a workload is a catalog name or a Workload, got {type(name_or_workload).__name__}")
    workload = workload.with_overrides(**dict(overrides or {}))
    if workload.kind in FILE_KINDS and workload.path is None:
        path = paths.get(workload.name)
        if not path:
            raise MissingDataPath(_no_path_message(workload.name))
        workload = replace(workload, path=os.fspath(path))
    return workload


# The catalog's data-file workloads: each takes a path (marker, environment or ini).
DATA_FILE_WORKLOADS = tuple(name for name, w in CATALOG.items() if w.kind in FILE_KINDS)
