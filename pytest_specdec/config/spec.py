"""What a server is: the target model, its speculative config and its flags.

`ServerSpec` is the identity the pool reuses servers by, and
`parse_specdec_marker` turns the arguments of ``@pytest.mark.specdec`` into
one, failing with a `MarkerError` that names the field at fault.  Pure logic:
nothing here touches vllm, torch or the network.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from ..serving.models import ModelNameError, parse_model_name

# Methods vLLM 0.32 accepts in `--speculative-config`; newer engines add more,
# which a project declares with the `specdec_extra_methods` ini setting.
KNOWN_METHODS = frozenset(
    {
        "ngram",
        "ngram_gpu",
        "suffix",
        "draft_model",
        "eagle",
        "eagle3",
        "medusa",
        "mlp_speculator",
        "mtp",
        "deepseek_mtp",
        "qwen3_next_mtp",
        "mimo_mtp",
        "glm4_moe_mtp",
        "ernie_mtp",
        "longcat_flash_mtp",
        "dflash",
        "dspark",
        "extract_hidden_states",
        "custom_class",
    }
)

# Methods that need a separate draft checkpoint in `speculative_config["model"]`.
METHODS_WITH_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})

# vLLM's dynamic speculation: rows [start_batch_size, end_batch_size, k] (check_k_schedule).
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

MARKER_FIELDS = ("model", "speculative_config", "server_args", "tensor_parallel_size", "requires_gpu", "endpoints",
                 "engine")
DEFAULT_ENGINE = "vllm"

# Flags the plugin sets itself; a test that passes them in server_args would
# silently fight the plugin, so they are refused with a pointer to the field.
_RESERVED_FLAGS = {
    "--port": "the plugin claims a free port itself",
    "--host": "the plugin binds servers to loopback itself",
    "--model": "use the marker's `model` field",
    "--served-model-name": "the plugin serves the model under the marker's `model` name",
    "--speculative-config": "use the marker's `speculative_config` field",
    "--speculative_config": "use the marker's `speculative_config` field",
    "-sc": "use the marker's `speculative_config` field (-sc is vLLM's short name for --speculative-config)",
    "--tensor-parallel-size": "use the marker's `tensor_parallel_size` field",
    "-tp": "use the marker's `tensor_parallel_size` field",
}


TARGET_PREFIX = "specdec-"
# pytest-xdist's loadgroup may add "@<group>" to node ids; a group is a target name.
_GROUP_SUFFIX = re.compile(r"@" + TARGET_PREFIX + r"[0-9a-f]{12}$")


def canonical_id(nodeid: str) -> str:
    """The test id without an xdist group suffix, so baselines and reports name a
    test the same with and without -n."""
    return _GROUP_SUFFIX.sub("", nodeid)


class MarkerError(ValueError):
    """A ``specdec`` marker (or `vllm_server` call) with a bad field."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        super().__init__(f"{field_name}: {message}")


