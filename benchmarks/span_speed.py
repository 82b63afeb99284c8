"""The engine's step in the matrix and in the span coordinates, side by side, over shapes.

``fit(coordinates="span")`` holds ``W = W0 + B^T Zh`` (:class:`attnsvm.models.parameterizations.
WSpanScores`): the step's two ``d x d`` products (``Z W^T``, ``Xbar^T Z``, ``n d^2`` each per
trial) become two ``n x n`` ones (``n^2 d``). Which shapes gain is an empirical question on a
given CPU (small batched products have per-item costs of their own), and ``coordinates="auto"``
takes the span where this benchmark shows a gain: ``d >= SPAN_MIN_D`` and
``n <= SPAN_MAX_RATIO d`` (:data:`attnsvm.train.SPAN_MIN_D`, :data:`attnsvm.train.SPAN_MAX_RATIO`).

For each ``(n, T, d)`` and rule (NGD, GD), ``B`` trials, one CPU thread, float64, random unit
tokens, ``W`` entries ~N(0, 25/d): process CPU time per step of the engine's step
(:class:`attnsvm.train._Step`) in both coordinates, best of ``--repeats`` interleaved blocks of
``--steps`` steps, the ratio matrix/span, and the relative difference of ``W`` after 20 steps.

Usage: ``python benchmarks/span_speed.py [--trials 100] [--steps 50] [--repeats 5]``. The last
line names the ratios, the smallest among the shapes that ``"auto"`` takes into the span and the
largest among those it leaves in the matrix.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(6, 8, 10), (6, 8, 12), (9, 8, 12), (10, 8, 16), (12, 8, 16), (6, 8, 32), (10, 8, 32), (20, 8, 32),
          (30, 8, 32), (20, 8, 64)]


def row(shape, rule, B, steps, repeats):
    from op_count import engine_step
    from step_speed import _start, _time_pair

    from attnsvm.data import random_unit
    from attnsvm.models.parameterizations import span_coordinates
    n, t, d = shape
    data = random_unit(n, t, d, trials=B, seed=0)
    m_step, full, p0 = engine_step(data, "W", rule, coordinates="matrix")
    s_step, _, s0 = engine_step(data, "W", rule, coordinates="span")
    pm = _start(p0, "W", 5.0)
    ps = dict(s0, **span_coordinates(pm["W"], full["Z"]))
    a, b = dict(pm), dict(ps)
    for k in range(20):
        m_step(a, k)
        s_step(b, k)
    W_s = s_step.net.matrix(b)
    rel = float(((W_s - a["W"]).flatten(1).abs().amax(1) / a["W"].flatten(1).abs().amax(1)).max())
    t_m, t_s = _time_pair(lambda: m_step(a, 1), lambda: s_step(b, 1), steps, repeats)
    return t_m, t_s, rel


def main(argv=None):
    from attnsvm.train import SPAN_MAX_RATIO, SPAN_MIN_D
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; torch "
          f"{torch.__version__}, 1 thread, float64, B = {args.trials}; process CPU ms per step, "
          f"best of {args.repeats} interleaved blocks of {args.steps}")
    print(f"{'n,T,d':10s} {'rule':5s} {'matrix ms':>10s} {'span ms':>8s} {'ratio':>6s} {'rel. diff':>9s}")
    ratios, taken, left = [], [], []
    for shape in SHAPES:
        n, _, d = shape
        for rule in ("ngd", "gd"):
            t_m, t_s, rel = row(shape, rule, args.trials, args.steps, args.repeats)
            r = t_m / t_s
            print(f"{','.join(map(str, shape)):10s} {rule:5s} {t_m * 1e3:10.3f} {t_s * 1e3:8.3f} "
                  f"{r:6.2f} {rel:9.1e}")
            ratios.append(f"{'x'.join(map(str, shape))}_{rule}={r:.2f}x")
            (taken if d >= SPAN_MIN_D and n <= SPAN_MAX_RATIO * d else left).append(r)
    print("ratios (matrix/span CPU time): " + " ".join(ratios)
          + f"; auto (d >= {SPAN_MIN_D}, n <= {SPAN_MAX_RATIO} d) takes the span where the smallest "
          f"ratio is {min(taken):.2f}x and leaves the matrix where the largest is {max(left):.2f}x")


if __name__ == "__main__":
    main()
