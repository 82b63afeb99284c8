"""Chapter 3's regularization-path solver (:func:`attnsvm.path._spg`), today's against the
reference (the solver as it was before issue 36), side by side in one process.

Problem: Chapter 3's study (:func:`attnsvm.experiments.regpath.regpath_study`): ``trials``
instances of (n=6, T=8, d), the feasible ones kept, their Att-SVMs (Frobenius and nuclear),
``inits`` random starts plus the SVM direction at each of ``n_R`` radii in [1, R_max]; the
Frobenius and the nuclear path, each solved to the tolerance 1e-10 or ``max_steps`` iterations.
``--quick`` is the notebook's ``quick`` profile; ``--paper-reduced`` its ``paper`` profile with
``trials`` divided by ``--reduce`` (10 by default).

* The reference (:func:`reference_spg`) is a verbatim copy of the solver of commit 74e9e46:
  each run's instance data copied into the batch (``X[bidx]``: ``K * I`` copies of every
  instance), the scores as ``(X * Wz).sum(-1)``, Armijo's halvings on the whole batch with one
  ``bool(ok.all())`` per halving, the objective evaluated again with the gradient at the step
  found, and two projections per iteration (the residual's and the direction's: for the nuclear
  ball two batched SVDs).
* The new solver is the library's: the instances' data indexed by run (the runs grouped by
  instance, two batched products per evaluation), the step 1 evaluated with the gradient, the
  other runs' halvings 8 at a time in one batched pass, the residual only near convergence.

Measured per solver and path: process CPU time of the whole solve (one torch thread);
iterations; *host syncs per iteration* (the operations whose result the host must read: a
tensor's value (``bool``, ``int``, ``.item()``), ``nonzero``, a boolean-mask index, ``unique``);
*bytes allocated per iteration* (the sum of the sizes of the tensors the operations return) and
the *largest tensor* allocated. The last three come from a separate run of the first
``--count-steps`` iterations under a counting dispatch mode (the counting slows the run, so it
is not timed). The two solvers' results are compared: the fraction of runs whose final
``log E`` agree to 1e-6 (relative; a random start of a non-convex problem may end at another
stationary point when the rounding changes, or stop unconverged at ``max_steps``) and the
largest relative difference of the kept value per (radius, instance).

Projection to the full ``paper`` size: the solver's work per iteration is proportional to the
number of active runs, so ``trials / reduce`` instances take about ``1 / reduce`` of the time;
the fixed costs per iteration (the Python loop, small reductions) do not shrink with the batch,
so ``reduce`` times the reduced time is an upper bound. The last line printed is
``speedup=<total ref/new> projected_paper_min=<new total * reduce / 60>``.

Usage: ``python benchmarks/path_speed.py [--quick | --paper-reduced [--reduce 10]]
[--max-steps N] [--count-steps 30] [--only new|ref] [--norm fro|nuc]``
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnsvm import path
from attnsvm.data import AttnData, keyed_instances
from attnsvm.svm import att_svm_batch
from attnsvm.tokens import optimal_tokens


# ----------------------------------------------------------------------------- the reference
# A verbatim copy of the solver of commit 74e9e46 (attnsvm/path.py: _log_excess_t, _Objective,
# _batched_problem, _armijo, _spg); the projection, the BB step and the loss are the library's
# (unchanged).
def _ref_log_excess_t(W, X, Z, gam, opt, loss, consts=None):
    g1, lgap = path._consts(gam, opt) if consts is None else consts
    Wz = Z @ W.transpose(-1, -2)                                  # (M,n,d) rows W z_i
    a = (X * Wz.unsqueeze(-2)).sum(-1)                            # (M,n,T)
    return path.log_excess_loss(torch.log_softmax(a, dim=-1), lgap, g1, loss, small_gap=0.0)


class _RefObjective:
    def __init__(self, X, Z, gam, opt, loss, consts=None):
        self.X, self.Z, self.gam, self.opt, self.loss = X, Z, gam, opt, loss
        self.consts = path._consts(gam, opt) if consts is None else consts

    def take(self, idx):
        return _RefObjective(self.X[idx], self.Z[idx], self.gam[idx], self.opt[idx], self.loss,
                             tuple(c[idx] for c in self.consts))

    def __call__(self, Wc, grad=True):
        if not grad:
            with torch.no_grad():
                return _ref_log_excess_t(Wc, self.X, self.Z, self.gam, self.opt, self.loss,
                                         self.consts)
        Wc = Wc.detach().requires_grad_(True)
        f = _ref_log_excess_t(Wc, self.X, self.Z, self.gam, self.opt, self.loss, self.consts)
        (g,) = torch.autograd.grad(f.sum(), Wc)
        return f.detach(), g


def reference_problem(W0, Rs, Xt, Zt, gt, ot, loss, norm):
    K, B, I, d = W0.shape[:3] + W0.shape[-1:]
    M = K * B * I
    bidx = torch.as_tensor(np.broadcast_to(np.arange(B)[None, :, None], (K, B, I)).ravel())
    Rm = torch.as_tensor(np.broadcast_to(Rs[:, None, None], (K, B, I)).ravel(), dtype=torch.float64)
    W = path._project(torch.as_tensor(W0.reshape(M, d, d)), Rm, norm)
    return _RefObjective(Xt[bidx], Zt[bidx], gt[bidx], ot[bidx], loss), W, Rm


def _ref_armijo(objective, W, D, f, slope, done):
    lam = torch.ones_like(f)
    for _ in range(60):
        fn = objective(W + lam[:, None, None] * D, grad=False)
        ok = (fn <= f + 1e-4 * lam * slope) | (fn <= f + 1e-15 * f.abs()) | done
        if bool(ok.all()):
            break
        lam = torch.where(ok, lam, 0.5 * lam)
    ok = ok & torch.isfinite(fn)
    return torch.where(ok, lam, torch.zeros_like(lam))


def reference_spg(objective, W, Rm, norm, max_steps, tol):
    M = W.shape[0]
    f, g = objective(W)
    act = torch.arange(M, device=W.device)
    obj, Wa, fa, ga, Ra = objective, W, f, g, Rm
    alpha = torch.ones(M, dtype=torch.float64, device=W.device)
    done = torch.zeros(M, dtype=torch.bool, device=W.device)
    W, f, g = W.clone(), f.clone(), g.clone()
    steps = 0
    for steps in range(1, max_steps + 1):
        res = torch.linalg.matrix_norm(path._project(Wa - ga, Ra, norm) - Wa)
        done = done | (res < tol)
        ndone = int(done.sum())
        if ndone == done.numel():
            break
        if ndone >= 0.25 * done.numel():
            W[act], f[act], g[act] = Wa, fa, ga
            keep = ~done
            act, Wa, fa, ga, Ra, alpha = act[keep], Wa[keep], fa[keep], ga[keep], Ra[keep], alpha[keep]
            obj = obj.take(keep)
            done = done[keep]
        D = path._project(Wa - alpha[:, None, None] * ga, Ra, norm) - Wa
        D = torch.where(done[:, None, None], torch.zeros_like(D), D)
        lam = _ref_armijo(obj, Wa, D, fa, path._ip(ga, D), done)
        Wn = Wa + lam[:, None, None] * D
        fn, gn = obj(Wn)
        alpha = path._bb_step(Wn - Wa, gn - ga, lam, alpha)
        Wa, fa, ga = Wn, fn, gn
    W[act], f[act], g[act] = Wa, fa, ga
    return W, f, g, steps


# ----------------------------------------------------------------------------- counting
_SYNC = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
         "aten.unique_consecutive.default", "aten._unique2.default", "aten.unique_dim.default"}


class Counter(TorchDispatchMode):
    """Counts host syncs (see the module docstring), bytes of the tensors returned and the
    largest one."""

    def __init__(self):
        super().__init__()
        self.syncs = self.bytes = self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if name in _SYNC or (name.startswith(("aten.index.", "aten.index_put"))
                             and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                     for i in (args[1] if len(args) > 1 else ()) if i is not None)):
            self.syncs += 1
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor):
                nb = o.numel() * o.element_size()
                self.bytes += nb
                self.largest = max(self.largest, nb)
        return out


# ----------------------------------------------------------------------------- the problem
def problem(trials, d, inits, n_R, R_max, n=6, T=8, seed=0):
    """Chapter 3's instances and starts (as :func:`regpath_study` draws them): per norm, the
    solver's inputs ``(W0, Rs, tensors)``."""
    data = keyed_instances(n, T, d, [(seed, j) for j in range(trials)])
    opt = optimal_tokens(data.X, data.y, data.v)
    W_mm, feasible = att_svm_batch(data.X, data.Z, opt)
    keep = np.flatnonzero(feasible)
    data = AttnData(data.X[keep], data.y[keep], data.Z[keep], data.v[keep])
    W_mm, opt = W_mm[keep], opt[keep]
    W_nuc, _ = att_svm_batch(data.X, data.Z, opt, norm="nuc")
    Rs = np.geomspace(1.0, R_max, n_R)
    tensors = path._prep(data, "logistic", "cpu")
    B = data.trials
    return {norm: (path._starts(Rs, B, d, inits, Ws, norm, "sphere", seed), Rs, tensors)
            for norm, Ws in (("fro", W_mm), ("nuc", W_nuc))}


