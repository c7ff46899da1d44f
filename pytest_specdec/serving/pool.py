"""Which servers are up: reuse by configuration, one at a time on a device.

Two servers on one device make every timing meaningless (and on a GPU may
not fit), so asking for a configuration that is not running stops the one
that is.  Tests are ordered by configuration (see the plugin) so that each
distinct configuration starts once per session.  A configuration that failed
to start fails again at once for later tests instead of costing another
start-up.

On a CPU the one that is running may be parked instead (`park_limit`): its
processes stopped (`ManagedServer.pause`), so it takes no CPU and only
memory, and a later test of its configuration resumes it in a moment where a
start takes most of a minute on vLLM's CPU build.  A comparison measured
again, the reference sent again after SD's runs and the closing drift check
come back to servers that ran before, and each used to cost a start.  A
server whose drafter learns from what it served (suffix decoding) is never
parked: resumed, it would draft a repeated prompt from its own answer.  The
memory a parked server holds is what limits it: none is parked while the
machine has less than `park_min_available` bytes free.  A GPU's memory is
claimed per server, so nothing is parked there.
"""

from __future__ import annotations

import atexit
import collections
import re
import sys
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from ..engines import engine_named
from ..engines.server_spec import BUNDLED_PREFIX, ServerSpec
from .models import resolve_model
from .ports import claim_port
from .server import LaunchRequest, ManagedServer, ServerStartError

DEFAULT_KV_CACHE_BYTES = 1024**3  # plenty for SmolLM2 on the CPU build
# Room for the next start after one more vLLM CPU server of the bundled model is parked: such a server holds
# an API server, an engine core and a worker with its KV cache (docs/benchmarks.md has its measured size).
PARK_MIN_AVAILABLE = 8 * 1024**3

Launcher = Callable[[LaunchRequest], list]
EventSink = Callable[[str], None]

_live_pools: "weakref.WeakSet[ServerPool]" = weakref.WeakSet()


@atexit.register
def _stop_everything() -> None:
    # Last line of defence when the test run ends without its teardown
    # (an interrupted session, an error in another plugin).
    for pool in list(_live_pools):
        pool.close()


@dataclass
class StartRecord:
    spec: ServerSpec
    url: str
    log_path: Path
    startup_seconds: float | None
    error: str | None = None
    resumes: int = 0  # times it was parked and resumed instead of started again

    def describe(self) -> str:
        """One line for the session's summary: the server, how its start ended, its log."""
        outcome = (
            f"FAILED: {self.error}"
            if self.error
            else "interrupted"
            if self.startup_seconds is None
            else f"ready in {self.startup_seconds:.1f} s"
        )
        resumed = (
            f"; resumed {self.resumes} time{'s' if self.resumes != 1 else ''} after parking" if self.resumes else ""
        )
        return f"{self.spec.label()}: {outcome}; log {self.log_path}{resumed}"


