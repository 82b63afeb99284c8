"""The engine's step: the eager loop against the captured CUDA graph and the compiled step
(issue 25.1).

Problem: the margin model of ``benchmarks/step_speed.py`` (n=6, T=8, d=10, random unit tokens,
self-attention, fixed linear head), ``W``, NGD, logistic loss, float64, ``B`` trials. Timed:
:func:`attnsvm.train.fit` for ``--steps`` steps recording only at the end (so the block paths
run whole blocks), side by side in one run: ``engine="eager"``, ``engine="auto"`` (on CUDA the
captured graph of the eager step, ``"cuda-graph"``) and ``engine="compiled"`` (the step
compiled by ``torch.compile``, its elementwise chain fused; on CUDA captured as a graph,
``"cuda-graph-compiled"``), each after a warm-up run of 64 steps (which also compiles), wall
time with the device synchronized, best of ``--repeats``; per step = that time over the steps
(the fixed costs of a run, its setup and two records, are included). Each path's final ``W``
is compared with the eager one. Bandwidth (CUDA): ``step_speed.bytes_per_step`` over the time
per step of the faster block path, against a device-to-device copy of 1 GiB (read + write)
timed in the same run.

The issue's targets: B = 100 at most 0.1 ms per step; B = 1e5 at least 25% of the copy
bandwidth. The last line is ``graph_ms_B100=<ms> compiled_ms_B100=<ms> speedup_B100=<x>
compiled_speedup_B100=<x> bw_ratio_B<max>=<r>`` (speedups against eager).
Without CUDA it prints one line saying so and exits 2; ``--cpu`` runs the same comparison on
the CPU instead (eager against ``"compiled"``, one thread; the captured graph is CUDA's).
``--dtype float32`` runs in single precision (bandwidth then counts float64 bytes: compare
times only). Measured on the 2-core development CPU (one run, B = 1,000): compiled float64 is
3.1x slower than eager, compiled float32 1.9x faster than eager float32; inductor's CPU code
for this step is fast in float32 only.

Usage: ``python benchmarks/graph_speed.py [--steps 600] [--repeats 3] [--trials 100 1000 100000]
[--cpu] [--dtype float32]``
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


def _sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, nargs="*", default=None)
    ap.add_argument("--cpu", action="store_true", help="compare eager and compiled on the CPU")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the run's dtype (the library's default is float64)")
    args = ap.parse_args(argv)
    dev = "cpu" if args.cpu else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("graph_speed: needs CUDA (torch sees no CUDA device on this machine); nothing was "
              "run (--cpu compares eager and compiled on the CPU)")
        return 2
    trials = args.trials or ([100, 1000, 10000] if args.cpu else [100, 1000, 100000])
    from attnsvm.data import random_unit
    from attnsvm.train import fit
    from step_speed import D, N, T, bytes_per_step

    engines = ("eager", "compiled") if args.cpu else ("eager", "auto", "compiled")
    if args.cpu:
        torch.set_num_threads(1)
        bw = float("nan")
        print(f"CPU, torch {torch.__version__}, 1 thread; W NGD n={N} T={T} d={D} {args.dtype}, "
              f"{args.steps} steps", flush=True)
    else:
        bw = _copy_bandwidth()
        print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; copy bandwidth "
              f"(1 GiB, read + write) {bw / 1e9:.0f} GB/s; W NGD n={N} T={T} d={D} {args.dtype}, "
              f"{args.steps} steps", flush=True)
    out = {}
    for B in trials:
        data = random_unit(N, T, D, trials=B, seed=0)
        kw = dict(model="W", optimizer="ngd", lr=0.1, steps=args.steps,
                  record_every=[args.steps], device=dev, progress=False,
                  dtype=getattr(torch, args.dtype))
        times, finals = {}, {}
        for engine in engines:
            t0 = time.perf_counter()
            fit(data, engine=engine, **{**kw, "steps": 64, "record_every": [64]})   # warm-up
            warm = time.perf_counter() - t0
            best = float("inf")
            for _ in range(args.repeats):
                _sync(dev)
                t0 = time.perf_counter()
                h = fit(data, engine=engine, **kw)
                _sync(dev)
                best = min(best, time.perf_counter() - t0)
            times[engine], finals[engine] = best / args.steps, h
            ref = finals["eager"].W
            diff = float(np.max(np.abs(h.W - ref)) / np.max(np.abs(ref)))
            print(f"B={B:6d} {h.config['engine']:>20s}: {times[engine] * 1e3:8.3f} ms/step  "
                  f"x{times['eager'] / times[engine]:5.2f} of eager  rel. diff W {diff:.1e}  "
                  f"(warm-up run {warm:.1f} s)", flush=True)
        blocks = [e for e in engines if e != "eager"]
        fast = min(blocks, key=times.get)
        ach = bytes_per_step(B, "W") / times[fast]
        if not args.cpu:
            print(f"B={B:6d}: achieved {ach / 1e9:6.1f} GB/s ({ach / bw:.3f} of copy) by "
                  f"{finals[fast].config['engine']}", flush=True)
        out[B] = dict(times, ratio=ach / bw)
    b100, bbig = out.get(100), out[max(out)]
    nan = float("nan")

    def ms(e):
        return b100[e] * 1e3 if b100 and e in b100 else nan

    def sp(e):
        return b100["eager"] / b100[e] if b100 and e in b100 else nan

    print(f"graph_ms_B100={ms('auto'):.4f} compiled_ms_B100={ms('compiled'):.4f} "
          f"speedup_B100={sp('auto'):.2f} compiled_speedup_B100={sp('compiled'):.2f} "
          f"bw_ratio_B{max(out)}={bbig['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
