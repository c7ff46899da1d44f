"""What a server is asked to serve: the target model, its speculative config, its flags and engine.

`ServerSpec` is the identity every layer shares: the pool reuses servers by it,
an engine turns it into a command, results and baselines are named by it.
The marker that makes one is parsed in `config.spec`; this module holds only
the identity and the speculative vocabulary it is written in (vLLM's keys),
so that engines and everything above them can use it without the layers
that resolve options.  Pure logic: nothing here touches an engine or the network.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

DEFAULT_ENGINE = "vllm"
TARGET_PREFIX = "specdec-"
# The prefix of the bundled model names (`specdec:smollm2-135m`, serving/models.py).
BUNDLED_PREFIX = "specdec:"

# Drafters that learn from the requests a server has served: suffix decoding caches each response in a tree
# it drafts from (vLLM's `suffix_decoding_max_cached_requests`).
REMEMBERING_METHODS = frozenset({"suffix"})

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


class MarkerError(ValueError):
    """A ``specdec`` marker (or `specdec_server` call) with a bad field."""

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
    # Which build of the engine serves it: the Python of another environment (another vLLM or xllamacpp
    # release) or a llama-server binary; None is the session's own (--specdec-build, else this environment).
    build: str | None = None
    # Environment the server gets beside the session's, ((NAME, value), ...): set by the plugin only, for a
    # reference on the engine path the engine forced on SD (measure.mechanism: VLLM_USE_V2_MODEL_RUNNER=0).
    env: tuple[tuple[str, str], ...] = ()
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
        if self.build is not None:  # likewise: the session's own build keeps the keys it always had
            identity["build"] = self.build
        if self.env:  # likewise
            identity["env"] = dict(self.env)
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

    @property
    def remembers_requests(self) -> bool:
        """Whether its drafter keeps what earlier requests produced (suffix decoding's global tree): such a
        server serves prompts it has seen faster, so it is never kept for a later test (serving.pool)."""
        return self.method in REMEMBERING_METHODS

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
        built = f" (build {self.build})" if self.build is not None else ""
        env = "".join(f" {name}={value}" for name, value in self.env)
        return f"{self.model} [{sd}{extra}]{args}{env}{on}{built}{at}"

    def on_build(self, build: str | None) -> "ServerSpec":
        """The same configuration served by another build of its engine (None: the session's own)."""
        return replace(self, build=build)


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
        raise MarkerError(
            name,
            f"must be a non-empty list of [start_batch_size, end_batch_size, k] rows, "
            f"e.g. [[1, 4, 3], [5, 64, 1]]; got {value!r}",
        )
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
            raise MarkerError(
                f"{name}[{next_index}]",
                f"range {next_start}..{next_end} overlaps range {start}..{end} of row [{index}]",
            )
    if rows[0][0] != 1:
        raise MarkerError(
            f"{name}[{rows[0][3]}]",
            f"the lowest range must start at batch size 1 (vLLM needs a k for every batch size), got {rows[0][0]}",
        )
    return [(start, end, k) for start, end, k, _ in rows]
