"""``pytest-specdec replay``: send a measurement's prompts again with the plugin's own client.

What `vllm bench serve` cannot send, a trace replayed at its own arrival
times and conversations whose turns carry the replies before them, is
reproduced this way: the prompts file the run wrote (one JSON object per
line: prompt, output_tokens, prompt_len, arrival_s, category, turns) and the
access pattern as the report describes it.  Prints the run's metrics as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from ..load.patterns import AccessPattern, PatternError
from ..load.sampling import Sampling
from ..load.workloads import ENDPOINTS, Prompt
from ..engines.server_spec import DEFAULT_ENGINE

PATTERN_KEYS = ("name", "request_rate", "burstiness", "max_concurrency", "num_prompts", "replay_speed", "think_time_s")


def load_prompts(path: Path) -> list[Prompt]:
    prompts = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            prompts.append(
                Prompt(
                    obj["prompt"],
                    int(obj.get("prompt_len") or 0),
                    int(obj["output_tokens"]),
                    obj.get("category"),
                    obj.get("arrival_s"),
                    tuple((str(t), int(n)) for t, n in obj.get("turns") or ()),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}, line {line_no}: not a prompts line ({type(exc).__name__}: {exc})") from None
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def pattern_from(described: dict) -> AccessPattern:
    values = {key: described[key] for key in PATTERN_KEYS if described.get(key) is not None}
    for key in ("request_rate", "burstiness"):
        if values.get(key) == "inf":
            values[key] = math.inf
    return AccessPattern(**values)


def replay_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="pytest-specdec replay", description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", type=Path, required=True, help="the prompts file a run wrote")
    parser.add_argument("--pattern", required=True, help="the access pattern as JSON (the report's description)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default=DEFAULT_ENGINE)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--sampling", help="the workload's sampling settings as JSON (the report's description)")
    parser.add_argument("--endpoint", choices=ENDPOINTS, default="completions", help="the workload's endpoint")
    options = parser.parse_args(list(argv))
    try:
        prompts = load_prompts(options.prompts)
        pattern = pattern_from(json.loads(options.pattern))
        sampling = Sampling(**json.loads(options.sampling)) if options.sampling else None
    except (OSError, ValueError, PatternError, TypeError) as exc:
        print(f"pytest-specdec replay: error: {exc}", file=sys.stderr)
        return 2
    from ..analysis.metrics import summarize
    from ..load.client import generate_load

    load = generate_load(
        options.base_url,
        options.model,
        prompts,
        pattern,
        seed=options.seed,
        ignore_eos=options.ignore_eos,
        sampling=sampling,
        engine=options.engine,
        endpoint=options.endpoint,
    )
    metrics = summarize(load.records, load.duration_s)
    print(json.dumps({"failed": len(load.failures), **metrics.as_dict()}, indent=1, default=str))
    return 1 if load.failures else 0
