"""One engine's server process: its command, port, readiness, log and shutdown.

The process runs in its own process group with its output in a log file.
Start-up polls the engine's readiness route (``/health`` by default), then
the route that lists what it serves (``/v1/models``), and fails fast, with the last
lines of the log, when the process exits; a server that does not become
ready in time, or whose start is interrupted, is stopped before the error
propagates.  Stopping sends SIGTERM to the group, then SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Callable, Mapping, Sequence

import httpx

from ..deprecation import renamed
from ..engines import engine_named
from ..engines.counters import Sample, SpecDecodeCounters, parse_prometheus
from ..engines.server_spec import DEFAULT_ENGINE, ServerSpec
from .ports import PortClaim
from ..engines.base import LaunchRequest  # noqa: F401 - re-exported: launch hooks have imported it from here

DEVICES = ("gpu", "cpu")
# Every process a server spawns inherits this variable; its value finds
# stragglers that left the process group (and lets tests prove none remain).
SERVER_TAG_ENV = "PYTEST_SPECDEC_SERVER_ID"
LOG_TAIL_LINES = 40
MAX_CAUSE_LINES = 5
_EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception):\s")
_WARNING = re.compile(r"\bWARNING\b")


class ServerStartError(RuntimeError):
    """A server exited or timed out during start-up; carries the log tail."""

    def __init__(self, message: str, log_path: Path | None = None, log_tail: str = ""):
        self.log_path = log_path
        self.log_tail = log_tail
        text = message
        if log_path is not None:
            text += f"\nserver log: {log_path}"
        if log_tail:
            text += f"\n{log_tail}"
        super().__init__(text)


METRICS_TIMEOUT_S = 10.0
# Counters created this long before the launch belong to another process (same machine, same clock).
CLOCK_SLACK_S = 1.0


def scrape_counters(server, names) -> SpecDecodeCounters:
    """`server`'s SD counters for `names`; a /metrics that fails or times out makes them unavailable, named."""
    where = f"{server.url}/metrics"
    engine = engine_named(getattr(getattr(server, "spec", None), "engine", DEFAULT_ENGINE))
    try:  # each engine reads its own metrics page (engines/)
        counters = engine.counters(server.metrics_text(), names, where)
    except httpx.TimeoutException:
        return SpecDecodeCounters.unavailable(f"{where} did not answer within {METRICS_TIMEOUT_S:g} s", timed_out=True)
    except (httpx.HTTPError, ValueError) as exc:
        return SpecDecodeCounters.unavailable(f"{where} could not be read: {type(exc).__name__}: {exc}")
    started = getattr(server, "started_at", None)  # wall time of a managed server's launch
    older = [t for _, t in counters.created if t > 0 and started is not None and t < started - CLOCK_SLACK_S]
    if counters.present and older:
        return SpecDecodeCounters.unavailable(
            f"{where}: the SD counters were created at {min(older):.0f}, before this server was started at "
            f"{started:.0f}: another process answers on port {server.port}, so its counters are not this server's"
        )
    return counters


