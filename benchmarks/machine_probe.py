"""How much does the machine probe move from one session to the next on this box?

The regression gate decides "same machine" from the hardware identity and the
machine probe (pytest_specdec/verdict/machine.py), never from the reference's
own speed.  The probe's band (PROBE_BAND) must hold an ordinary session on
the same box.  This script runs the probe in `--sessions` fresh processes, one
after another (as sessions are), and prints each figure's median, range and
the largest change between any session and the first, which is what the gate
compares: a baseline recorded in one session against a probe of another.

    .venv/bin/python benchmarks/machine_probe.py [--sessions 10]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys

PROBE = "import json; from pytest_specdec.verdict.machine import run_probe; print(json.dumps(run_probe()))"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    args = parser.parse_args(argv)
    probes = []
    for i in range(args.sessions):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
        probes.append(json.loads(out))
        print(f"session {i + 1:2d}: {probes[-1]}", flush=True)
    from pytest_specdec.verdict.machine import PROBE_BAND, PROBE_FIGURES
    from pytest_specdec.verdict.fingerprint import collect_fingerprint

    print(f"\nmachine: {collect_fingerprint('cpu')['device_name']}, {platform.machine()}")
    for key in PROBE_FIGURES:
        values = [p[key] for p in probes]
        mid = statistics.median(values)
        worst = max(abs(v / values[0] - 1) for v in values)
        print(
            f"{key:14s} median {mid:9.2f}  range {min(values):.2f}-{max(values):.2f} "
            f"({(max(values) - min(values)) / mid:.1%} of the median); largest change against session 1: "
            f"{worst:.1%} (band {PROBE_BAND:.0%})"
        )
    # Every ordered pair (a baseline from session i, a check in session j), as the gate would judge it.
    pairs = [
        statistics.median(q[k] / p[k] - 1 for k in PROBE_FIGURES)
        for i, p in enumerate(probes)
        for j, q in enumerate(probes)
        if i != j
    ]
    moved = sum(abs(c) > PROBE_BAND for c in pairs)
    print(
        f"the gate's probe change (median of the figures' changes) over {len(pairs)} session pairs: "
        f"{min(pairs):+.1%} to {max(pairs):+.1%}; beyond the {PROBE_BAND:.0%} band: {moved} "
        f"({moved / len(pairs):.1%}), each a same-box session read as 'probe moved'"
    )
    print(f"in-session spread (median below best): max {max(p['spread'] for p in probes):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
