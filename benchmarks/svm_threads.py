"""BLAS threads of the dense SVM solve: the n=100, T=16, d=64 Att-SVM, idle and with the machine
busy, with and without the solver's thread bound (prints times and ratios; not a timed test).

The dense interior point (:mod:`attnsvm.svm._ipm`) bounds its BLAS threads to
``_ipm.BLAS_THREADS = 1``; ``None`` leaves OpenBLAS's default (one thread per core). "Busy" is
one extra process per core spinning in a Python loop while the solve runs (as when other jobs
share the machine). Each time is the median of ``--repeats`` solves.

Usage: ``python benchmarks/svm_threads.py [--repeats R]``. The last line is
``busy_unbounded_over_bounded=<ratio> idle_unbounded_over_bounded=<ratio>``.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

from threadpoolctl import threadpool_info

from attnsvm.data import random_unit
from attnsvm.svm import _ipm, att_svm


def _spin(stop):
    while not stop.is_set():
        pass


def median_time(D, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        att_svm(D.X, D.Z, D.opt)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    D = random_unit(100, 16, 64, cross=True, seed=0)
    att_svm(D.X, D.Z, D.opt)  # warm up (imports, first factorization)
    cores = os.cpu_count() or 1
    blas = ", ".join(f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info()
                     if i["user_api"] == "blas")
    print(f"cores: {cores}; BLAS default: {blas}; load average before: {os.getloadavg()[0]:.2f}")
    times = {}
    for busy in (False, True):
        stop, spinners = mp.Event(), []
        if busy:
            spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(cores)]
            for p in spinners:
                p.start()
            time.sleep(0.5)
        try:
            for bound in (1, None):
                _ipm.BLAS_THREADS = bound
                times[busy, bound] = median_time(D, args.repeats)
        finally:
            _ipm.BLAS_THREADS = 1
            stop.set()
            for p in spinners:
                p.join()
        for bound in (1, None):
            label = "1 BLAS thread (the solver's bound)" if bound else "BLAS default (no bound)"
            print(f"{'busy' if busy else 'idle'}: {label:36s} {times[busy, bound]:8.3f} s")
    idle = times[False, None] / times[False, 1]
    busy = times[True, None] / times[True, 1]
    print(f"busy/idle with the bound: {times[True, 1] / times[False, 1]:.2f}x; "
          f"without: {times[True, None] / times[False, None]:.2f}x")
    print(f"busy_unbounded_over_bounded={busy:.2f} idle_unbounded_over_bounded={idle:.2f}")


if __name__ == "__main__":
    main()
