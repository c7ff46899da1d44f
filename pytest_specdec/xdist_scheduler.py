"""Keep each target's specdec tests on one pytest-xdist worker.

A target's reference server and the SD servers measured against it must start
on one worker, once: on another worker they would start again.  xdist's own
``--dist loadgroup`` would do it, but with pytest 9 it no longer tags node
ids with their group (it assigns ``item._nodeid``, which pytest 9 ignores),
so every test lands in a group of its own.  The plugin therefore brings its
scheduler: workers write which group each specdec test belongs to while they
collect, and the controller schedules whole groups, as ``--dist loadscope``
schedules whole modules.  Tests without a group are scheduled one by one.

Imported only when pytest-xdist runs; it never imports pytest itself.
"""

from __future__ import annotations

import os

from xdist.scheduler import LoadScopeScheduling

from .config.sharding import read_groups


class TargetScheduling(LoadScopeScheduling):
    """``loadscope`` with the scope of a specdec test being its target's group."""

    def __init__(self, config, log=None, *, groups_dir: str | os.PathLike):
        super().__init__(config, log)
        self._groups_dir = groups_dir
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        # Called once collection has finished on every worker, so the files exist.
        if self._groups is None:
            self._groups = read_groups(self._groups_dir)
        return self._groups.get(nodeid, nodeid)
