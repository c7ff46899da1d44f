"""What a reproduce line needs to rerun a saved run by hand, and the plugin's own `replay` command for it.

Each engine says how its server restarts (`Engine.restart_command`) and how a
saved run's load is sent to it again (`Engine.replay_command`), from one
`RerunRequest`; `measure.reproduce` only asks the engine.  The pattern and the
sampling settings are the load package's objects, used here only through
their ``describe()``/``bench_flags()`` (the engines import nothing above them).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class RerunRequest:
    """A saved run as its reproduce line reruns it: the server it ran against and the load it sent."""

    server_command: tuple[str, ...]  # the command that started the server, as run
    base_url: str
    model: str  # the name the server answered under
    prompts_file: str  # the prompts the run wrote (one JSON object a line)
    pattern: Any  # load.patterns.AccessPattern
    seed: int
    ignore_eos: bool
    engine: str  # the marker's engine value, which `replay --engine` takes
    tokenizer: str = ""
    logprobs: int | None = None
    sampling: Any = None  # load.sampling.Sampling, or None: greedy
    endpoint: str = "completions"
    # A trace's arrival times or conversations: only the plugin's own client sends them.
    replay: bool = False


def plugin_replay(rerun: RerunRequest, python: str = sys.executable) -> list[str]:
    """``python -m pytest_specdec replay ...``: the plugin's client, speaking the engine's request body.

    `python` must hold pytest_specdec: by default the Python running this
    session, never the server's program (``trtllm-serve -m pytest_specdec``
    was printed once, and a llama-server binary the same way).
    """
    sampling = rerun.sampling
    return [
        python,
        "-m",
        "pytest_specdec",
        "replay",
        "--base-url",
        rerun.base_url,
        "--model",
        rerun.model,
        "--prompts",
        str(rerun.prompts_file),
        "--pattern",
        json.dumps(rerun.pattern.describe(), sort_keys=True),
        "--seed",
        str(rerun.seed),
        "--engine",
        rerun.engine,
        *(["--ignore-eos"] if rerun.ignore_eos else []),
        *(["--sampling", json.dumps(sampling.describe())] if sampling is not None and not sampling.greedy else []),
        *(["--endpoint", rerun.endpoint] if rerun.endpoint != "completions" else []),
    ]


def with_files_written(command: Sequence[str], files: Mapping[str, str]) -> str:
    """A shell line that writes `files` ({path in `command`: text}) beside where it runs, then runs `command`
    pointed at them: a reproduce line that still works once pytest has deleted its temporary folder."""
    renamed = {path: Path(path).name for path in files}
    writes = [f"printf '%s' {shlex.quote(text)} > {shlex.quote(renamed[path])}" for path, text in files.items()]
    return " && ".join([*writes, shlex.join(renamed.get(part, part) for part in command)])
