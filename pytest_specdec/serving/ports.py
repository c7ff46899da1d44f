"""Claiming a free loopback port that no other test process will also pick.

Asking the kernel for port 0 and closing the socket leaves a window in which
another pytest-xdist worker can be handed the same number.  Each claim is
therefore also held as an exclusive lock file for as long as the server
lives; a port whose lock is held elsewhere is skipped.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

_LOCK_DIR = Path(tempfile.gettempdir()) / "pytest-specdec-ports"


class PortClaim:
    """A port reserved for one server until `release()`."""

    def __init__(self, port: int, lock_fd: int):
        self.port = port
        self._lock_fd: int | None = lock_fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def __repr__(self) -> str:
        return f"PortClaim({self.port})"


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def claim_port(host: str = "127.0.0.1", attempts: int = 50) -> PortClaim:
    _LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for _ in range(attempts):
        port = _free_port(host)
        fd = os.open(_LOCK_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return PortClaim(port, fd)
    raise RuntimeError(f"could not claim a free port on {host} after {attempts} attempts")
