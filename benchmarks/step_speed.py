"""One engine step, today's against a frozen copy of the step before the lean rewrite (issue 36).

Problem: the margin model of ``benchmarks/train_speed.py`` (n=6 sequences, T=8 tokens, d=10,
random unit tokens, self-attention, fixed linear head), logistic loss, float64, one CPU
thread, ``B`` trials at once, and the ch09 paper shape (n=20, T=8, d=32, B=100). Timed: one
full update of every trial (scores, softmax Jacobian, log-scaled gradient, step rule,
parameter update) for ``W``/NGD, ``W``/GD, ``(K,Q)``/NGD and the (L-L*) Polyak step
(``polyak_star``, capped at 1), at ``B = 100`` and ``B = 1000``, from a state with score gaps of
a few units (``W`` entries ~N(0, 25/d)), and ``W``/NGD also at saturation (entries ~N(0,
300^2/d): 89% of the non-top masses below e^-37, where the textbook Jacobian is rounding noise,
none underflowing) and past underflow (entries ~N(0, 3000^2/d): 76% of them below e^-745, the
regime of a long NGD run).

* The reference is a frozen copy of the step at attnsvm 74e9e46
  (``benchmarks/step_74e9e46.py``, verbatim; bitwise equal to that commit's engine).
* The new step is the engine's own (:class:`attnsvm.train._Step` on
  :class:`attnsvm.train._MarginTerms`, built from the options of :func:`attnsvm.train.fit`):
  the eager torch path that the CUDA-graph and compiled paths capture.
* At ch09's shape the engine's own step (``coordinates="auto"``) holds ``W`` in the span of
  the queries (:class:`attnsvm.models.parameterizations.WSpanScores`; ``d = 32 >= SPAN_MIN_D = 12``,
  ``n = 20 <= 3d/4``): the rows marked "span" time it from the same ``W`` (``W0 = W``, ``B = 0``), the
  unmarked ch09 rows the step in the matrix coordinates; the frozen step is the same
  mathematical step either way (relative difference after one step printed).
* :func:`reference_step` / :func:`reference_grad` are the older reference (the step of
  0da19a8, before the first rewrite), kept for ``tests/test_models.py``.

Both start from the same parameters and data; the benchmark checks they agree (relative
difference of the updated parameters after one step) before timing them. Ops: compute ops per
step (``benchmarks/op_count.py``, torch.profiler: each at least one GPU kernel) and host
synchronizations. Times are process CPU times per step, best of ``--repeats`` interleaved
blocks of ``--steps`` steps (robust to other load on a shared machine, which still slows
both; the ratio is what is compared).

The issue's targets: compute ops ``W``/NGD <= 25 and ``(K,Q)``/NGD <= 40; time >= 2x at
``B = 100``, >= 1.4x at ``B = 1000`` and at the ch09 shape. The last line names the ratios.

Usage: ``python benchmarks/step_speed.py [--steps 100] [--repeats 5] [--quick]``
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from attnsvm.data import random_unit
from attnsvm.losses import get_loss
from attnsvm.train import FitConfig, _MarginTerms, _Step

N, T, D = 6, 8, 10
F64 = 8


# ----------------------------------------------------------------------------- the reference
# A verbatim copy of the step before the rewrite (attnsvm 0da19a8: models/attention.py
# ``AttentionClassifier.grad``, models/parameterizations.py, optim.py ``log_norm`` and the
# "gd"/"ngd" rules), for the fixed linear head and the parameterizations "W" and "KQ".
def _ref_bilinear_scores(X, Z, W):
    Wz = Z @ W.transpose(-1, -2)                   # (B,n,d): rows W z_i
    return (X * Wz.unsqueeze(-2)).sum(-1)


def reference_grad(param, params, batch, loss):
    """The log-scaled gradient ``(u, grads, scales)`` as computed before the rewrite."""
    X, y = batch["X"], batch["y"]
    W = params["W"] if param == "W" else params["K"] @ params["Q"].transpose(-1, -2)
    a = _ref_bilinear_scores(X, batch["Z"], W)
    ls = a - torch.logsumexp(a, dim=-1, keepdim=True)       # log-softmax, (B,n,T)
    s = torch.exp(ls)
    G = batch["G"]
    f = (s * G).sum(-1)
    u = y * f
    logc = loss.log_neg_deriv(u) - math.log(u.shape[-1])   # (B,n)
    is_top = torch.zeros_like(ls, dtype=torch.bool).scatter_(
        -1, ls.argmax(-1, keepdim=True), True)                 # one top token per sequence
    lam2 = ls.masked_fill(is_top, -math.inf).amax(-1, keepdim=True)   # (B,n,1)
    sh = torch.exp(ls - lam2).masked_fill_(is_top, 0.0)     # s_tau / s_(2), top -> 0
    top_term = s * (G * sh.sum(-1, keepdim=True) - (sh * G).sum(-1, keepdim=True))
    rho = torch.where(is_top, top_term, sh * (G - f.unsqueeze(-1)))
    lam2 = lam2.squeeze(-1)
    lw = logc + lam2
    sig = lw.amax(-1)
    q = rho * (torch.exp(lw - sig.unsqueeze(-1)) * -y).unsqueeze(-1)
    xbar = (X * q.unsqueeze(-1)).sum(-2)                   # (B,n,d)
    gW = xbar.transpose(-1, -2) @ batch["Z"]                # (B,d,d)
    if param == "W":
        return u, {"W": gW}, {"W": sig}
    return (u, {"K": gW @ params["Q"], "Q": gW.transpose(-1, -2) @ params["K"]},
            {"K": sig, "Q": sig})


def _ref_log_norm(grads):
    mx = None
    for g in grads:
        a = g.abs().amax(dim=tuple(range(1, g.ndim)))
        mx = a if mx is None else torch.maximum(mx, a)
    mx = torch.where(mx > 0, mx, torch.ones_like(mx))
    sq = sum((g / mx.reshape((-1,) + (1,) * (g.ndim - 1))).pow(2).sum(dim=tuple(range(1, g.ndim)))
             for g in grads)
    return torch.log(mx) + 0.5 * torch.log(sq)


def reference_step(param, rule, lr, params, batch, loss):
    """One update as before the rewrite; returns the new parameters and the margins."""
    u, grads, sig = reference_grad(param, params, batch, loss)
    names = list(grads)
    gl = [grads[k] for k in names]
    out = dict(params)
    if rule == "ngd":
        scales = [sig[k] for k in names]
        if len(gl) == 1:
            lg = _ref_log_norm(gl) + scales[0]
        else:
            terms = [_ref_log_norm([g]) + sc for g, sc in zip(gl, scales)]
            lg = 0.5 * torch.logsumexp(2 * torch.stack(terms), dim=0)
        zero = ~torch.isfinite(lg)
        for k, g, sc in zip(names, gl, scales):
            mj = torch.where(zero, -math.inf, sc - lg)
            out[k] = params[k] + g * (-lr * torch.exp(mj)).reshape(-1, 1, 1)
    elif rule == "gd":
        for k, g in zip(names, gl):
            out[k] = params[k] + g * (-lr * torch.exp(sig[k])).reshape(-1, 1, 1)
    else:
        raise ValueError(f"the reference has the rules 'gd' and 'ngd', got {rule!r}")
    return out, u


# ----------------------------------------------------------------------------- setup and model
def engine_step(data, param, rule, lr):
    """The engine's step for these options, with its data tensors and initial parameters."""
    opts = dict(model=param, optimizer=rule, lr=lr, steps=1, device="cpu", progress=False)
    if param == "KQ":
        opts["init"] = "random"
    cfg = FitConfig.build(data, **opts)
    terms = _MarginTerms(cfg, data)
    return _Step(cfg, terms, terms.params), terms.full, terms.params


