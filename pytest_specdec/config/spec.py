"""The ``@pytest.mark.specdec`` marker: its arguments parsed into a `ServerSpec`.

`parse_specdec_marker` fails with a `MarkerError` that names the field at
fault; the engine the marker names refuses what it cannot run.  The spec
itself, the identity every layer shares, is `engines.server_spec`.  Pure
logic: nothing here touches vllm, torch or the network.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

from ..engines import ENGINE_MODULES, EngineConfigError, engine_named
from ..engines.forced_acceptance import forced_acceptance
from ..engines.server_spec import (
    DEFAULT_ENGINE,
    KNOWN_METHODS,
    METHODS_WITH_DRAFT_MODEL,  # noqa: F401
    SCHEDULE_KEY,
    TARGET_PREFIX,
    MarkerError,
    ServerSpec,
    check_k_schedule,
)
from ..serving.endpoint import check_endpoints
from ..serving.models import ModelNameError, parse_model_name

MARKER_FIELDS = (
    "model",
    "speculative_config",
    "server_args",
    "tensor_parallel_size",
    "requires_gpu",
    "endpoints",
    "engine",
)

# pytest-xdist's loadgroup may add "@<group>" to node ids; a group is a target name.
_GROUP_SUFFIX = re.compile(r"@" + TARGET_PREFIX + r"[0-9a-f]{12}$")


def canonical_id(nodeid: str) -> str:
    """The test id without an xdist group suffix, so baselines and reports name a
    test the same with and without -n."""
    return _GROUP_SUFFIX.sub("", nodeid)


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
            "specdec", f"takes keyword arguments only ({', '.join(MARKER_FIELDS)}); got positional {args!r}"
        )
    unknown = sorted(set(kwargs) - set(MARKER_FIELDS))
    if unknown:
        raise MarkerError(unknown[0], f"unknown specdec marker argument; known arguments: {', '.join(MARKER_FIELDS)}")
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
    try:  # each engine refuses the flags it sets itself and what it cannot run (engines/)
        engine_named(engine).check(spec)
    except EngineConfigError as exc:
        raise MarkerError(exc.field, str(exc).split(": ", 1)[1]) from None
    return spec


def _check_engine(value: Any) -> str:
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
    forced_acceptance(config)  # a forced acceptance, if any, as vLLM's SpeculativeConfig would take it
    return config


def _check_server_args(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise MarkerError("server_args", f"must be a list of strings like ['--max-num-seqs', '8'], got {value!r}")
    for item in value:
        if not isinstance(item, str):
            raise MarkerError("server_args", f"every item must be a string, got {item!r}")
    return tuple(value)
