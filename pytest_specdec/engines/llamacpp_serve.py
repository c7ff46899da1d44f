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
    return p


def params_for(args: argparse.Namespace, xlc):
    """xllamacpp's CommonParams for the parsed flags (the attribute names of llama.cpp's common_params)."""
    params = xlc.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}
    params.hostnames = [args.host]
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
    kinds = xlc.common_speculative_type
    speculative = params.speculative
    if args.spec_type == "draft-simple":
        if not args.draft:
            raise SystemExit("llamacpp_serve: --spec-type draft-simple needs -md DRAFT.gguf")
        speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        speculative.draft.mparams.path = args.draft
        if args.spec_draft_n_max is not None:
            speculative.draft.n_max = args.spec_draft_n_max
        if args.spec_draft_n_min is not None:
            speculative.draft.n_min = args.spec_draft_n_min
        if args.spec_draft_p_min is not None:
            speculative.draft.p_min = args.spec_draft_p_min
    elif args.spec_type == "ngram-simple":
        speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        simple = speculative.ngram_simple
        for name in ("size_n", "size_m", "min_hits"):
            value = getattr(args, f"spec_ngram_simple_{name}")
            if value is not None:
                setattr(simple, name, value)
    elif args.draft:
        raise SystemExit("llamacpp_serve: -md given without --spec-type draft-simple (llama-server would not draft)")
    return params


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
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xlc.Server(params_for(args, xlc))  # loads the model(s), then serves HTTP on host:port
    print(
        f"llamacpp_serve: llama.cpp {getattr(xlc, '__version__', '?')} serving {args.model} at "
        f"{server.listening_address}",
        flush=True,
    )
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