def bytes_per_step(B, param, n=N, t=T, d=D):
    """A model of the bytes the new step moves (float64); see the module docstring."""
    tokens = 2 * n * t * d
    bnt = 14 * n * t
    small = 30 * n + 10 * d * d + (8 * d * d if param == "KQ" else 0)
    return F64 * B * (tokens + bnt + small)


def copy_bandwidth(nbytes=2 ** 28, repeats=5):
    """Bytes per second of a numpy copy of ``nbytes`` (read + write), best of ``repeats``
    (256 MiB: main memory; a few MiB: the last-level cache)."""
    src = np.random.default_rng(0).random(nbytes // F64)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


def _time_pair(ref, new, steps, repeats):
    """Best process CPU time per call of ``ref`` and of ``new``, blocks of ``steps`` calls
    interleaved (ref, new, ref, new, ...) so that other load on the machine hits both alike."""
    ref()
    new()
    best = [math.inf, math.inf]
    for _ in range(repeats):
        for j, fn in enumerate((ref, new)):
            t0 = time.process_time()
            for _ in range(steps):
                fn()
            best[j] = min(best[j], (time.process_time() - t0) / steps)
    return best


#: the rows: (label, model, optimizer, extra fit options, (n, T, d), B, W scale)
CASES = [(f"{m}/{r}" if lab is None else lab, m, r, extra, shape, B, scale)
         for B in (100, 1000)
         for lab, m, r, extra, shape, scale in (
             (None, "W", "ngd", {}, (N, T, D), 5.0), (None, "W", "gd", {}, (N, T, D), 5.0),
             (None, "KQ", "ngd", {}, (N, T, D), 5.0),
             ("W/(L-L*)polyak", "W", "polyak_star", {"eta_max": 1.0}, (N, T, D), 5.0))] + [
    ("W/ngd saturated", "W", "ngd", {}, (N, T, D), 1000, 300.0),
    ("W/ngd underflow", "W", "ngd", {}, (N, T, D), 1000, 3000.0),
    ("ch09 W/ngd", "W", "ngd", {}, (20, 8, 32), 100, 5.0),
    ("ch09 W/gd", "W", "gd", {}, (20, 8, 32), 100, 5.0),
    ("ch09 W/ngd span", "W", "ngd", {"coordinates": "span"}, (20, 8, 32), 100, 5.0),
    ("ch09 W/gd span", "W", "gd", {"coordinates": "span"}, (20, 8, 32), 100, 5.0)]


def _start(params, model, scale, seed=0):
    """The timed state: the main parameters with entries ~N(0, scale^2/d) (``W``; for
    ``(K,Q)`` factors of that size), so that the score gaps are ~``scale``."""
    g = torch.Generator().manual_seed(seed)
    out = dict(params)
    for k in ("W", "K", "Q"):
        if k in out:
            d = out[k].shape[-1]
            f = scale if k == "W" else math.sqrt(scale)
            out[k] = torch.randn(out[k].shape, generator=g, dtype=out[k].dtype) * (f / math.sqrt(d))
    return out


#: the matrix products of a step (torch.profiler names): what the closed form itself issues
PRODUCTS = frozenset({"aten::bmm", "aten::mm", "aten::baddbmm", "aten::addmm", "aten::addbmm"})


def products_share(fn, calls=20):
    """The share of ``fn``'s CPU time (torch.profiler, self times) spent in matrix products
    (:data:`PRODUCTS`): times the step's own time, the time a step would take if every other op
    were free, and the frozen step's time over that, the largest speedup any step that issues
    the same products in the same form can have."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    return sum(e.self_cpu_time_total for e in ev if e.key in PRODUCTS) / total


def compare(case, steps, repeats):
    """One row: ops and seconds per step of the frozen and the new step, and their relative
    difference after one step."""
    import step_74e9e46 as frozen
    from op_count import count_ops, engine_step as build
    label, model, rule, extra, (n, t, d), B, scale = case
    data = random_unit(n, t, d, trials=B, seed=0)
    span = extra.get("coordinates") == "span"
    if model == "W":
        extra = {"coordinates": "matrix", **extra}   # the rows not marked "span": W itself
    step, full, params0 = build(data, model, rule, **extra)
    matrix_step = build(data, model, rule, coordinates="matrix")[0] if span else step
    ref0 = _start(matrix_step.terms.params, model, scale)   # the frozen step's state: W itself
    new0 = ref0
    if span:                 # the same W in the span coordinates: W0 = W, B = 0
        from attnsvm.models.parameterizations import span_coordinates
        new0 = dict(params0, **span_coordinates(ref0["W"], full["Z"]))
    cfg_lr, eta_max = step.ctx.lr, step.ctx.eta_max
    net = frozen.FrozenNet(matrix_step.net)
    loss = get_loss("logistic")
    ref_p, _ = frozen.frozen_step(net, rule, cfg_lr, ref0, full, loss, {"k": 0}, eta_max)
    new_p = dict(new0)
    step(new_p, 0)
    if span:
        new_p = {"W": step.net.matrix(new_p)}
    rel = max(float(((new_p[k] - ref_p[k]).flatten(1).abs().amax(1)
                     / ref_p[k].flatten(1).abs().amax(1)).max())
              for k in (("W",) if span else step.trainable))
    p_ref, p_new, st = dict(ref0), dict(new0), {"k": 0}

    def ref():
        nonlocal p_ref
        p_ref, _ = frozen.frozen_step(net, rule, cfg_lr, p_ref, full, loss, st, eta_max)

    def new():
        step(p_new, 1)

    ops = [count_ops(ref), count_ops(new)]
    t_ref, t_new = _time_pair(ref, new, steps, repeats)
    return dict(label=label, B=B, shape=(n, t, d), t_ref=t_ref, t_new=t_new, rel=rel,
                t_products=t_new * products_share(new),
                ops_ref=ops[0]["compute"], ops_new=ops[1]["compute"],
                sync_ref=ops[0]["syncs"], sync_new=ops[1]["syncs"])


def main():
    import os
    import platform
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only W/ngd at B=100 and 1000")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = [c for c in CASES if not args.quick or c[0] == "W/ngd"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.2f} at start (shared: other processes slow both steps "
          f"alike; the ratio is compared); torch {torch.__version__}, 1 CPU thread, float64")
    print(f"frozen = the step of attnsvm 74e9e46; new = the engine's step. Process CPU time per "
          f"step, best of {args.repeats} interleaved blocks of {args.steps} steps; ops = compute "
          f"ops per step (torch.profiler), syncs = host synchronizations per step; products ms = "
          f"the new step's time in its matrix products (profiler share), bound = frozen ms / "
          f"products ms (the speedup if every other op were free)")
    print(f"{'case':18s} {'n,T,d':9s} {'B':>5s} {'ops frozen':>10s} {'ops new':>8s} "
          f"{'syncs':>7s} {'frozen ms':>10s} {'new ms':>8s} {'speedup':>8s} {'rel. diff':>9s} "
          f"{'products ms':>11s} {'bound':>6s}")
    rows = []
    for case in cases:
        r = compare(case, args.steps, args.repeats)
        rows.append(r)
        print(f"{r['label']:18s} {','.join(map(str, r['shape'])):9s} {r['B']:5d} "
              f"{r['ops_ref']:10.0f} {r['ops_new']:8.0f} {r['sync_ref']:3.0f}->{r['sync_new']:<3.0f}"
              f" {r['t_ref'] * 1e3:10.3f} {r['t_new'] * 1e3:8.3f} {r['t_ref'] / r['t_new']:8.2f} "
              f"{r['rel']:9.1e} {r['t_products'] * 1e3:11.3f} {r['t_ref'] / r['t_products']:6.2f}")

    def get(label, B):
        return next((r for r in rows if r["label"] == label and r["B"] == B), None)
    parts = []
    for label, B, name in (("W/ngd", 100, "W_ngd_B100"), ("W/ngd", 1000, "W_ngd_B1000"),
                           ("W/gd", 100, "W_gd_B100"), ("W/gd", 1000, "W_gd_B1000"),
                           ("KQ/ngd", 100, "KQ_ngd_B100"), ("KQ/ngd", 1000, "KQ_ngd_B1000"),
                           ("W/(L-L*)polyak", 100, "polyak_star_B100"),
                           ("W/(L-L*)polyak", 1000, "polyak_star_B1000"),
                           ("W/ngd saturated", 1000, "W_ngd_saturated_B1000"),
                           ("W/ngd underflow", 1000, "W_ngd_underflow_B1000"),
                           ("ch09 W/ngd", 100, "ch09_W_ngd"), ("ch09 W/gd", 100, "ch09_W_gd"),
                           ("ch09 W/ngd span", 100, "ch09_W_ngd_span"),
                           ("ch09 W/gd span", 100, "ch09_W_gd_span")):
        r = get(label, B)
        if r is not None:
            parts.append(f"{name}={r['t_ref'] / r['t_new']:.2f}x")
    ops = [f"ops_{lab.replace('/', '_')}={get(lab, 100)['ops_ref']:.0f}->{get(lab, 100)['ops_new']:.0f}"
           for lab in ("W/ngd", "W/gd", "KQ/ngd", "W/(L-L*)polyak") if get(lab, 100)]
    print("ratios (frozen/new CPU time): " + " ".join(parts) + "; " + " ".join(ops)
          + " (targets: >=2x at B=100, >=1.4x at B=1000 and ch09; ops W/ngd <= 25, KQ/ngd <= 40)")


if __name__ == "__main__":
    main()