def solve(which, norm, W0, Rs, tensors, max_steps, tol=1e-10):
    build = reference_problem if which == "ref" else path._batched_problem
    spg = reference_spg if which == "ref" else path._spg
    args = (W0, Rs, *tensors, "logistic", norm) + (() if which == "ref" else ("cpu",))
    objective, W, Rm, *order = build(*args)
    W, f, g, steps = spg(objective, W, Rm, norm, max_steps, tol)
    if order:                                      # the new batch is ordered by instance
        W, f, g = W[order[0]], f[order[0]], g[order[0]]
    return W, f, g, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--paper-reduced", action="store_true")
    ap.add_argument("--reduce", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--count-steps", type=int, default=30)
    ap.add_argument("--only", choices=("ref", "new"), default=None)
    ap.add_argument("--norm", choices=("fro", "nuc"), default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.paper_reduced:
        size = dict(trials=100 // a.reduce, d=20, inits=5, n_R=12, R_max=600.0, max_steps=8000)
    else:
        size = dict(trials=4, d=10, inits=3, n_R=8, R_max=300.0, max_steps=2400)
        a.reduce = 1
    if a.max_steps:
        size["max_steps"] = a.max_steps
    max_steps = size.pop("max_steps")
    print(f"size {size}, max_steps {max_steps}, one torch thread")
    probs = problem(**size)
    whiches = [a.only] if a.only else ["ref", "new"]
    rows, out, total = [], {}, {w: 0.0 for w in whiches}
    if a.norm:
        probs = {a.norm: probs[a.norm]}
    for norm, (W0, Rs, tensors) in probs.items():
        M = W0.shape[0] * W0.shape[1] * W0.shape[2]
        for which in whiches:
            with Counter() as c:
                solve(which, norm, W0, Rs, tensors, a.count_steps)
            t = time.process_time()
            W, f, g, steps = solve(which, norm, W0, Rs, tensors, max_steps)
            cpu = time.process_time() - t
            total[which] += cpu
            out[norm, which] = f.numpy().reshape(W0.shape[:3])
            rows.append((norm, which, M, steps, cpu, c.syncs / a.count_steps,
                         c.bytes / a.count_steps / 2**20, c.largest / 2**20))
    print(f"{'path':5s} {'solver':6s} {'runs':>6s} {'iters':>6s} {'CPU s':>8s} "
          f"{'syncs/it':>9s} {'MiB/it':>8s} {'largest MiB':>12s}   (counts over the first "
          f"{a.count_steps} iterations)")
    for r in rows:
        print(f"{r[0]:5s} {r[1]:6s} {r[2]:6d} {r[3]:6d} {r[4]:8.1f} {r[5]:9.2f} {r[6]:8.1f} {r[7]:12.2f}")
    if len(whiches) == 2:
        for norm in probs:
            fr, fn = out[norm, "ref"], out[norm, "new"]
            rel = np.abs(fn - fr) / np.abs(fr)
            kr, kn = fr.min(-1), fn.min(-1)                 # the kept start per (radius, instance)
            print(f"{norm}: log E of the {rel.size} runs: {np.mean(rel <= 1e-6):.4f} agree to 1e-6 "
                  f"relative (largest relative difference {np.max(rel):.2e}); the kept value per "
                  f"(radius, instance): largest relative difference "
                  f"{np.max(np.abs(kn - kr) / np.abs(kr)):.2e}")
        for norm in probs:
            t = [r[4] for r in rows if r[0] == norm]
            print(f"{norm}: CPU ref / new = {t[0] / t[1]:.2f}")
        sp = total["ref"] / total["new"]
    else:
        sp = math.nan
    proj = total.get("new", math.nan) * a.reduce / 60
    print(f"speedup={sp:.2f} projected_paper_min={proj:.1f}")


if __name__ == "__main__":
    main()