@dataclass(frozen=True)
class ServerSpec:
    """One server configuration; equal specs share one running server."""

    model: str
    speculative_config: Mapping[str, Any] | None = None
    server_args: tuple[str, ...] = ()
    tensor_parallel_size: int = 1
    requires_gpu: bool = False
    # Running servers to use instead of starting any: (("reference", URL), ("speculative", URL)).
    endpoints: tuple[tuple[str, str], ...] = ()
    # The inference engine that serves it (engines/): vllm, sglang, trtllm or llamacpp.
    engine: str = DEFAULT_ENGINE
    # Not part of the identity: who asked, for messages only.
    origin: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Canonical identity: two specs with the same key run on one server."""
        identity = {
            "model": self.model,
            "speculative_config": self.speculative_config,
            "server_args": list(self.server_args),
            "tensor_parallel_size": self.tensor_parallel_size,
        }
        if self.endpoints:  # only then, so managed servers keep the keys they always had
            identity["endpoints"] = dict(self.endpoints)
        if self.engine != DEFAULT_ENGINE:  # likewise: vLLM specs keep their keys, baselines their names
            identity["engine"] = self.engine
        return json.dumps(identity, sort_keys=True, separators=(",", ":"))

    @property
    def target(self) -> str:
        """The target's name: model, server args, TP (and endpoints), without speculation.

        A target's reference server and every SD configuration measured against
        it share this name: it keys shared reference runs, the xdist group that
        keeps them on one worker and the shard that runs them.
        """
        digest = hashlib.sha256(replace(self, speculative_config=None).key.encode()).hexdigest()[:12]
        return f"{TARGET_PREFIX}{digest}"

    @property
    def role(self) -> str:
        return "reference" if self.speculative_config is None else "speculative"

    @property
    def endpoint(self) -> str | None:
        """The URL of the running server to use for this side, if any."""
        return dict(self.endpoints).get(self.role)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServerSpec) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def method(self) -> str | None:
        return None if self.speculative_config is None else self.speculative_config.get("method")

    def reference(self) -> "ServerSpec":
        """The same target and flags without speculation: the no-SD reference."""
        return replace(self, speculative_config=None)

    def label(self) -> str:
        """Short human name, e.g. ``specdec:smollm2-135m [ngram k=4]``."""
        if self.speculative_config is None:
            sd = "no SD"
        else:
            sd = str(self.method)
            k = self.speculative_config.get("num_speculative_tokens")
            if k is not None:
                sd += f" k={k}"
            draft = self.speculative_config.get("model")
            if draft:
                sd += f" draft={draft}"
            for key, value in sorted(self.speculative_config.items()):
                if key not in ("method", "num_speculative_tokens", "model"):
                    sd += f" {key}={json.dumps(value) if not isinstance(value, str) else value}"
        extra = f" tp={self.tensor_parallel_size}" if self.tensor_parallel_size != 1 else ""
        args = f" {' '.join(self.server_args)}" if self.server_args else ""
        at = f" @ {self.endpoint}" if self.endpoint else ""
        on = f" on {self.engine}" if self.engine != DEFAULT_ENGINE else ""
        return f"{self.model} [{sd}{extra}]{args}{on}{at}"


def parse_specdec_marker(
    args: Iterable[Any],
    kwargs: Mapping[str, Any],
    *,
    extra_methods: Iterable[str] = (),
    origin: str = "",
    default_engine: str = DEFAULT_ENGINE,
) -> ServerSpec:
    """Validate ``@pytest.mark.specdec(...)`` arguments strictly.

    >>> parse_specdec_marker((), {"model": "m", "speculative_config":
    ...     {"method": "ngram", "num_speculative_tokens": 4}}).label()
    'm [ngram k=4]'
    """
    args = tuple(args)
    if args:
        raise MarkerError(
            "specdec",
            f"takes keyword arguments only ({', '.join(MARKER_FIELDS)}); got positional {args!r}",
        )
    unknown = sorted(set(kwargs) - set(MARKER_FIELDS))
    if unknown:
        raise MarkerError(
            unknown[0],
            f"unknown specdec marker argument; known arguments: {', '.join(MARKER_FIELDS)}",
        )
    if "model" not in kwargs:
        raise MarkerError("model", "is required (the target model, e.g. 'specdec:smollm2-135m')")
    model = _check_model("model", kwargs["model"])
    speculative_config = _check_speculative_config(
        kwargs.get("speculative_config"), KNOWN_METHODS | frozenset(extra_methods)
    )
    server_args = _check_server_args(kwargs.get("server_args", ()))
    tp = kwargs.get("tensor_parallel_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise MarkerError("tensor_parallel_size", f"must be an integer >= 1, got {tp!r}")
    requires_gpu = kwargs.get("requires_gpu", False)
    if not isinstance(requires_gpu, bool):
        raise MarkerError("requires_gpu", f"must be True or False, got {requires_gpu!r}")
    endpoints = ()
    if kwargs.get("endpoints") is not None:
        from ..serving.endpoint import check_endpoints

        try:
            endpoints = check_endpoints(kwargs["endpoints"])
        except ValueError as exc:
            raise MarkerError("endpoints", str(exc)) from None
    engine = _check_engine(kwargs.get("engine", default_engine))
    spec = ServerSpec(
        model=model,
        speculative_config=speculative_config,
        server_args=server_args,
        tensor_parallel_size=tp,
        requires_gpu=requires_gpu,
        endpoints=endpoints,
        engine=engine,
        origin=origin,
    )
    if engine != DEFAULT_ENGINE:
        from ..engines import EngineConfigError, engine_named

        try:
            engine_named(engine).check(spec)
        except EngineConfigError as exc:
            raise MarkerError(exc.field, str(exc).split(": ", 1)[1]) from None
    return spec


def _check_engine(value: Any) -> str:
    from ..engines import ENGINE_MODULES

    if value not in ENGINE_MODULES:
        raise MarkerError("engine", f"unknown engine {value!r}; known engines: {', '.join(ENGINE_MODULES)}")
    return value


def _check_model(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MarkerError(field_name, f"must be a non-empty model name or path, got {value!r}")
    try:
        parse_model_name(value)
    except ModelNameError as exc:
        raise MarkerError(field_name, str(exc)) from None
    return value


def _check_speculative_config(value: Any, methods: frozenset[str]) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise MarkerError(
            "speculative_config",
            f"must be a mapping like {{'method': 'ngram', 'num_speculative_tokens': 4}}, "
            f"got {type(value).__name__} {value!r}",
        )
    config = dict(value)
    for key in config:
        if not isinstance(key, str):
            raise MarkerError("speculative_config", f"keys must be strings, got {key!r}")
    try:
        json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise MarkerError("speculative_config", f"must be JSON-serialisable: {exc}") from None
    method = config.get("method")
    if method is None:
        raise MarkerError("speculative_config.method", f"is required; known methods: {', '.join(sorted(methods))}")
    if method not in methods:
        raise MarkerError(
            "speculative_config.method",
            f"unknown method {method!r}; known methods: {', '.join(sorted(methods))} "
            "(declare newer ones with the specdec_extra_methods ini setting)",
        )
    k = config.get("num_speculative_tokens")
    if k is None:
        raise MarkerError("speculative_config.num_speculative_tokens", "is required (an integer >= 1)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MarkerError("speculative_config.num_speculative_tokens", f"must be an integer >= 1, got {k!r}")
    if SCHEDULE_KEY in config:
        check_k_schedule(config[SCHEDULE_KEY])
    if method in METHODS_WITH_DRAFT_MODEL and "model" not in config:
        raise MarkerError("speculative_config.model", f"method {method!r} needs a draft model")
    if "model" in config:
        _check_model("speculative_config.model", config["model"])
    return config


def check_k_schedule(value: Any) -> list[tuple[int, int, int]]:
    """``num_speculative_tokens_per_batch_size`` as vLLM 0.32 validates it at engine start, sorted by start.

    Rows are inclusive ``[start_batch_size, end_batch_size, k]``: positive
    bounds with start <= end, k >= 0, ranges that do not overlap once sorted
    (vLLM sorts them itself), the first starting at batch size 1
    (`vllm/v1/spec_decode/dynamic/utils.py`).  Two things vLLM does not
    refuse, so neither does this: a gap between ranges (the batch sizes in it
    keep the k before it) and a k above ``num_speculative_tokens`` (vLLM runs
    ``min(num_speculative_tokens, k)``).  Stricter than vLLM only in wanting
    integers: vLLM's ``int()`` would turn 2.9 into 2 and True into 1.
    """
    name = f"speculative_config.{SCHEDULE_KEY}"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        raise MarkerError(name, f"must be a non-empty list of [start_batch_size, end_batch_size, k] rows, "
                                f"e.g. [[1, 4, 3], [5, 64, 1]]; got {value!r}")
    rows = []
    for index, row in enumerate(value):
        where = f"{name}[{index}]"
        if isinstance(row, (str, bytes)) or not isinstance(row, (list, tuple)) or len(row) != 3:
            raise MarkerError(where, f"must be a 3-item row [start_batch_size, end_batch_size, k], got {row!r}")
        if any(isinstance(item, bool) or not isinstance(item, int) for item in row):
            raise MarkerError(where, f"every item must be an integer, got {row!r}")
        start, end, k = row
        if start < 1 or end < 1:
            raise MarkerError(where, f"batch sizes must be >= 1, got range {start}..{end}")
        if start > end:
            raise MarkerError(where, f"start {start} is above end {end}")
        if k < 0:
            raise MarkerError(where, f"k must be >= 0 (0 turns speculation off for that range), got {k}")
        rows.append((start, end, k, index))
    rows.sort()
    for (start, end, _, index), (next_start, next_end, _, next_index) in zip(rows, rows[1:]):
        if next_start <= end:
            raise MarkerError(f"{name}[{next_index}]", f"range {next_start}..{next_end} overlaps range "
                                                       f"{start}..{end} of row [{index}]")
    if rows[0][0] != 1:
        raise MarkerError(f"{name}[{rows[0][3]}]", f"the lowest range must start at batch size 1 (vLLM needs a k "
                                                   f"for every batch size), got {rows[0][0]}")
    return [(start, end, k) for start, end, k, _ in rows]


def _check_server_args(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise MarkerError("server_args", f"must be a list of strings like ['--max-num-seqs', '8'], got {value!r}")
    for item in value:
        if not isinstance(item, str):
            raise MarkerError("server_args", f"every item must be a string, got {item!r}")
        flag = item.split("=", 1)[0]
        if flag in _RESERVED_FLAGS:
            raise MarkerError("server_args", f"{flag} is not allowed here: {_RESERVED_FLAGS[flag]}")
    return tuple(value)
