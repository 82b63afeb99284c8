"""The engine's step on CUDA: the eager loop against the captured CUDA graph (issue 25.1).

Problem: the margin model of ``benchmarks/step_speed.py`` (n=6, T=8, d=10, random unit tokens,
self-attention, fixed linear head), ``W``, NGD, logistic loss, float64, ``B`` trials. Timed:
:func:`attnsvm.train.fit` for ``--steps`` steps recording only at the end (so the graph path
replays whole blocks), ``engine="eager"`` and ``engine="auto"`` (the CUDA graph), each after a
warm-up run, wall time with the device synchronized, best of ``--repeats``; per step = that
time over the steps (the fixed costs of a run, its setup and two records, are included). The
two runs' final ``W`` are compared. Bandwidth: ``step_speed.bytes_per_step`` over the time
per step, against a device-to-device copy of 1 GiB (read + write) timed in the same run.

The issue's targets: B = 100 at most 0.1 ms per step; B = 1e5 at least 25% of the copy
bandwidth. The last line is ``graph_ms_B100=<ms> speedup_B100=<x> bw_ratio_B100000=<r>``.
Without CUDA it prints one line saying so and exits 2.

Usage: ``python benchmarks/graph_speed.py [--steps 600] [--repeats 3] [--trials 100 1000 100000]``
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _copy_bandwidth(nbytes=2 ** 30, repeats=5):
    src = torch.empty(nbytes // 8, dtype=torch.float64, device="cuda").uniform_()
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, nargs="*", default=[100, 1000, 100000])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph_speed: needs CUDA (torch sees no CUDA device on this machine); nothing was run")
        return 2
    from attnsvm.data import random_unit
    from attnsvm.train import fit
    from step_speed import D, N, T, bytes_per_step

    bw = _copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; copy bandwidth "
          f"(1 GiB, read + write) {bw / 1e9:.0f} GB/s; W NGD n={N} T={T} d={D} float64, "
          f"{args.steps} steps", flush=True)
    out = {}
    for B in args.trials:
        data = random_unit(N, T, D, trials=B, seed=0)
        kw = dict(model="W", optimizer="ngd", lr=0.1, steps=args.steps,
                  record_every=[args.steps], device="cuda", progress=False)
        times, finals = {}, {}
        for engine in ("eager", "auto"):
            fit(data, engine=engine, **{**kw, "steps": 64, "record_every": [64]})   # warm-up
            best = float("inf")
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                h = fit(data, engine=engine, **kw)
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            times[engine], finals[engine] = best / args.steps, h
        g = finals["auto"]
        diff = float(np.max(np.abs(g.W - finals["eager"].W)) / np.max(np.abs(finals["eager"].W)))
        ach = bytes_per_step(B, "W") / times["auto"]
        out[B] = (times["auto"], times["eager"] / times["auto"], ach / bw)
        print(f"B={B:6d}: eager {times['eager'] * 1e3:7.3f} ms/step  {g.config['engine']} "
              f"{times['auto'] * 1e3:7.3f} ms/step  speedup {times['eager'] / times['auto']:5.2f}  "
              f"achieved {ach / 1e9:6.1f} GB/s ({ach / bw:.2f} of copy)  rel. diff W {diff:.1e}",
              flush=True)
    b100, bbig = out.get(100), out.get(max(out))
    print(f"graph_ms_B100={b100[0] * 1e3 if b100 else float('nan'):.4f} "
          f"speedup_B100={b100[1] if b100 else float('nan'):.2f} "
          f"bw_ratio_B{max(out)}={bbig[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
