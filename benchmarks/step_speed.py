"""One engine step, today's against the reference (the step as it was before the rewrite).

Problem: the margin model of ``benchmarks/train_speed.py`` (n=6 sequences, T=8 tokens, d=10,
random unit tokens, self-attention, fixed linear head), logistic loss, float64, one CPU
thread, ``B`` trials at once. Timed: one full update of every trial (scores, softmax
Jacobian, log-scaled gradient, step rule, parameter update), for the parameterizations "W"
and "KQ" and the rules "ngd" and "gd", at ``B = 100`` and ``B = 1000``.

* The reference (:func:`reference_step`) is a verbatim copy of the step before the rewrite:
  scores as ``(X * Wz).sum(-1)``, a log-softmax and boolean masks over the whole (B,n,T)
  block, ``X^T q`` as ``(X * q).sum(-2)``, the rule of :mod:`attnsvm.optim` of that day.
* The new step is the engine's own (:class:`attnsvm.train._Step` on
  :class:`attnsvm.train._MarginTerms`, built from the options of :func:`attnsvm.train.fit`):
  the eager torch path (on the CPU it is the only one; the CUDA-graph path of :func:`fit`
  replays this same step on CUDA).

Both start from the same parameters and data; the benchmark checks they agree (relative
difference of the updated parameters) before timing them. Times are process CPU times, best
of ``--repeats`` blocks of ``--steps`` steps (robust to other load on a shared machine).

Memory model (bytes moved per step, float64), see :func:`bytes_per_step`: the step reads the
tokens twice (``X`` for the scores, ``Xt`` for :math:`X^\top q`), makes ~14 passes over the
(B,n,T) block, ~30 over (B,n) vectors and ~10 over the (B,d,d) blocks (W, the gradient, the
rule, the update).
The achieved bandwidth is that model over the measured step time; the machine's copy
bandwidth is a large ``numpy`` copy (read + write) timed in the same process.

The last line printed is ``step_speedup=<ratio> bandwidth_ratio=<achieved/copy bandwidth>``
for "W", "ngd", ``B = 1000``.

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


def compare(B, param, rule, steps, repeats, lr=0.1):
    """(reference s/step, new s/step, max relative difference after one step)."""
    data = random_unit(N, T, D, trials=B, seed=0)
    step, full, params0 = engine_step(data, param, rule, lr)
    loss = get_loss("logistic")
    ref_params, _ = reference_step(param, rule, lr, params0, full, loss)
    new_params = dict(params0)
    step(new_params, 0)
    rel = max(float(((new_params[k] - ref_params[k]).flatten(1).abs().amax(1)
                     / ref_params[k].flatten(1).abs().amax(1)).max()) for k in ref_params if k != "v")
    p_ref = dict(params0)
    p_new = dict(params0)

    def ref():
        nonlocal p_ref
        p_ref, _ = reference_step(param, rule, lr, p_ref, full, loss)

    t_ref, t_new = _time_pair(ref, lambda: step(p_new, 1), steps, repeats)
    return t_ref, t_new, rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only W/ngd at B=1000")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("new step: the eager torch path")
    bw = copy_bandwidth()
    print(f"problem: n={N} T={T} d={D}, logistic loss, fixed linear head, float64, 1 CPU thread; "
          f"process CPU time per step, best of {args.repeats} x {args.steps} steps")
    bw_cache = copy_bandwidth(2 ** 23, repeats=20)
    print(f"measured copy bandwidth (numpy, 256 MiB, read + write): {bw / 1e9:.1f} GB/s; "
          f"of an 8 MiB copy (cache-resident): {bw_cache / 1e9:.1f} GB/s. At B = 1000 the step's "
          "working set (X and Xt 7.7 MB, temporaries) fits in a large last-level cache, so the "
          "ratio to the 256 MiB copy can exceed 1")
    cases = [(1000, "W", "ngd")] if args.quick else [
        (B, p, r) for B in (100, 1000) for p in ("W", "KQ") for r in ("ngd", "gd")]
    last = None
    for B, param, rule in cases:
        t_ref, t_new, rel = compare(B, param, rule, args.steps, args.repeats)
        nb = bytes_per_step(B, param)
        ach = nb / t_new
        print(f"B={B:5d} {param:2s} {rule:3s}: reference {t_ref * 1e3:7.3f} ms  new {t_new * 1e3:7.3f} ms"
              f"  speedup {t_ref / t_new:5.2f}  bytes/step {nb / 1e6:6.2f} MB  achieved "
              f"{ach / 1e9:5.1f} GB/s ({ach / bw:.2f} of copy)  rel. diff {rel:.1e}")
        if (B, param, rule) == (1000, "W", "ngd"):
            last = (t_ref / t_new, ach / bw)
    print(f"step_speedup={last[0]:.2f} bandwidth_ratio={last[1]:.3f}")


if __name__ == "__main__":
    main()