def _die_with_parent() -> None:
    """Child pre-exec: get SIGTERM if the test process dies without cleaning up."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def tagged_pids(tag: str) -> list[int]:
    """Pids of live processes whose environment carries `SERVER_TAG_ENV=tag`."""
    needle = f"{SERVER_TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def process_start(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a live process, or None when it is gone: the start time tells a
    process still exiting from another that was given its pid since."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def still_exiting(started: dict[int, int]) -> list[int]:
    """The pids of `started` (pid -> start time) whose very process still exists and is not yet a zombie.  A
    killed process loses its environment (so its tag) before it is gone: counting tagged processes alone
    declared a server stopped while its engine core was still exiting."""
    return [
        pid
        for pid, start in started.items()
        if (now := process_start(pid)) is not None and now[1] == start and now[0] not in ("Z", "X")
    ]


class ManagedServer:
    """A started (or starting) server; use `start()` once, then `stop()`."""

    def __init__(
        self,
        spec: ServerSpec,
        command: Sequence[str],
        port: PortClaim,
        host: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 900.0,
        stop_timeout: float = 30.0,
        served_name: str | None = None,
        ready_path: str = "/health",
        models_path: str = "/v1/models",
    ):
        self.spec = spec
        # What /v1/models lists once it is ready: the marker's name, unless the engine serves another
        # (trtllm-serve serves a local directory under its basename and has no option to rename it).
        self.served_name = served_name or spec.model
        self.ready_path = ready_path
        self.models_path = models_path  # where it lists what it serves (the engine's `models_path`)
        self.command = list(command)
        self.host = host
        self.port = port.port
        self._port_claim = port
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.tag = uuid.uuid4().hex
        self.env = {**os.environ, **(env or {}), SERVER_TAG_ENV: self.tag}
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None  # wall time of the launch
        self.startup_seconds: float | None = None
        self._log_file = None
        self._paused: list[int] | None = None  # the processes `pause` stopped, until `resume`
        self.resumes = 0  # times it ran again after a pause: a warm-up before it is no longer this one's

    @property
    def paused(self) -> bool:
        return self._paused is not None

    @property
    def paused_processes(self) -> int:
        """How many of its processes `pause` stopped (0: a server of one process, which keeps running)."""
        return len(self._paused or ())

    def pause(self) -> None:
        """Stop every process of this server but the one this process launched (SIGSTOP): an idle server left
        running takes CPU for seconds after its last request (vLLM's worker polls its queue), a stopped one
        none, and it keeps its memory.

        The launched process stays awake because it alone gets a signal when this process dies without
        cleaning up (`_die_with_parent`): a stopped process would hold that SIGTERM.  Awake, it shuts its
        engine down, and vLLM's force-kills each child still there 5 s after its own SIGTERM (`shutdown` in
        vllm/v1/utils.py, 0.32): SIGKILL ends a stopped process too.  llama.cpp's server is one process:
        pausing stops nothing of it, and the pool stops it instead (serving.pool)."""
        if not self.alive or self.paused:
            return
        leader, self._paused = self.process.pid, []
        for pid in tagged_pids(self.tag):
            if pid != leader:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                self._paused.append(pid)

    def resume(self) -> None:
        """Wake what `pause` stopped (SIGCONT); nothing to do for a server that was not paused."""
        if self._paused is None:
            return
        paused, self._paused = self._paused, None
        self.resumes += 1
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str:
        """The name the server serves its model under (the marker's `model`, unless its engine renames it)."""
        return self.served_name

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, on_wait: Callable[[float], None] | None = None) -> "ManagedServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"$ {' '.join(self.command)}\n".encode())
        self._log_file.flush()
        began = time.monotonic()
        self.started_at = time.time()
        try:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as exc:
            self.stop()
            raise ServerStartError(f"could not run {self.command[0]!r}: {exc}", self.log_path) from None
        try:
            self._wait_ready(began, on_wait)
        except BaseException:
            # Half-way start (error, timeout, Ctrl-C): never leave the process behind.
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, began: float, on_wait: Callable[[float], None] | None) -> None:
        deadline = began + self.startup_timeout
        healthy = False
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServerStartError(
                        f"{engine_named(self.spec.engine).title} server for {self.spec.label()} exited with code "
                        f"{code} during start-up",
                        self.log_path,
                        self.log_tail(),
                    )
                now = time.monotonic()
                if now > deadline:
                    raise ServerStartError(
                        f"{engine_named(self.spec.engine).title} server for {self.spec.label()} was not ready within "
                        f"{self.startup_timeout:g} s (raise --specdec-startup-timeout)",
                        self.log_path,
                        self.log_tail(),
                    )
                if on_wait is not None:
                    on_wait(now - began)
                try:
                    if not healthy:
                        healthy = client.get(f"{self.url}{self.ready_path}").status_code == 200
                    if healthy:
                        response = client.get(f"{self.url}{self.models_path}")
                        if response.status_code == 200:
                            served = [m.get("id") for m in response.json().get("data", [])]
                            if self.model in served:
                                return
                            raise ServerStartError(
                                f"the server on port {self.port} serves {served}, not {self.model!r}",
                                self.log_path,
                                self.log_tail(),
                            )
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.5)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the log, preceded by earlier exception lines.

        vLLM's engine core often fails first and the API server's traceback
        ("See root cause above") then fills the tail, so the lines that name
        an exception before the tail are quoted too.
        """
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""
        all_lines = text.rstrip("\n").splitlines()
        head, tail = all_lines[:-lines], all_lines[-lines:]
        causes = [line for line in head if _EXCEPTION_LINE.search(line) and not _WARNING.search(line)]
        quoted = f"--- last {len(tail)} log lines ---\n" + "\n".join(tail)
        if causes:
            earlier = "\n".join(causes[:MAX_CAUSE_LINES])
            quoted = f"--- exception lines earlier in the log ---\n{earlier}\n{quoted}"
        return quoted

    @property
    def served_names(self) -> tuple[str, ...]:
        """The names the model is served under (vLLM labels its counters with the first)."""
        return (self.model,)

    def metrics_text(self) -> str:
        response = httpx.get(f"{self.url}/metrics", timeout=METRICS_TIMEOUT_S)
        response.raise_for_status()
        return response.text

    def metrics(self) -> list[Sample]:
        return parse_prometheus(self.metrics_text())

    def spec_decode_counters(self) -> SpecDecodeCounters:
        """This server's SD counters for its own model, now (unavailable, with the reason, if unreadable)."""
        return scrape_counters(self, self.served_names)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left; idempotent."""
        self.resume()  # a stopped process holds a SIGTERM until it runs again: wake a paused server first
        try:
            # Every process of this server, read while their environments (their tags) are still readable.
            started = {pid: found[1] for pid in tagged_pids(self.tag) if (found := process_start(pid))}
            if self.process is not None and self.process.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self.process.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self.process.wait(timeout=10)
            if self.process is not None:
                # Children that survived their parent or changed process group.
                self._signal_group(signal.SIGKILL)
                deadline = time.monotonic() + 10
                while (stragglers := tagged_pids(self.tag) or still_exiting(started)) and time.monotonic() < deadline:
                    for pid in stragglers:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    time.sleep(0.05)  # SIGKILL is asynchronous: wait until they are gone
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            self._port_claim.release()

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def __repr__(self) -> str:
        state = ("paused" if self.paused else "running") if self.alive else "stopped"
        return f"<ManagedServer {self.spec.label()} {self.url} {state}>"


def __getattr__(name: str):
    # The name every server had while vLLM was the only engine: it still imports, with a warning.
    if name == "VllmServer":
        warnings.warn(renamed("VllmServer", "ManagedServer"), stacklevel=2)
        return ManagedServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
