"""``llama-server`` for machines that have none: llama.cpp's server code from the xllamacpp wheel.

No ``llama-server`` binary is packaged for Debian 12 or 13 (only for sid,
against a newer glibc), and the one PyPI wheel that ships the binary is
built for AVX-512/AMX CPUs.  ``xllamacpp`` (Xorbits, monthly releases, an
AVX2 baseline build) embeds llama.cpp's server in one extension module:
``xllamacpp.Server(params)`` serves the same HTTP API (``/v1/completions``,
``/health``, ``/metrics``, ``/props``) from the same C++ code.  This module
takes the subset of llama-server's flags that `engines.llamacpp` emits (and
a few a test may add), so the engine builds one command line whichever
program runs it::

    python -m pytest_specdec.engines.llamacpp_serve -m target.gguf --alias NAME --host 127.0.0.1 \\
        --port 8080 --metrics -np 16 -c 8192 --kv-unified --spec-type ngram-simple --spec-ngram-simple-size-n 3 ...

It serves until SIGTERM or SIGINT.  A flag it does not know is an error that
names it (llama-server would take it; this stand-in cannot).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

SPEC_TYPES = ("none", "draft-simple", "ngram-simple")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llamacpp_serve", description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-a", "--alias", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--metrics", action="store_true")
    p.add_argument("-np", "--parallel", type=int, default=1)
    p.add_argument("-c", "--ctx-size", type=int, default=0)
    p.add_argument("-kvu", "--kv-unified", action="store_true")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--spec-type", choices=SPEC_TYPES, default="none")
    p.add_argument("-md", "--model-draft", "--spec-draft-model", dest="draft", default=None)
    p.add_argument("--spec-draft-n-max", type=int, default=None)
    p.add_argument("--spec-draft-n-min", type=int, default=None)
    p.add_argument("--spec-draft-p-min", type=float, default=None)
    p.add_argument("--spec-ngram-simple-size-n", type=int, default=None)
    p.add_argument("--spec-ngram-simple-size-m", type=int, default=None)
    p.add_argument("--spec-ngram-simple-min-hits", type=int, default=None)
    # Forced acceptance (benchmarking only; ggml-org/llama.cpp#27711, xllamacpp 2026.10): a mean length
    # counting the target's own token, or comma-separated unconditional per-position probabilities.
    p.add_argument("--spec-synth-len", type=float, default=None)
    p.add_argument("--spec-synth-rates", default=None)
    return p


def params_for(args: argparse.Namespace, xlc):
    """xllamacpp's CommonParams for the parsed flags (the attribute names of llama.cpp's common_params)."""
    params = xlc.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}
    if hasattr(params, "hostnames"):
        params.hostnames = [args.host]
    else:  # before llama.cpp served several addresses (xllamacpp 2026.4)
        params.hostname = args.host
    params.port = args.port
    params.endpoint_metrics = args.metrics
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_size
    if args.kv_unified:
        params.kv_unified = True
    if args.threads is not None:
        params.cpuparams.n_threads = args.threads
    if args.seed is not None:
        params.sampling.seed = args.seed
    if args.spec_type == "draft-simple" and not args.draft:
        raise SystemExit("llamacpp_serve: --spec-type draft-simple needs -md DRAFT.gguf")
    if args.draft and args.spec_type != "draft-simple":
        raise SystemExit("llamacpp_serve: -md given without --spec-type draft-simple (llama-server would not draft)")
    if hasattr(params.speculative, "draft"):
        _speculative(args, xlc, params.speculative)
    else:  # a build from before llama.cpp's speculative-parameters refactor
        _speculative_flat(args, xlc, params.speculative)
    _forced(args, params.speculative)
    return params


def _forced(args, speculative) -> None:
    """Forced acceptance, where the build has it; a build without it is an error that names the flag (serving
    a test unforced would measure another configuration than it declares)."""
    if args.spec_synth_len is None and args.spec_synth_rates is None:
        return
    if not hasattr(speculative, "synth_len"):
        raise SystemExit(
            "llamacpp_serve: --spec-synth-len/--spec-synth-rates: this xllamacpp has no forced acceptance "
            "(CommonParamsSpeculative.synth_len; xllamacpp 2026.10 has it)"
        )
    if args.spec_synth_len is not None:
        speculative.synth_len = args.spec_synth_len
    if args.spec_synth_rates is not None:
        speculative.synth_rates = [float(rate) for rate in args.spec_synth_rates.split(",")]


def _speculative(args, xlc, speculative) -> None:
    """The nested layout (llama.cpp PR #22397, April 2026, in xllamacpp from 2026.5): a list of types,
    ``draft.*`` and ``ngram_simple.*``; draft-simple's ``p_min`` defaults to 0."""
    kinds = xlc.common_speculative_type
    if args.spec_type == "draft-simple":
        speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        speculative.draft.mparams.path = args.draft
        for name in ("n_max", "n_min", "p_min"):
            value = getattr(args, f"spec_draft_{name}")
            if value is not None:
                setattr(speculative.draft, name, value)
    elif args.spec_type == "ngram-simple":
        speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        for name in ("size_n", "size_m", "min_hits"):
            value = getattr(args, f"spec_ngram_simple_{name}")
            if value is not None:
                setattr(speculative.ngram_simple, name, value)


# The flat layout's one `type` (llama.cpp's common_speculative_type before the refactor; xllamacpp 2026.4
# exposes it as a flag enum, which names neither NONE nor NGRAM_SIMPLE, so the numbers are set).
FLAT_TYPES = {"draft-simple": 1, "ngram-simple": 3}
FLAT_FIELDS = {
    "spec_draft_n_max": "n_max",
    "spec_draft_n_min": "n_min",
    "spec_draft_p_min": "p_min",  # its default there is 0.75: the engine always sets it
    "spec_ngram_simple_size_n": "ngram_size_n",
    "spec_ngram_simple_size_m": "ngram_size_m",
    "spec_ngram_simple_min_hits": "ngram_min_hits",
}


def _speculative_flat(args, xlc, speculative) -> None:
    """The flat layout (xllamacpp 2026.4): one ``type``, ``mparams_dft``, and every size beside it."""
    if args.spec_type == "none":
        return
    speculative.type = xlc.common_speculative_type(FLAT_TYPES[args.spec_type])
    if args.spec_type == "draft-simple":
        speculative.mparams_dft.path = args.draft
    prefix = "spec_draft_" if args.spec_type == "draft-simple" else "spec_ngram_simple_"
    for flag, field in FLAT_FIELDS.items():
        value = getattr(args, flag)
        if flag.startswith(prefix) and value is not None:
            setattr(speculative, field, value)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import xllamacpp as xlc
    except ImportError:
        print(
            "llamacpp_serve: the llama.cpp engine needs llama-server or the xllamacpp package: "
            "pip install xllamacpp (or set SPECDEC_LLAMA_SERVER to a llama-server binary)",
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    server = xlc.Server(params_for(args, xlc))  # loads the model(s), then serves HTTP on host:port
    # After the server: xllamacpp 2026.4 installs llama-server's own SIGTERM/SIGINT handlers as it starts,
    # and with those in place a stop request is never seen (the pool kills it at its stop timeout).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(
        f"llamacpp_serve: llama.cpp {getattr(xlc, '__version__', '?')} serving {args.model} at "
        f"{server.listening_address}",
        flush=True,
    )
    while not stop.wait(0.5):  # a timed wait: signal handlers run between its rounds
        pass
    # Straight out, as llama-server does on SIGTERM: xllamacpp 2026.4's Server never returns from its
    # destructor (its HTTP thread is not joined), which cost every stop the pool's 30 s kill timeout.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
