"""One ``fit`` call per experiment against one call per optimizer, side by side (issue 36, item 2).

The same runs two ways, in one process, alternating: chapter 9's default optimizers (GD, NGD,
the capped Polyak step, Adam) on its equal-score instances from the same starts, as four
:func:`attnsvm.train.fit` calls (one per optimizer, what :func:`attnsvm.runs.fit_settings` did
before) and as one :func:`attnsvm.runs.fit_rules` call (a rule per trial, ``4 B`` trials). The
records are compared (largest relative difference of the final ``W``, Frobenius norm per trial)
and the process CPU time of each way is the best of ``--repeat`` blocks (load on a shared machine
slows both alike; the ratio is compared). One torch thread, float64.

The last line printed is ``one_call_speedup=...`` per shape (separate CPU time / one-call CPU
time; > 1: one call is faster). ``runs.fit_rules(calls="auto")`` takes one call on a CPU only
below :data:`attnsvm.runs.ONE_CALL_CPU_BYTES` of tiled data, from these numbers.

Usage: ``python benchmarks/one_call.py [--steps 500] [--repeat 3] [--device cuda]`` (on CUDA the
times are wall times: a GPU step is launch-bound, which one call is meant for).
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

from attnsvm import runs, svm, train
from attnsvm.data import random_inits, score_instances

SETTINGS = {"gd": dict(lr=1.0), "ngd": dict(lr=0.1), "polyak": dict(lr=1.0, eta_max=100.0),
            "adam": dict(lr=0.01)}
#: (name, n, T, d, B): a small shape and chapter 9's paper shape
SHAPES = (("small", 6, 8, 10, 100), ("ch09 paper", 20, 8, 32, 100))


def _cpu(device="cpu"):
    """Process CPU time on the CPU; wall time after a synchronization on CUDA."""
    if device != "cpu":
        torch.cuda.synchronize()
        return time.perf_counter()
    t = os.times()
    return t.user + t.system


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (CUDA: wall time, synchronized)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at start; torch {torch.__version__}, 1 thread, float64; "
          f"{args.steps} steps, best of {args.repeat}")
    print(f"{'shape':12s} {'n,T,d':>9s} {'B':>4s} {'calls':>5s} {'separate s':>10s} "
          f"{'one call s':>10s} {'speedup':>7s} {'max rel diff':>12s}")
    ratios = []
    for name, n, T, d, B in SHAPES:
        data, opt = score_instances(n, T, d, trials=B, seed=0)
        W_mm = svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
        W0 = random_inits(d, B, radius=1.0, seed=0)
        common = dict(model="W", steps=args.steps, init=W0, refs={"W_mm": W_mm}, snapshots=True,
                      n_records=120, device=args.device, num_threads=1)
        best = {"separate": np.inf, "one": np.inf}
        for _ in range(args.repeat):
            t0 = _cpu(args.device)
            sep = {k: train.fit(data, optimizer=k, **common, **kw) for k, kw in SETTINGS.items()}
            best["separate"] = min(best["separate"], _cpu(args.device) - t0)
            t0 = _cpu(args.device)
            one = runs.fit_rules(data, SETTINGS, calls="one", **common)
            best["one"] = min(best["one"], _cpu(args.device) - t0)
        diff = max(float(np.max(np.linalg.norm(one[k].W - sep[k].W, axis=(-2, -1))
                                / np.linalg.norm(sep[k].W, axis=(-2, -1)))) for k in SETTINGS)
        r = best["separate"] / best["one"]
        ratios.append(f"{name.replace(' ', '_')}={r:.2f}x")
        print(f"{name:12s} {f'{n},{T},{d}':>9s} {B:4d} {len(SETTINGS):2d}->1 {best['separate']:10.2f} "
              f"{best['one']:10.2f} {r:7.2f} {diff:12.1e}")
    print("one_call_speedup: " + " ".join(ratios))


if __name__ == "__main__":
    main()
