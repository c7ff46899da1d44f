"""Commands that rerun a measurement by hand: the servers as started, and the load.

Every engine says how (`Engine.restart_command`, `Engine.replay_command`):
this module only asks the one that ran the measurement.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import engine_named
from ..engines.rerun import RerunRequest
from ..engines.server_spec import DEFAULT_ENGINE
from ..engines.vllm_bench import run_vllm_bench  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from ..load.patterns import AccessPattern
    from ..serving.server import ManagedServer
    from .result import Run


def reproduce_commands(
    reference: Run,
    speculative: Run,
    server: ManagedServer,
    pattern: AccessPattern,
    prompts_file: Path,
    tokenizer: str,
    seed: int,
    ignore_eos: bool,
    logprobs: int | None = None,
    replay: bool = False,
    engine: str = DEFAULT_ENGINE,
    sampling: Any = None,
    endpoint: str = "completions",
) -> dict[str, str]:
    """Shell commands that rerun this measurement by hand, each from the engine that ran it.

    The servers restart as they were started (`Engine.restart_command`: a
    file the command read from the session's temporary folder is written
    first, so the line still runs once pytest has deleted that folder).  The
    load is what the engine says reruns it (`Engine.replay_command`): on vLLM
    `vllm bench serve` on the same prompts (its custom dataset, unshuffled)
    with the pattern's flags, through ``python -m pytest_specdec bench`` on the
    CPU build; elsewhere, or with a trace, conversations or chat, the plugin's
    own ``replay``, which speaks the engine's request body.
    """
    owner = engine_named(engine)
    rerun = RerunRequest(
        server_command=tuple(getattr(server, "command", None) or reference.server_command or ()),
        base_url=server.url,
        model=server.model,
        prompts_file=str(prompts_file),
        pattern=pattern,
        seed=seed,
        ignore_eos=ignore_eos,
        engine=engine,
        tokenizer=tokenizer,
        logprobs=logprobs,
        sampling=sampling,
        endpoint=endpoint,
        replay=replay,
    )

    def started(run: Run) -> str:
        return (
            owner.restart_command(list(run.server_command))
            if run.server_command
            else f"(a running endpoint, not started by pytest-specdec: {run.spec.endpoint})"
        )

    return {
        "reference_server": started(reference),
        "speculative_server": started(speculative),
        "bench": shlex.join(owner.replay_command(rerun)),
    }
