"""The one way the plugin writes a file: whole or not at all.

Baselines, reports, plots, prompt files and xdist group files are read by
other processes (teammates, CI steps, the xdist controller) and must never be
seen half written: data goes to a temporary file in the same directory, which
is flushed, synced and renamed over the target in one step.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def write_atomic(
    path: str | os.PathLike, data: str | bytes, *, prefix: str | None = None, mode: int = 0o644, durable: bool = False
) -> Path:
    """Replace `path` with `data` in one rename; returns `path`.

    `prefix` names the temporary file (default ``.<name>.``; baselines use
    their own so a clean-up can tell crashed writers' debris from data).
    `durable` also syncs the directory, so the rename survives a power cut.
    """
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=prefix or f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)  # mkstemp's 0600 would hide the file from teammates and CI steps
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if durable:
        _fsync_directory(path.parent)
    return path


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible everywhere (Windows).
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
