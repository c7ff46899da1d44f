"""The ``pytest-specdec`` command (also ``python -m pytest_specdec``).

Subcommands:

- ``merge OUT SHARD_DIR... [--update-baselines]``: one report (and one baseline
  update) from the shards of a CI matrix;
- ``bench ...``: ``vllm bench serve`` with exactly its flags, for vLLM's CPU
  build, whose own ``vllm`` script fails (the reproduce commands use it);
- ``history list|detect|plot|export URL``: read a results history
  (``--specdec-history``): its sessions, change points, trends, CSV;
- ``replay --base-url URL --model M --prompts FILE --pattern JSON``: a run's
  prompts sent again (trace arrivals, conversations) by the plugin's client;
- ``prepare-model [NAME...]``: convert the bundled model (and truncated
  drafts) ahead of time, as ``scripts/setup`` does;
- ``bisect --build PATH... -- PYTEST_ARGS``: the first of a row of engine
  builds whose specdec tests differ from the first build's, each step a
  builds A/B against the first.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

PROG = "pytest-specdec"


def _merge_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} merge",
        description="Combine the report directories of sharded pytest-specdec runs (--specdec-shard I/N) "
        "into one report and, with --update-baselines, one baseline update.",
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="directory for the merged report")
    parser.add_argument(
        "shards", metavar="SHARD_DIR", type=Path, nargs="+", help="a shard's --specdec-report directory"
    )
    parser.add_argument(
        "--update-baselines",
        action="store_true",
        help="write the shards' baselines (SHARD_DIR/baselines) into --baseline-dir and, when "
        "every shard ran its whole share, delete baselines no shard's test uses",
    )
    parser.add_argument(
        "--baseline-dir",
        type=Path,
        default=Path("baselines"),
        help="the project's baselines directory (default: ./baselines)",
    )
    parser.add_argument(
        "--allow-mixed-environments", action="store_true", help="merge shards measured on different engines or hardware"
    )
    return parser


def merge_main(argv: Sequence[str]) -> int:
    from .report.files import ReportError
    from .report.merge import MergeError, merge
    from .verdict.gate.baselines import BaselineError

    options = _merge_parser().parse_args(list(argv))
    try:
        document, written, outcome = merge(
            options.out,
            options.shards,
            update_baselines=options.update_baselines,
            baseline_dir=options.baseline_dir,
            allow_mixed=options.allow_mixed_environments,
        )
    except (MergeError, ReportError, BaselineError, OSError) as exc:
        print(f"{PROG} merge: error: {exc}", file=sys.stderr)
        return 2
    for note in document.get("notes", []):
        print(f"note: {note}")
    for path in written:
        print(f"written: {path}")
    if outcome is not None:
        for path in outcome.written:
            print(f"baseline written: {path}")
        for path in outcome.deleted:
            print(f"deleted stale baseline: {path}")
        if outcome.stale_skipped:
            print(f"stale baselines not deleted: {outcome.stale_skipped}")
        if not outcome.written:
            print("no baselines in any baselines/ folder of the shards (did they run with --specdec-update-baselines?)")
    print(f"merged {len(document['results'])} rows from {len(options.shards)} shards into {options.out}")
    return 0


def bench_main(argv: Sequence[str]) -> int:
    from .engines.vllm_bench import run_vllm_bench

    run_vllm_bench(list(argv), prog=f"{PROG} bench")
    return 0


def prepare_model_main(argv: Sequence[str]) -> int:
    from .serving.models import prepare

    return prepare(list(argv))


def history_main(argv: Sequence[str]) -> int:
    from .history.cli import history_main as run

    return run(argv)


def replay_main(argv: Sequence[str]) -> int:
    from .measure.replay import replay_main as run

    return run(argv)


def bisect_main(argv: Sequence[str]) -> int:
    from .bisect import bisect_main as run

    return run(argv)


COMMANDS = {
    "merge": (merge_main, "merge sharded reports (and baselines) into one"),
    "bench": (bench_main, "vllm bench serve, for vLLM's CPU build (takes its flags)"),
    "history": (history_main, "read a results history: list, detect (change points), plot, export"),
    "replay": (replay_main, "send a run's prompts again with its pattern (traces, conversations)"),
    "prepare-model": (prepare_model_main, "convert the bundled model (specdec:smollm2-135m[@layers=N]) now"),
    "bisect": (bisect_main, "the first of a row of engine builds that differs from the first (A/B per step)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] not in COMMANDS and not args[0].startswith("-"):
        # Before 0.2 the command was merge only, and took its arguments directly.
        print(
            f"{PROG}: 'pytest-specdec OUT SHARD_DIR...' is deprecated: use 'pytest-specdec merge OUT SHARD_DIR...'",
            file=sys.stderr,
        )
        args = ["merge", *args]
    if not args or args[0] not in COMMANDS:
        listing = "\n".join(f"  {name:<14} {help_text}" for name, (_, help_text) in COMMANDS.items())
        print(
            f"usage: {PROG} COMMAND [ARGS...]\n\ncommands:\n{listing}",
            file=sys.stderr if args[:1] not in (["-h"], ["--help"]) else sys.stdout,
        )
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    command, _ = COMMANDS[args[0]]
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
