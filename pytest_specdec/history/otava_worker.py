"""Run Apache Otava's change-point detection on series given as JSON; print the change points as JSON.

This file runs under the Python of Otava's own environment (Otava pins numpy
and scipy versions vLLM's environment cannot share), so it imports nothing
of pytest-specdec: standard library and Otava only.

stdin:  {"series": [[float, ...], ...], "window": int, "max_pvalue": float, "min_magnitude": float}
stdout: {"otava_version": str, "change_points": [[{"index", "mean_before", "mean_after",
         "std_before", "std_after", "pvalue"}, ...], ...]}  (one list per series)
"""

import json
import sys
from importlib.metadata import version


def main() -> int:
    from otava.analysis import compute_change_points

    request = json.load(sys.stdin)
    found = []
    for values in request["series"]:
        points, _weak = compute_change_points(
            [float(v) for v in values],
            window_len=int(request["window"]),
            max_pvalue=float(request["max_pvalue"]),
            min_magnitude=float(request["min_magnitude"]),
        )
        found.append(
            [
                {
                    "index": int(cp.index),
                    "mean_before": float(cp.stats.mean_1),
                    "mean_after": float(cp.stats.mean_2),
                    "std_before": float(cp.stats.std_1),
                    "std_after": float(cp.stats.std_2),
                    "pvalue": float(cp.stats.pvalue),
                }
                for cp in points
            ]
        )
    json.dump({"otava_version": version("apache-otava"), "change_points": found}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