class ServerPool:
    def __init__(
        self,
        device: str,
        log_dir: Path,
        *,
        launcher: Launcher | None = None,
        host: str = "127.0.0.1",
        kv_cache_bytes: int | None = DEFAULT_KV_CACHE_BYTES,
        startup_timeout: float = 900.0,
        stop_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        on_event: EventSink | None = None,
        model_resolver: Callable[[str], str] = resolve_model,
        before_start: Callable[[ServerSpec], None] | None = None,
        python: str = sys.executable,
        park_limit: int = 0,
        park_min_available: int = PARK_MIN_AVAILABLE,
        memory_available: Callable[[], int | None] | None = None,
    ):
        self.device = device
        # The Python whose environment holds the engine build to launch (another environment: another build).
        self.python = python
        self.log_dir = Path(log_dir)
        self.launcher = launcher or (lambda launch: launch.default_command())
        self.host = host
        self.kv_cache_bytes = kv_cache_bytes
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.env = dict(env or {})
        self.on_event = on_event or (lambda message: None)
        self.model_resolver = model_resolver
        # Called after the previous server stopped, before the next starts
        # (the plugin waits there for GPU memory to be released).
        self.before_start = before_start
        self.current: ManagedServer | None = None
        # Servers set aside paused, by configuration, in the order parked: at most `park_limit` (0: stop instead).
        self.park_limit = park_limit
        self.park_min_available = park_min_available
        self.memory_available = memory_available or available_memory
        self.parked: collections.OrderedDict[str, ManagedServer] = collections.OrderedDict()
        self.starts: collections.Counter[str] = collections.Counter()
        self.resumes: collections.Counter[str] = collections.Counter()
        self.history: list[StartRecord] = []
        self._failed: dict[str, Exception] = {}
        self._external_servers: dict[str, object] = {}
        self._per_request_support: dict[str, bool] = {}  # by engine name
        _live_pools.add(self)

    def get(self, spec: ServerSpec) -> ManagedServer:
        """A ready server for `spec`, reusing the running one when it matches."""
        if spec.endpoint:
            return self._external(spec)
        if self.current is not None and self.current.spec == spec:
            if self.current.alive:
                return self.current
            self.on_event(f"server for {spec.label()} died (exit code {self.current.process.poll()}); restarting")
            self._stop_current()
        if spec.key in self._failed:
            raise ServerStartError(f"(failed earlier in this session) {self._failed[spec.key]}")
        self._set_aside_current()
        if (parked := self.parked.pop(spec.key, None)) is not None:
            if parked.alive:
                parked.resume()
                self.resumes[spec.key] += 1
                self._record(spec).resumes += 1
                self.on_event(f"resumed {spec.label()}: parked, not started again")
                self.current = parked
                return parked
            self.on_event(f"server for {spec.label()} died while parked (exit code {parked.process.poll()})")
            parked.stop()
        self._make_room()
        try:
            server = self._start(spec)
        except ServerStartError as exc:
            self._failed[spec.key] = exc
            raise
        self.current = server
        return server

    def start_anew(self, spec: ServerSpec) -> ManagedServer:
        """A server for `spec` started afresh, even where one runs or is parked (--specdec-measure-drift: the
        spread between starts of one configuration); a running endpoint cannot be, and is refused."""
        if spec.endpoint:
            raise ServerStartError(f"{spec.label()} is a running endpoint: the plugin does not start it anew")
        if self.current is not None and self.current.spec == spec:
            self._stop_current()
        if (parked := self.parked.pop(spec.key, None)) is not None:
            parked.stop()
        return self.get(spec)

    def _external(self, spec: ServerSpec):
        """A server someone else runs: checked once per session, never started or stopped."""
        from .endpoint import EndpointError, ExternalServer

        if spec.key in self._failed:
            raise self._failed[spec.key]
        if spec.key not in self._external_servers:
            try:
                self._external_servers[spec.key] = ExternalServer(spec, spec.role, spec.endpoint).check()
            except EndpointError as exc:
                self._failed[spec.key] = exc
                raise
            self.on_event(f"using the running {spec.role} endpoint {spec.endpoint} for {spec.label()}")
        return self._external_servers[spec.key]

    def _resolver(self, spec: ServerSpec) -> Callable[[str], str]:
        """How model names become what the engine loads: GGUF files for an engine that takes them
        (gguf_models.py), else Hugging Face directories."""
        if engine_named(spec.engine).model_format == "gguf" and self.model_resolver is resolve_model:
            from .gguf_models import resolve_gguf

            return resolve_gguf
        return self.model_resolver

    def _launch_request(self, spec: ServerSpec, port: int) -> LaunchRequest:
        resolve = self._resolver(spec)
        draft_config = spec.speculative_config
        if draft_config is not None and isinstance(draft_config.get("model"), str):
            draft_config = {**draft_config, "model": resolve(draft_config["model"])}
        engine = engine_named(spec.engine)
        env = dict(self.env)
        if spec.model.startswith(BUNDLED_PREFIX):
            env.setdefault("HF_HUB_OFFLINE", "1")  # the bundled model is local: never ask a hub
        for name, value in engine.launch_env().items():
            env.setdefault(name, value)
        env.update(spec.env)  # the spec's own (a reference on SD's engine path) over the session's
        env.update(engine.spec_env(spec))  # what the config sets through the environment (forced acceptance)
        per_request_metrics = draft_config is not None and self._per_request_metrics(engine, spec.build or self.python)
        return LaunchRequest(
            spec=spec,
            device=self.device,
            host=self.host,
            port=port,
            model_path=resolve(spec.model),
            speculative_config=draft_config,
            kv_cache_bytes=self.kv_cache_bytes if self.device == "cpu" else None,
            python=spec.build or self.python,
            env=env,
            per_request_metrics=per_request_metrics,
            work_dir=str(self.log_dir),
        )

    def _per_request_metrics(self, engine, python: str) -> bool:
        """Ask each engine build once whether it can be told to report per-request acceptance; say so when not."""
        key = f"{engine.name} {python}"
        if key not in self._per_request_support:
            supported = self._per_request_support[key] = engine.per_request_metrics_available(python)
            if not supported and engine.per_request_flag:
                self.on_event(
                    f"this {engine.title} ({python}) has no {engine.per_request_flag}: per-step acceptance is "
                    "estimated from the tokens in each streamed chunk (labelled estimated)"
                )
        return self._per_request_support[key]

    def _start(self, spec: ServerSpec) -> ManagedServer:
        if self.device not in ("gpu", "cpu"):
            raise ServerStartError(
                f"{spec.label()} needs a server started, and no device flag was given: "
                "run with --specdec-gpu or --specdec-cpu, or give it running endpoints"
            )
        if self.before_start is not None:
            try:
                self.before_start(spec)
            except Exception as exc:  # noqa: BLE001 - a refusal to start is this start's failure
                raise ServerStartError(f"{spec.label()} not started: {exc}") from None
        engine = engine_named(spec.engine)
        if self.device not in engine.devices:
            raise ServerStartError(
                f"{spec.label()} not started: {engine.title} runs on {' or '.join(engine.devices)} "
                f"here, not on {self.device} (--specdec-{self.device})"
            )
        claim = claim_port(self.host)
        try:
            launch = self._launch_request(spec, claim.port)
            command = self.launcher(launch)
            for path, text in engine.launch_files(launch).items():  # e.g. TensorRT-LLM's options file
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(text, encoding="utf-8")
        except BaseException:
            claim.release()
            raise
        if not isinstance(command, (list, tuple)) or not command or not all(isinstance(part, str) for part in command):
            claim.release()
            raise ServerStartError(f"the launch command for {spec.label()} must be a list of strings, got {command!r}")
        index = sum(self.starts.values()) + 1
        log_path = self.log_dir / f"server-{index:02d}-{_slug(spec.label())}.log"
        server = ManagedServer(
            spec,
            command,
            claim,
            self.host,
            log_path,
            env=launch.env,
            startup_timeout=self.startup_timeout,
            stop_timeout=self.stop_timeout,
            served_name=engine.served_name(launch),
            ready_path=engine.ready_path,
            models_path=engine.models_path,
        )
        self.starts[spec.key] += 1
        self.on_event(f"starting {engine.title} ({self.device}) for {spec.label()} on {server.url}; log: {log_path}")
        record = StartRecord(spec, server.url, log_path, None)
        self.history.append(record)
        began = time.monotonic()
        try:
            server.start()
        except ServerStartError as exc:
            record.error = str(exc).splitlines()[0]
            raise
        record.startup_seconds = server.startup_seconds
        self.on_event(f"ready in {time.monotonic() - began:.1f} s: {spec.label()}")
        return server

    def stop_running(self) -> None:
        """Stop every server of the pool, the running one and the parked ones: the next `get` starts afresh,
        and nothing of the pool is left for a test that runs servers of its own."""
        self._stop_current()
        while self.parked:
            self._stop_parked()

    def _stop_current(self) -> None:
        if self.current is not None:
            server, self.current = self.current, None
            server.stop()

    def _set_aside_current(self) -> None:
        """Park the running server where parking is on and memory allows, else stop it."""
        server = self.current
        if server is None:
            return
        # A drafter that learned from earlier requests would draft a later test's repeated prompts from them:
        # such a server starts afresh, as every server did before parking.
        if self.park_limit < 1 or not server.alive or server.spec.remembers_requests or not self._memory_to_spare():
            self._stop_current()
            return
        server.pause()
        if not server.paused_processes:  # one process (llama.cpp): nothing stopped, so it would stay running
            self._stop_current()
            return
        self.current = None
        self.parked[server.spec.key] = server
        while len(self.parked) > self.park_limit:
            self._stop_parked()

    def _memory_to_spare(self) -> bool:
        available = self.memory_available()
        return available is not None and available >= self.park_min_available

    def _make_room(self) -> None:
        """Before a start: stop parked servers (`_stop_parked` picks which) while memory is short."""
        while self.parked and not self._memory_to_spare():
            self._stop_parked()

    def _stop_parked(self) -> None:
        """Stop one parked server: the SD server parked longest ago, else the oldest reference.  References
        are what later tests come back to (a comparison measured again, the machine's move, the drift check)."""
        key = next((key for key, server in self.parked.items() if server.spec.speculative_config), None)
        self.parked.pop(key if key is not None else next(iter(self.parked))).stop()

    def _record(self, spec: ServerSpec) -> StartRecord:
        return next(record for record in reversed(self.history) if record.spec.key == spec.key)

    def close(self) -> None:
        """Stop every server this pool started, parked ones too; safe to call more than once."""
        self.stop_running()
        _live_pools.discard(self)


