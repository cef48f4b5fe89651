#!/usr/bin/env python3
"""Coverage of every interval behind a verdict, on the full grid of shapes the runs meet (issue 42).

For each shape of quantladder.stats.simulate (binary items, arithmetic's equal subsets, BFCL's
unequal categories with differing flip rates, partial credit, RULER's per-length means), each n and
flip rate, it draws paired runs with the truth known and prints the share of runs that claim "within
T" when the true loss is exactly T (nominal: 2.5 %) and the two-sided coverage at no difference
(nominal: 95 %), each with its Monte Carlo standard error and whether it holds (within the discreteness
allowance and three standard errors). Then the per-token KLD interval's coverage, clustered by chunk
and as if tokens were independent. The table in docs/statistics.md ("Coverage") is this script's output.

    .venv/bin/python benchmarks/coverage.py [--runs 2000] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import _common  # noqa: F401  (puts the package on the path)
from quantladder.stats import simulate

GRID_N = (16, 40, 100, 400, 1000, 5000)
GRID_FLIP = (0.02, 0.1, 0.3, 0.5)
MARGINS = {16: 0.14, 40: 0.1, 100: 0.05, 400: 0.03, 1000: 0.02, 5000: 0.01}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000, help="runs per cell (default 2000)")
    ap.add_argument("--quick", action="store_true", help="n up to 400, 400 runs per cell")
    ap.add_argument("--kld-only", action="store_true", help="only the per-token KLD table")
    a = ap.parse_args()
    if a.kld_only:
        bad = kld_table(a.runs)
        print(f"\n{bad} cell(s) where the upper end misses more than 2.5 % + 3 Monte Carlo errors")
        return
    runs = 400 if a.quick else a.runs
    ns = [n for n in GRID_N if not a.quick or n <= 400]
    print(f"| shape | n | flip rate | margin T | claims at the bound (nominal 2.5 %) | coverage at 0 (nominal 95 %) |"
          f" holds |\n|---|---|---|---|---|---|---|")
    bad = 0
    t0 = time.time()
    for name, shape in simulate.SHAPES.items():
        for n in ns:
            for flip in GRID_FLIP:
                margin = MARGINS[n]
                # continuous scores need twice the flips to lose T (a differing item differs by 1/2 on average)
                need = (2 if shape.continuous else 1) * margin
                if flip < need:
                    continue
                cell_runs = runs if n <= 1000 else max(200, runs // 5)
                r = simulate.run(shape, n, flip, margin, runs=cell_runs, seed=11)
                cov_se = math.sqrt(r.coverage_nominal * (1 - r.coverage_nominal) / r.runs)
                ok = r.ni_holds and r.coverage_holds
                bad += not ok
                print(f"| {name} | {n} | {flip:g} | {100 * margin:g} pt | {100 * r.ni_error:.2f} % ± {100 * r.ni_mc_se:.2f}"
                      f" | {100 * r.coverage:.1f} % ± {100 * cov_se:.1f} | {'yes' if ok else '**no**'} |", flush=True)
    print()
    bad += kld_table(max(1000, runs))
    print(f"\n{bad} cell(s) where a method does not hold its level; {time.time() - t0:.0f} s")


def kld_table(runs: int) -> int:
    """The per-token KLD interval (t ∪ lognormal GCI on chunk means) at each end, per chunk effect,
    its spread and the number of chunks (64 tokens each); returns the cells whose upper end fails."""
    print("| KLD per token: chunk effect, log sd | chunks | true mean below the interval (nominal ≤ 2.5 %) | "
          "above it (nominal 2.5 %) | coverage | per-token interval's coverage | holds |\n|---|---|---|---|---|---|---|")
    bad = 0
    for effect in simulate.CHUNK_EFFECTS:
        for sd in (0.2, 0.5, 0.8):
            for g in (2, 3, 4, 8, 16, 64):
                r = simulate.token_coverage(g, 64, chunk_sd=sd, effect=effect, runs=runs, seed=1)
                mc = 100 * math.sqrt(0.025 * 0.975 / runs)
                bad += not r.high_holds
                print(f"| {effect}, {sd:g} | {g} | {100 * r.low_miss:.2f} % | {100 * r.high_miss:.2f} % ± {mc:.2f} | "
                      f"{100 * r.coverage:.1f} % | {100 * r.naive_coverage:.1f} % | {'yes' if r.high_holds else '**no**'} |",
                      flush=True)
    print("\n| same-top-token share: disagreement rate | chunks of 255 tokens | share's interval above the true share "
          "(nominal 2.5 %) | below it | coverage | per-token interval's coverage | holds |\n|---|---|---|---|---|---|---|")
    for gap in (0.01, 0.03, 0.1):
        for g in (3, 4, 8, 16, 64):
            r = simulate.share_coverage(g, 255, gap=gap, runs=runs, seed=1)
            mc = 100 * math.sqrt(0.025 * 0.975 / runs)
            bad += not r.high_holds
            print(f"| {100 * gap:g} % | {g} | {100 * r.high_miss:.2f} % ± {mc:.2f} | {100 * r.low_miss:.2f} % | "
                  f"{100 * r.coverage:.1f} % | {100 * r.naive_coverage:.1f} % | {'yes' if r.high_holds else '**no**'} |",
                  flush=True)
    return bad


if __name__ == "__main__":
    main()
