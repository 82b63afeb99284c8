"""Speed of the attention SVMs (prints times and ratios; not a timed test).

* the Frobenius Att-SVM at n=100, T=16, d=64 (target: <= 2 s);
* on a grid of shapes, the built-in solver's "primal" and "dual" formulations and the
  automatic choice (:func:`attnsvm.svm.choose_formulation`); target: auto <= 1.5 x the
  better of the two;
* the nuclear-norm Att-SVM at n=20, T=8, d=32 (target: <= 10 s).

Usage: ``python benchmarks/svm_speed.py [--repeats R] [--threads N]``. Each time is the best
of ``R`` runs (default 5); the grid's three variants are timed in alternating rounds.
``--threads N`` caps the BLAS threads (threadpoolctl; default 1, ``0`` = no cap): on a
2-core machine shared with other jobs, multi-threaded OpenBLAS oversubscribes and times
become erratic (up to 30x slower), while one thread loses at most 2x. The last line is
``fro_n100_T16_d64_seconds=<seconds>``.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from attnsvm.data import random_unit
from attnsvm.svm import InfeasibleError, att_svm, choose_formulation

GRID = [  # (n, T, d): over- and under-parameterized shapes, all feasible for seed 0
    (10, 8, 8), (20, 8, 12), (50, 8, 10), (100, 4, 16), (30, 16, 20), (60, 8, 22),
    (20, 8, 32), (100, 8, 24), (4, 40, 6), (8, 64, 9), (10, 100, 12), (40, 20, 28),
    (100, 7, 20), (100, 9, 20), (150, 8, 20),          # around the crossover K/d^2 = 1.5
]


def best_time(fn, repeats, min_total=0.3):
    """Best of ``repeats`` runs (more for fast functions, until ``min_total`` seconds)."""
    best, total, k = np.inf, 0.0, 0
    while k < repeats or (total < min_total and k < 50):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, total, k = min(best, dt), total + dt, k + 1
    return best


def interleaved(fns, repeats):
    """Best times of several functions measured in alternating rounds (fair under load)."""
    best = [np.inf] * len(fns)
    for r in range(max(repeats, 1)):
        for j, fn in enumerate(fns):
            best[j] = min(best[j], best_time(fn, 1, min_total=0.05))
    return best


def instance(n, T, d, seed=0):
    D = random_unit(n, T, d, cross=True, seed=seed)
    return D.X, D.Z, D.opt


def grid_table(repeats):
    print(f"{'n':>4} {'T':>4} {'d':>4} {'K=n(T-1)':>9} {'d^2':>6} {'primal s':>9} {'dual s':>9} "
          f"{'auto':>6} {'auto s':>9} {'auto/best':>9}")
    worst = 0.0
    for n, T, d in GRID:
        X, Z, opt = instance(n, T, d)
        try:
            att_svm(X, Z, opt)
        except InfeasibleError:
            print(f"{n:>4} {T:>4} {d:>4}  infeasible, skipped")
            continue
        tp, td, ta = interleaved([lambda: att_svm(X, Z, opt, solver="primal"),
                                  lambda: att_svm(X, Z, opt, solver="dual"),
                                  lambda: att_svm(X, Z, opt)], repeats)
        ratio = ta / min(tp, td)
        worst = max(worst, ratio)
        form = choose_formulation(n * (T - 1), d * d)
        print(f"{n:>4} {T:>4} {d:>4} {n * (T - 1):>9} {d * d:>6} {tp:>9.4f} {td:>9.4f} "
              f"{form:>6} {ta:>9.4f} {ratio:>9.2f}")
    print(f"worst auto/best ratio on the grid: {worst:.2f} (target <= 1.5)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS threads (default 1; 0 = the library default)")
    args = ap.parse_args(argv)
    ctx = contextlib.nullcontext()
    if args.threads:
        from threadpoolctl import threadpool_limits
        ctx = threadpool_limits(limits=args.threads)
    print(f"BLAS threads: {args.threads or 'library default'}")
    with ctx:
        grid_table(args.repeats)
        X, Z, opt = instance(20, 8, 32)
        att_svm(X, Z, opt, norm="nuc")  # warm-up (imports, cvxpy)
        tn = best_time(lambda: att_svm(X, Z, opt, norm="nuc"), max(1, args.repeats - 1))
        print(f"nuclear n=20 T=8 d=32: {tn:.3f} s (target <= 10 s)")
        X, Z, opt = instance(100, 16, 64)
        tf = best_time(lambda: att_svm(X, Z, opt), args.repeats)
        print(f"frobenius n=100 T=16 d=64: {tf:.3f} s (target <= 2 s)")
    print(f"fro_n100_T16_d64_seconds={tf:.4f}")


if __name__ == "__main__":
    main()
