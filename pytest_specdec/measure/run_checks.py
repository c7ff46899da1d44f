"""A measured run that cannot be trusted, named in the order that explains it: a dead server, then failed requests."""

from __future__ import annotations

import signal
import subprocess

from ..engines import engine_named
from ..engines.server_spec import ServerSpec

DEATH_GRACE_S = 3.0


class RunError(RuntimeError):
    """A measurement that cannot be trusted (failed requests, missing markers)."""


def check_run(server, spec: ServerSpec, records, what: str) -> None:
    """Fail a run in the order that explains it: a dead server (exit code, log), then failed requests."""
    failed = [record for record in records if not record.success]
    process = getattr(server, "process", None)
    code = process.poll() if process is not None else None
    if failed and process is not None and code is None:
        # A killed server's sockets close before the process is reaped: give its death a moment
        # to show, so the error names the exit status rather than a refused connection.
        try:
            code = process.wait(timeout=DEATH_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
    if code is not None:
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code < 0 and -code in signal.valid_signals()
            else f"exit code {code}"
        )
        raise RunError(
            f"{what}: the {engine_named(spec.engine).title} server for {spec.label()} died during the run ({how}); "
            f"{len(failed)} of "
            f"{len(records)} requests failed\nserver log: {server.log_path}\n{server.log_tail()}"
        )
    if failed:
        where = f"server log: {server.log_path}\n{server.log_tail()}" if server.log_path else f"endpoint: {server.url}"
        raise RunError(
            f"{what}: {len(failed)} of {len(records)} requests failed on {spec.label()}; first error: "
            f"{failed[0].error}\n{where}"
        )
