"""Which servers are up: reuse by configuration, one at a time on a device.

Two servers on one device make every timing meaningless (and on a GPU may
not fit), so asking for a configuration that is not running stops the one
that is.  Tests are ordered by configuration (see the plugin) so that each
distinct configuration starts once per session.  A configuration that failed
to start fails again at once for later tests instead of costing another
start-up.
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

    def describe(self) -> str:
        """One line for the session's summary: the server, how its start ended, its log."""
        outcome = (
            f"FAILED: {self.error}"
            if self.error
            else "interrupted"
            if self.startup_seconds is None
            else f"ready in {self.startup_seconds:.1f} s"
        )
        return f"{self.spec.label()}: {outcome}; log {self.log_path}"


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
        self.starts: collections.Counter[str] = collections.Counter()
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
        self._stop_current()
        try:
            server = self._start(spec)
        except ServerStartError as exc:
            self._failed[spec.key] = exc
            raise
        self.current = server
        return server

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
        """Stop the running server (if any); the next `get` starts afresh."""
        self._stop_current()

    def _stop_current(self) -> None:
        if self.current is not None:
            server, self.current = self.current, None
            server.stop()

    def close(self) -> None:
        """Stop every server this pool started; safe to call more than once."""
        self._stop_current()
        _live_pools.discard(self)


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
