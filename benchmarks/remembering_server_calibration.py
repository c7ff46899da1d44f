"""Does a bound check keep its error rates on a server that remembers what it served?  Simulated sessions.

Suffix decoding keeps what earlier requests produced, so a draw of the workload sent again is faster, by an
amount that depends on the draw's prompts (its memory helps some prompts more than others).  One simulated
session is one ``assert_speedup(min=1.15)`` under ``--specdec-repeats auto``, run by `decide_until` as the
plugin runs it: two draws on each side, SD's draws sent again (`more`), and new draws of the workload on both
sides where the rule asks for them (`new_draws`, measure.more_draws), up to the cap.

- **content**: each draw's log speedup is the truth plus N(0, `--content`) (its prompts);
- **memory**: each draw's sends again are faster than its first send by N(`--memory`, `--memory-spread`) in
  log (the same for every send again of that draw);
- **timing**: every run, both sides, lognormal with relative sd `--sigma`.

The check decides the mean over the draws it measured (content held fixed), so a false pass is counted among
sessions whose measured draws' mean is at or below the bad edge, a false fail among those at or above the good
edge.  Printed for the evidence read as any server's (`remembers` False: how far each first send lies from its
sends again counts as timing) and as a remembering server's (`remembers` True): the rate, the share undecided
and the mean runs a side, at the bad edge, the good edge and a true 1.6x.

    .venv/bin/python benchmarks/remembering_server_calibration.py [--sessions 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.verdict.sequential.evidence import Evidence  # noqa: E402
from pytest_specdec.verdict.sequential.rule import FAILED, PASSED, UNDECIDED, Rule, bound_zone, decide_until  # noqa: E402

BAD, GOOD = bound_zone(1.15)


def session(rng, truth: float, remembers: bool, args) -> tuple[str, float, int]:
    """One check: (outcome, the measured draws' mean log speedup, runs a side)."""
    rule, sigma = Rule(), math.sqrt(math.log1p(args.sigma**2))
    draws: list[tuple[float, float]] = []  # (content, memory) per draw
    sends: list[list[float]] = []
    reference: list[float] = []

    def new_draw() -> None:
        content = args.content * rng.standard_normal()
        memory = args.memory + args.memory_spread * rng.standard_normal()
        draws.append((content, memory))
        sends.append([truth + content + sigma * rng.standard_normal()])
        reference.append(sigma * rng.standard_normal())

    def evidence() -> Evidence:
        return Evidence(tuple(map(tuple, sends)), reference=tuple(reference), remembers=remembers)

    def runs() -> int:
        return sum(len(s) for s in sends)

    def more() -> bool:  # every draw sent once more on SD's server (measure.more_draws.more_runs)
        if runs() + rule.min_runs > rule.max_runs:
            return False
        for i, (content, memory) in enumerate(draws[: rule.min_runs]):
            sends[i].append(truth + content + memory + sigma * rng.standard_normal())
        return True

    def new_draws() -> bool:  # two new draws on both sides (measure.more_draws.new_draws)
        if runs() + rule.min_runs > rule.max_runs:
            return False
        for _ in range(rule.min_runs):
            new_draw()
        return True

    for _ in range(rule.min_runs):
        new_draw()
    decision = decide_until(evidence, more, BAD, GOOD, rule, None, new_draws)
    return decision.outcome, truth + float(np.mean([c for c, _ in draws])), decision.runs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="simulated sessions per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma", type=float, default=0.03, help="one run's relative timing sd (default 0.03)")
    parser.add_argument("--content", type=float, default=0.2, help="sd of a draw's log speedup (default 0.2)")
    parser.add_argument("--memory", type=float, default=0.3, help="mean log speed-up of a send again (default 0.3)")
    parser.add_argument("--memory-spread", type=float, default=0.15, help="its sd between draws (default 0.15)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"{args.sessions} sessions a cell; timing {args.sigma:.0%}, content {args.content}, memory")
    print(
        f"{args.memory:+.2f} +- {args.memory_spread} (log); assert_speedup(min=1.15), auto repeats, cap {Rule().max_runs}"
    )
    print("| read as | truth | rate | undecided | mean runs a side |")
    print("|---|---|---|---|---|")
    for remembers in (False, True):
        for label, truth in (
            ("bad edge, false pass", BAD),
            ("good edge, false fail", GOOD),
            ("1.6x, passed", math.log(1.6)),
        ):
            found = [session(rng, truth, remembers, args) for _ in range(args.sessions)]
            if truth == BAD:
                at = [o for o, mean, _ in found if mean <= BAD]
                rate = sum(o == PASSED for o in at) / max(1, len(at))
            elif truth == GOOD:
                at = [o for o, mean, _ in found if mean >= GOOD]
                rate = sum(o == FAILED for o in at) / max(1, len(at))
            else:
                rate = sum(o == PASSED for o, _, _ in found) / len(found)
            undecided = sum(o == UNDECIDED for o, _, _ in found) / len(found)
            runs = float(np.mean([r for _, _, r in found]))
            read_as = "a remembering server" if remembers else "any server"
            print(f"| {read_as} | {label} | {rate:.1%} | {undecided:.1%} | {runs:.1f} |", flush=True)


if __name__ == "__main__":
    main()