def available_memory() -> int | None:
    """Bytes the machine can still give (MemAvailable), or None where /proc/meminfo does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")[:80]


def order_for_reuse(
    keys: list[str | None], targets: list[str | None] | None = None, lead: frozenset[str] = frozenset()
) -> list[int]:
    """Indices that put equal server keys next to each other, else keep order.

    Each group of equal keys moves to where its first member stood, so a
    session starts every configuration once; None (not a server test) stays
    in place relative to the groups.  A key in `lead` (a group whose tests
    announce no reference runs but may measure some when they run, as a
    concurrency sweep does) moves ahead of the first group of its target
    (`targets`, one per key): its reference runs then find the reference
    server up for the runs the other groups announced, instead of starting
    it once more after them.

    >>> order_for_reuse(["a", None, "b", "a", "b"])
    [0, 3, 1, 2, 4]
    >>> order_for_reuse(["a", None, "b"], ["t", None, "t"], lead=frozenset({"b"}))
    [2, 0, 1]
    """
    targets = targets or [None] * len(keys)
    first_seen: dict[str, int] = {}
    target_first: dict[str | None, int] = {}
    for index, key in enumerate(keys):
        if key is not None:
            first_seen.setdefault(key, index)
            target_first.setdefault(targets[index], index)

    def rank(index: int) -> tuple[int, int, int]:
        key = keys[index]
        if key is None:
            return (index, 1, index)
        if key in lead:
            return (target_first[targets[index]], 0, index)
        return (first_seen[key], 1, index)

    return sorted(range(len(keys)), key=rank)
