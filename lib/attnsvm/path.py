r"""The regularization path of attention: :math:`W_R = \arg\min_{\|W\| \le R} \mathcal{L}(W)`
(the solver; Chapter 3's study is :mod:`attnsvm.experiments.regpath`).

What is computed
----------------
For the attention classifier with a fixed head, :math:`y_i f(X_i) = \sum_t s_{it}\gamma_{it}
= \gamma_i^\star - h_i(W)` with :math:`\gamma_i^\star = \gamma_{i,\mathrm{opt}_i}` and
:math:`h_i(W) = \sum_{t \ne \mathrm{opt}_i} s_{it}(W)\,(\gamma_i^\star - \gamma_{it}) \ge 0`.
So :math:`\mathcal{L}(W) = \mathcal{L}_\infty + E(W)` with the constant
:math:`\mathcal{L}_\infty = \frac1n\sum_i \ell(\gamma_i^\star)` and the *excess loss*

.. math::

    E(W) = \frac1n \sum_i \big[\ell(\gamma_i^\star - h_i(W)) - \ell(\gamma_i^\star)\big] \ge 0 .

Along the path :math:`E(W_R)` is of order :math:`e^{-R/\|W_{mm}\|}`: far below the rounding
error of :math:`\mathcal{L}` itself. This module therefore minimizes :math:`\log E(W)` (same
minimizers), computed in log space (``log_softmax``, ``logsumexp``, ``log1p``/``expm1``), so
that the objective and its gradient keep full relative precision at every radius.

The minimization over the ball :math:`\{\|W\| \le R\}` (Frobenius, or nuclear for the
:math:`(K, Q)` budget) is non-convex. :func:`reg_path` runs, for every radius, every instance
and several initializations at once (one batched torch program), a monotone spectral projected
gradient method (Barzilai-Borwein steps, projection onto the ball, Armijo backtracking along the
projected direction), and keeps for each (radius, instance) the initialization with the smallest
objective. The result is a *numerical approximation of a global minimizer*: a local method
from finitely many starts cannot certify global optimality. Two checks are recorded: the
projected-gradient residual of every run (stationarity), and, when the SVM direction
:math:`R\,W_{mm}/\|W_{mm}\|` is one of the starts, that the kept point has
:math:`\mathcal{L}(W) \le \mathcal{L}(R\,W_{mm}/\|W_{mm}\|)` -- the only property of
:math:`W_R` the book's convergence theorem uses. :func:`path_constants` gives the constants of the theorem
(:math:`C`, :math:`R_0`) for an instance; :func:`log_excess` and :func:`project_ball` expose the
objective and the projection.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import as_float_array, check_choice, check_int, check_positive
from .data import AttnData, keyed_stream
from .devices import cpu_threads, resolve_device
from .losses import LOSSES, get_loss, log_excess_loss
from .norms import matrix_norm
from .tokens import optimal_tokens, token_scores

__all__ = ["RegPath", "reg_path", "log_excess", "project_ball", "path_constants"]


_LOSSES = tuple(LOSSES)


# ----------------------------------------------------------------------------- objective

def _consts(gam, opt):
    """Per-instance constants of the objective: gamma_i^star (M,n) and log gaps (M,n,T)
    (-inf at the optimal token)."""
    gstar = gam.gather(-1, opt.unsqueeze(-1))                     # (M,n,1)
    gap = gstar - gam                                             # >= 0, 0 at opt
    onehot = torch.zeros_like(gam, dtype=torch.bool).scatter_(-1, opt.unsqueeze(-1), True)
    lgap = torch.where(onehot, torch.full_like(gap, -math.inf), torch.log(gap.clamp_min(1e-300)))
    return gstar.squeeze(-1), lgap


def _scores(W, X, Z):
    r"""The scores :math:`a_{bjit} = x_{bit}^\top W_{bj} z_{bi}` of ``J`` matrices per instance:
    W (B,J,d,d), X (B,n,T,d), Z (B,n,d) -> (B,J,n,T). Two batched products over the instances,
    :math:`W_{bj} z_{bi}` for all ``j`` at once and then :math:`X_{bi}` against those ``J``
    vectors, so each instance's tokens are read once for all its matrices (never copied per
    matrix)."""
    B, J, d = W.shape[0], W.shape[1], W.shape[-1]
    n = Z.shape[-2]
    Wz = (W.reshape(B, J * d, d) @ Z.transpose(-1, -2)).reshape(B, J, d, n)   # (W_bj z_bi)_p
    a = Wz.permute(0, 3, 1, 2) @ X.transpose(-1, -2)                           # (B,n,J,T)
    return a.transpose(1, 2)


def _log_excess_t(W, X, Z, gam, opt, loss, consts=None):
    """log E of ``J`` matrices per instance: W (B,J,d,d), X (B,n,T,d), Z (B,n,d), gam (B,n,T),
    opt (B,n) -> (B,J)."""
    g1, lgap = _consts(gam, opt) if consts is None else consts
    a = _scores(W, X, Z)
    # small_gap=0: the direct formula, as the chapter's path was computed (its nuclear-path numbers
    # move in the 4th digit when the objective changes at the 1e-16 level: notes/core_glue_changes.md)
    return log_excess_loss(torch.log_softmax(a, dim=-1), lgap.unsqueeze(1), g1.unsqueeze(1), loss,
                           small_gap=0.0)


def _prep(data, loss, device=None):
    check_choice("loss", loss, _LOSSES)
    X, y, Z, v = data.X, data.y, data.Z, data.v
    gam = token_scores(X, y, v)
    opt = optimal_tokens(X, y, v)
    kw = dict(dtype=torch.float64, device=device or "cpu")
    return (torch.as_tensor(X, **kw), torch.as_tensor(Z, **kw), torch.as_tensor(gam, **kw),
            torch.as_tensor(opt, dtype=torch.int64, device=kw["device"]))


def log_excess(W, data, *, loss="logistic"):
    r""":math:`\log E(W)`, the log of the excess loss :math:`\mathcal{L}(W) - \mathcal{L}_\infty`.

    Parameters
    ----------
    W : array_like (d, d) or (B, d, d)
    data : AttnData, unbatched (then ``W`` may still carry a batch of matrices) or batched
        with the same ``B`` as ``W``
    loss : {"logistic", "exponential", "correlation"}

    Returns
    -------
    float or ndarray (B,)
    """
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    single = W.ndim == 2
    Wb = W[None] if single else W
    Xt, Zt, gt, ot = _prep(data, loss)
    Wt = torch.as_tensor(Wb)
    if data.batched:                                  # one matrix per instance
        out = _log_excess_t(Wt.unsqueeze(1), Xt, Zt, gt, ot, loss)[:, 0]
    else:                                             # all the matrices on the one instance
        out = _log_excess_t(Wt.unsqueeze(0), *(u.unsqueeze(0) for u in (Xt, Zt, gt, ot)), loss)[0]
    out = out.numpy()
    return float(out[0]) if single else out


# ----------------------------------------------------------------------------- projections

def _l1_ball_nonneg(s, R):
    """Project nonnegative vectors s (M,k) onto {s >= 0, sum s <= R} (R (M,))."""
    inside = s.sum(-1) <= R
    u, _ = torch.sort(s, dim=-1, descending=True)
    css = torch.cumsum(u, dim=-1) - R.unsqueeze(-1)
    ind = torch.arange(1, s.shape[-1] + 1, dtype=s.dtype, device=s.device)
    cond = (u - css / ind) > 0
    rho = (cond * torch.arange(s.shape[-1], device=s.device)).amax(-1)     # last True index
    theta = css.gather(-1, rho.unsqueeze(-1)) / (rho.unsqueeze(-1) + 1).to(s.dtype)
    out = (s - theta).clamp_min(0)
    return torch.where(inside.unsqueeze(-1), s, out)


def _project(W, R, norm):
    if norm == "fro":
        nrm = torch.linalg.matrix_norm(W)
        scale = torch.where(nrm > R, R / nrm.clamp_min(1e-300), torch.ones_like(nrm))
        return W * scale[:, None, None]
    U, s, Vh = torch.linalg.svd(W, full_matrices=False)
    s = _l1_ball_nonneg(s, R)
    return (U * s.unsqueeze(-2)) @ Vh


def project_ball(W, R, *, norm="fro"):
    """Euclidean (Frobenius) projection of ``W`` (d,d) or (B,d,d) onto the ball
    ``{||W|| <= R}`` of the Frobenius (``"fro"``) or nuclear (``"nuc"``) norm."""
    check_choice("norm", norm, ("fro", "nuc"))
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    single = W.ndim == 2
    Wt = torch.as_tensor(W[None] if single else W)
    Rt = torch.full((Wt.shape[0],), float(R), dtype=torch.float64)
    out = _project(Wt, Rt, norm).numpy()
    return out[0] if single else out


# ----------------------------------------------------------------------------- solver

@dataclass
class RegPath:
    """Result of :func:`reg_path` (``K`` radii, ``B`` instances, ``I`` initializations).

    Attributes
    ----------
    R : (K,) radii
    W : (K, B, d, d) the kept (best) solution per radius and instance
    log_excess : (K, B) its :math:`\\log E`
    norm : (K, B) its norm (Frobenius or nuclear, as solved)
    corr : (K, B) correlation with ``W_svm`` (NaN if not given)
    residual : (K, B) projected-gradient residual of the kept run
    log_excess_all, corr_all, residual_all : (K, B, I) per initialization: final objective,
        correlation with ``W_svm``, projected-gradient residual
        :math:`\\|P(W - \\nabla \\log E) - W\\|_F`
    best_init : (K, B) index of the kept initialization (the SVM start is the last one)
    log_excess_svm : (K, B) :math:`\\log E(R\\,W_{svm}/\\|W_{svm}\\|)` (NaN if not given)
    steps : int, iterations run
    config : dict
    """
    R: np.ndarray
    W: np.ndarray
    log_excess: np.ndarray
    norm: np.ndarray
    corr: np.ndarray
    residual: np.ndarray
    log_excess_all: np.ndarray
    corr_all: np.ndarray
    residual_all: np.ndarray
    best_init: np.ndarray
    log_excess_svm: np.ndarray
    steps: int
    config: dict


def _corr_t(A, B):
    num = (A * B).sum((-1, -2))
    return num / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B)).clamp_min(1e-300)


def _reg_path(data, R, *, norm="fro", loss="logistic", inits=4, W_svm=None, svm_init=True,
              init_scale="sphere", max_steps=4000, tol=1e-10, seed=0, device="auto"):
    r"""Approximate :math:`W_R = \arg\min_{\|W\| \le R}\mathcal{L}(W)` for several radii.

    Parameters
    ----------
    data : AttnData, batched (B instances) or not (B = 1)
    R : array_like (K,) of radii > 0
    norm : {"fro", "nuc"}
        The ball: Frobenius (the W parameterization) or nuclear (the :math:`(K, Q)` budget
        :math:`\|K\|_F^2 + \|Q\|_F^2 \le 2R`, see the chapter).
    loss : {"logistic", "exponential", "correlation"}
    inits : int
        Random initializations per (radius, instance): i.i.d. Gaussian matrices scaled onto the
        sphere of radius R (``init_scale="sphere"``) or to norm ``init_scale * R``.
    W_svm : array_like (B, d, d) or (d, d), optional
        The SVM solution of each instance (:math:`W_{mm}` for ``"fro"``, :math:`W^*_{mm}` for
        ``"nuc"``): correlations are reported against it, and, if ``svm_init``, the point
        :math:`R\,W_{svm}/\|W_{svm}\|` is one more initialization (the last).
    max_steps : int
        Iterations of the projected-gradient method (all runs in one batch).
    tol : float
        A run stops moving once its projected-gradient residual is below ``tol``.
    seed : int
        Random start ``i`` of instance ``b`` at radius index ``k`` uses the key
        ``(seed, b, k, i)``.
    device : "auto", "cpu", "cuda"
    threads : int or None
        CPU threads torch may use during the solve (restored afterwards). The tensors are
        tiny, so one thread is fastest, and far faster on a shared machine; None leaves
        torch's setting alone.

    Returns
    -------
    RegPath
    """
    check_choice("norm", norm, ("fro", "nuc"))
    check_choice("loss", loss, _LOSSES)
    inits = check_int("inits", inits, minimum=0)
    max_steps = check_int("max_steps", max_steps, minimum=1)
    tol = check_positive("tol", tol)
    Rs = as_float_array("R", R, ndim=1)
    if np.any(Rs <= 0):
        raise ValueError("R must contain positive radii")
    if not data.batched:
        data = AttnData.stack([data])
    B, n, T, d = data.X.shape
    dev = resolve_device(device)
    if W_svm is not None:
        W_svm = as_float_array("W_svm", W_svm, min_ndim=2, max_ndim=3)
        W_svm = np.broadcast_to(W_svm, (B, d, d))
    use_svm = W_svm is not None and svm_init
    I = inits + (1 if use_svm else 0)
    if I == 0:
        raise ValueError("need at least one initialization (inits >= 1 or W_svm with svm_init)")
    W0 = _starts(Rs, B, d, inits, W_svm if use_svm else None, norm, init_scale, seed)
    Xt, Zt, gt, ot = _prep(data, loss, dev)
    objective, W, Rm, order = _batched_problem(W0, Rs, Xt, Zt, gt, ot, loss, norm, dev)
    W, f, g, steps = _spg(objective, W, Rm, norm, max_steps, tol)
    W, f, g, Rm = W[order], f[order], g[order], Rm[order]          # (K, B, I) order
    res = _residual(W, g, Rm, norm)
    return _collect(Rs, W, f, res, steps, W_svm, (Xt, Zt, gt, ot), dev,
                    config=dict(norm=norm, loss=loss, inits=inits, svm_init=use_svm,
                                max_steps=max_steps, tol=tol, seed=seed, device=str(dev)))


def _starts(Rs, B, d, inits, W_svm, norm, init_scale, seed):
    r"""Initial points (K, B, I, d, d): ``inits`` random matrices per (radius, instance), start
    ``i`` of instance ``b`` at radius index ``k`` from the key ``(seed, b, k, i)``, scaled to
    the sphere of radius R (or to ``init_scale * R``), then :math:`R\,W_{svm}/\|W_{svm}\|`
    when ``W_svm`` is given."""
    K = len(Rs)
    I = inits + (0 if W_svm is None else 1)
    W0 = np.empty((K, B, I, d, d))
    for k, Rk in enumerate(Rs):
        for b in range(B):
            for i in range(inits):
                G = keyed_stream("regpath-start", seed, b, k, i).standard_normal((d, d))
                nrm = matrix_norm(G, norm)
                s = 1.0 if init_scale == "sphere" else float(init_scale)
                W0[k, b, i] = G / nrm * Rk * s
            if W_svm is not None:
                W0[k, b, I - 1] = W_svm[b] / matrix_norm(W_svm[b], norm) * Rk
    return W0


class _Objective:
    r""":math:`\log E` of ``M`` runs, run ``m`` on instance ``inst[m]`` (the tensors of
    :func:`_log_excess_t`, one row per *instance*: each instance's data is held once, however many
    runs use it). ``take(idx)`` is the same objective restricted to the runs ``idx`` (a boolean
    mask or indices, repeats allowed: :func:`_spg`'s active set, :func:`_armijo_batched`'s
    candidate steps).

    An evaluation groups the runs by instance into a (B', J') grid, ``B'`` the instances that
    have runs and ``J'`` the most runs of one instance (a shorter row is padded with copies of
    its first run, whose values are discarded), and calls :func:`_log_excess_t` once on it."""

    def __init__(self, X, Z, gam, opt, loss, inst, consts=None):
        self.X, self.Z, self.gam, self.opt, self.loss = X, Z, gam, opt, loss
        self.consts = _consts(gam, opt) if consts is None else consts
        self.inst = inst
        M = inst.numel()
        order = torch.argsort(inst, stable=True)
        rows, row, counts = torch.unique_consecutive(inst[order], return_inverse=True,
                                                     return_counts=True)
        J = int(counts.max()) if M else 0
        start = torch.cumsum(counts, 0) - counts
        pos = row * J + torch.arange(M, device=inst.device) - start[row]   # slot of order[p]
        self.slot = torch.empty_like(order)                                  # slot of each run
        self.slot[order] = pos
        self.grid = order[start].unsqueeze(-1).repeat(1, J)                  # padding: first run
        self.grid.view(-1)[pos] = order                                      # run of each slot
        self.rows = rows
        self.data = (X[rows], Z[rows], gam[rows], opt[rows], tuple(c[rows] for c in self.consts))
        # the batch ordered by instance with as many runs each (the solver's first batch): a view
        self.full = rows.numel() * J == M and bool((order == torch.arange(M, device=inst.device)).all())

    def take(self, idx):
        return _Objective(self.X, self.Z, self.gam, self.opt, self.loss, self.inst[idx], self.consts)

    def _eval(self, Wg):
        X, Z, gam, opt, consts = self.data
        return _log_excess_t(Wg, X, Z, gam, opt, self.loss, consts)

    def __call__(self, Wc, grad=True):
        r""":math:`\log E` (M,) and, with ``grad``, its gradient (M, d, d)."""
        d = Wc.shape[-1]
        shape = self.grid.shape + (d, d)
        Wg = Wc.reshape(shape) if self.full else Wc[self.grid]
        if not grad:
            with torch.no_grad():
                f = self._eval(Wg)
            return f.reshape(-1) if self.full else f.reshape(-1)[self.slot]
        Wg = Wg.detach().requires_grad_(True)
        f = self._eval(Wg)
        (g,) = torch.autograd.grad(f.sum(), Wg)     # each slot's value depends on its own W only
        f, g = f.detach().reshape(-1), g.reshape(-1, d, d)
        return (f, g) if self.full else (f[self.slot], g[self.slot])


def _batched_problem(W0, Rs, Xt, Zt, gt, ot, loss, norm, dev):
    r"""The (K, B, I) runs as one batch of ``M`` problems, ordered by instance (run
    ``(b, k, i)`` at position ``(b K + k) I + i``, so that the objective's grid is the batch
    itself): the objective :math:`\log E` of each run's instance (an :class:`_Objective`, the
    instances' data indexed, not copied per run), the projected starts, the radii (M,), and
    ``order`` (M,), the position of run ``(k, b, i)`` in the batch (``x[order]`` is in (K, B, I)
    order)."""
    K, B, I, d = W0.shape[:3] + W0.shape[-1:]
    M = K * B * I
    inst = torch.arange(B, device=dev).repeat_interleave(K * I)
    Rm = torch.as_tensor(np.broadcast_to(Rs[None, :, None], (B, K, I)).ravel(),
                         dtype=torch.float64, device=dev)
    W = _project(torch.as_tensor(W0.transpose(1, 0, 2, 3, 4).reshape(M, d, d), device=dev), Rm, norm)
    order = torch.as_tensor(np.arange(M).reshape(B, K, I).transpose(1, 0, 2).ravel(), device=dev)
    return _Objective(Xt, Zt, gt, ot, loss, inst), W, Rm, order


def _ip(A_, B_):
    return (A_ * B_).sum((-1, -2))


#: Armijo: the largest step tried is 1, then halvings, at most this many
ARMIJO_HALVINGS = 60
#: :func:`_armijo_batched` tries this many halvings of a run's step in one batched evaluation
ARMIJO_CHUNK = 8


def _accept(fn, f, lam, slope):
    """Armijo's sufficient decrease at step ``lam`` (or no increase beyond rounding)."""
    return (fn <= f + 1e-4 * lam * slope) | (fn <= f + 1e-15 * f.abs())


def _armijo(objective, W, D, f, slope, done):
    """Backtracking along the projected direction ``D`` (halving, at most ``ARMIJO_HALVINGS``
    times), the whole batch at every halving: the step ``lam`` (M,) of each run, 0 where no
    finite sufficient decrease was found. The reference of :func:`_armijo_batched`, and the
    search for an objective without ``take`` (one host sync per halving)."""
    lam = torch.ones_like(f)
    for _ in range(ARMIJO_HALVINGS):
        fn = objective(W + lam[:, None, None] * D, grad=False)
        ok = _accept(fn, f, lam, slope) | done
        if bool(ok.all()):
            break
        lam = torch.where(ok, lam, 0.5 * lam)
    ok = ok & torch.isfinite(fn)
    return torch.where(ok, lam, torch.zeros_like(lam))


def _armijo_batched(objective, W, D, f, g, slope, done, chunk=None):
    r"""The step of :func:`_armijo` (the first of :math:`1, 2^{-1}, \dots, 2^{-59}` with
    sufficient decrease; 0 where none, or where the objective there is not finite) for an
    objective with ``take``, and the objective and gradient at the new point: ``(lam, Wn, fn,
    gn)``.

    The step 1 is evaluated with the gradient for every run: where it is accepted (most runs)
    that is already the next iterate's value and gradient. Only the other runs go on, with
    ``chunk`` (default ``ARMIJO_CHUNK``) candidate steps :math:`2^{-c}` at a time in one batched
    evaluation of those runs alone, the first acceptable one kept per run; they are then
    evaluated with the gradient at their step. The host learns the outcome once per batched
    pass (usually none, or one), not once per halving, and a run that accepts the step 1 is
    never evaluated again."""
    chunk = ARMIJO_CHUNK if chunk is None else chunk
    Wn = W + D
    fn, gn = objective(Wn)
    ok1 = _accept(fn, f, 1.0, slope) | done
    lam = torch.where(ok1 & ~torch.isfinite(fn), 0.0, 1.0).to(f.dtype)
    redo = ~(ok1 & torch.isfinite(fn))
    if not bool(redo.any()):
        return lam, Wn, fn, gn
    search = torch.nonzero(~ok1).squeeze(-1)
    e0 = 1
    while search.numel() and e0 < ARMIJO_HALVINGS:
        c = torch.arange(e0, min(e0 + chunk, ARMIJO_HALVINGS), device=W.device)
        lams = torch.full(c.shape, 2.0, dtype=f.dtype, device=W.device) ** -c
        C, m = c.numel(), search.numel()
        Wc = W[search].unsqueeze(1) + lams[None, :, None, None] * D[search].unsqueeze(1)
        fc = objective.take(search.repeat_interleave(C))(Wc.reshape(m * C, *W.shape[1:]),
                                                          grad=False).reshape(m, C)
        okc = _accept(fc, f[search, None], lams, slope[search, None])
        first = okc.to(torch.int8).argmax(-1)                     # the first acceptable step
        found = okc.any(-1)
        f_at = fc.gather(-1, first[:, None]).squeeze(-1)
        lam[search] = torch.where(found & torch.isfinite(f_at), lams[first], 0.0)
        search = search[~found]
        e0 += C
    lam[search] = 0.0                                             # no acceptable step
    # a run that stays (lam = 0) keeps its value and gradient; one that moved less is evaluated
    r = torch.nonzero(redo).squeeze(-1)
    Wn[r] = W[r] + lam[r, None, None] * D[r]
    fn[r], gn[r] = f[r], g[r]
    r = r[lam[r] > 0]
    if r.numel():
        fn[r], gn[r] = objective.take(r)(Wn[r])
    return lam, Wn, fn, gn


def _bb_step(s, yv, lam, alpha):
    r"""The next Barzilai-Borwein step :math:`\langle s,s\rangle/\langle s,y\rangle` (clamped to
    [1e-6, 1e6]; 1e3 without curvature; 1e-3 for runs that could not move)."""
    sy, ss = _ip(s, yv), _ip(s, s)
    alpha = torch.where(sy > 0, (ss / sy.clamp_min(1e-300)).clamp(1e-6, 1e6),
                        torch.full_like(alpha, 1e3))
    return torch.where(lam > 0, alpha, 1e-3 * torch.ones_like(alpha))


#: :func:`_spg` drops the converged runs from its batch once they are at least this fraction of it
COMPACT_FRACTION = 0.05


def _residual(W, g, R, norm):
    r"""The projected-gradient residual :math:`\|P(W - \nabla) - W\|_F` per run."""
    return torch.linalg.matrix_norm(_project(W - g, R, norm) - W)


def _converged(W, g, D, alpha, R, norm, tol):
    r"""Which runs have the residual :func:`_residual` below ``tol``, given their direction
    :math:`D = P(W - \alpha\nabla) - W` (for the nuclear ball each residual is an SVD).

    For a point :math:`W` of a closed convex set and any :math:`\nabla`, the function
    :math:`\phi(a) = \|P(W - a\nabla) - W\|` is nondecreasing and :math:`\phi(a)/a`
    nonincreasing (Gafni and Bertsekas 1984; Calamai and Moré 1987, Lemma 2.2), so the residual
    :math:`\phi(1) \ge \min(1, 1/\alpha)\,\|D\|`. Where that lower bound is at least
    ``2 * tol`` (plus 100 ulp of :math:`\|W\| + \|\nabla\|` for rounding) the run is not
    converged, as the residual itself would say; only the other runs (those near convergence)
    have their residual computed (the same decisions as ``_residual(W, g, R, norm) < tol``:
    tests/test_ch03_regpath.py)."""
    nD = torch.linalg.matrix_norm(D)
    eps = torch.finfo(W.dtype).eps
    slack = 100 * eps * (torch.linalg.matrix_norm(W) + torch.linalg.matrix_norm(g))
    near = torch.nonzero(nD * (1 / alpha).clamp(max=1.0) < 2 * tol + slack).squeeze(-1)
    out = torch.zeros(W.shape[0], dtype=torch.bool, device=W.device)
    if near.numel():
        out[near] = _residual(W[near], g[near], R[near], norm) < tol
    return out


def _spg(objective, W, Rm, norm, max_steps, tol):
    """Monotone spectral projected gradient on the balls of radii ``Rm`` for all ``M`` runs at
    once; a run stops moving once its projected-gradient residual is below ``tol``. Returns
    ``(W, f, g, steps)``.

    The runs are independent, so a converged run leaves the batch (its ``W``, ``f``, ``g`` kept
    as they were when it converged; it would not move again): once at least
    ``COMPACT_FRACTION`` of the batch has converged, the batch is cut to the active runs and
    their objective restricted to them (``take``). The iterations of the remaining runs are
    unchanged (each run's arithmetic is its own; only a batched kernel's rounding may depend on
    the batch size, as everywhere in the library), and a step on the few slow runs (the nuclear
    path's largest radii) costs a fraction of a step on the whole batch, so a large
    ``max_steps`` is cheap. ``objective`` is an :class:`_Objective` or any function
    ``(W, grad=True)`` of the same contract; a function without ``take`` runs the whole batch
    to the end, with :func:`_armijo`'s search (an :class:`_Objective` gets
    :func:`_armijo_batched`'s, the same steps). Each iteration projects once (the direction;
    the residual only near convergence, :func:`_converged`)."""
    M = W.shape[0]
    f, g = objective(W)
    act = torch.arange(M, device=W.device)             # the active runs' indices into the batch
    obj, Wa, fa, ga, Ra = objective, W, f, g, Rm
    alpha = torch.ones(M, dtype=torch.float64, device=W.device)
    done = torch.zeros(M, dtype=torch.bool, device=W.device)
    W, f, g = W.clone(), f.clone(), g.clone()
    compact = hasattr(objective, "take")               # a plain function runs the whole batch
    steps = 0
    for steps in range(1, max_steps + 1):
        D = _project(Wa - alpha[:, None, None] * ga, Ra, norm) - Wa
        done = done | _converged(Wa, ga, D, alpha, Ra, norm, tol)
        ndone = int(done.sum())
        if ndone == done.numel():
            break
        if compact and ndone >= COMPACT_FRACTION * done.numel():
            W[act], f[act], g[act] = Wa, fa, ga
            keep = ~done
            act, Wa, fa, ga, Ra, alpha, D = (u[keep] for u in (act, Wa, fa, ga, Ra, alpha, D))
            obj = obj.take(keep)
            done = done[keep]
        D = torch.where(done[:, None, None], torch.zeros_like(D), D)
        slope = _ip(ga, D)
        if compact:
            lam, Wn, fn, gn = _armijo_batched(obj, Wa, D, fa, ga, slope, done)
        else:
            lam = _armijo(obj, Wa, D, fa, slope, done)
            Wn = Wa + lam[:, None, None] * D
            fn, gn = obj(Wn)
        alpha = _bb_step(Wn - Wa, gn - ga, lam, alpha)
        Wa, fa, ga = Wn, fn, gn
    W[act], f[act], g[act] = Wa, fa, ga
    return W, f, g, steps


def _collect(Rs, W, f, res, steps, W_svm, tensors, dev, config):
    """Keep, per (radius, instance), the start with the smallest objective, and compare with
    the SVM direction: the :class:`RegPath`."""
    K, B = len(Rs), tensors[0].shape[0]
    d = W.shape[-1]
    norm, loss = config["norm"], config["loss"]
    I = W.shape[0] // (K * B)
    f_all = f.reshape(K, B, I).cpu().numpy()
    res_all = res.reshape(K, B, I).cpu().numpy()
    W_all = W.reshape(K, B, I, d, d)
    best = np.argmin(f_all, axis=-1)
    kb = (np.arange(K)[:, None], np.arange(B)[None, :])
    W_best = W_all.cpu().numpy()[kb[0], kb[1], best]
    out_norm = matrix_norm(torch.as_tensor(W_best.reshape(-1, d, d)), norm).numpy().reshape(K, B)
    corr_all = np.full((K, B, I), np.nan)
    corr_best = np.full((K, B), np.nan)
    lsvm = np.full((K, B), np.nan)
    if W_svm is not None:
        Xt, Zt, gt, ot = tensors
        Ws = torch.as_tensor(np.array(W_svm), device=dev)
        corr_all = _corr_t(W_all, Ws[None, :, None]).cpu().numpy()
        corr_best = corr_all[kb[0], kb[1], best]
        nrm_s = matrix_norm(Ws, norm)
        Wsv = (Ws / nrm_s[:, None, None])[None] * torch.as_tensor(Rs, device=dev)[:, None, None, None]
        lsvm = _log_excess_t(Wsv.transpose(0, 1), Xt, Zt, gt, ot, loss).T.detach().cpu().numpy()
    return RegPath(R=Rs, W=W_best, log_excess=f_all[kb[0], kb[1], best], norm=out_norm,
                   corr=corr_best, residual=res_all[kb[0], kb[1], best],
                   log_excess_all=f_all, corr_all=corr_all, residual_all=res_all, best_init=best,
                   log_excess_svm=lsvm, steps=steps, config=config)


def reg_path(data, R, *, norm="fro", loss="logistic", inits=4, W_svm=None, svm_init=True,
             init_scale="sphere", max_steps=4000, tol=1e-10, seed=0, device="auto", threads=1):
    with cpu_threads(device, threads):
        return _reg_path(data, R, norm=norm, loss=loss, inits=inits, W_svm=W_svm,
                         svm_init=svm_init, init_scale=init_scale, max_steps=max_steps, tol=tol,
                         seed=seed, device=device)


reg_path.__doc__ = _reg_path.__doc__


# ----------------------------------------------------------------------------- theorem constants

def path_constants(data, W_mm, *, loss="logistic"):
    r"""The constants of the book's regularization-path theorem for one instance.

    With :math:`\hat\gamma = 1/\|W_{mm}\|_F`, the token-score gaps
    :math:`\delta = \min_{i, t\ne\mathrm{opt}_i}(\gamma_i^\star - \gamma_{it})` and
    :math:`\bar\Delta = \max_{i,t}(\gamma_i^\star - \gamma_{it})`, and
    :math:`k = \min_i |\ell'(\gamma_i^\star)|` (key ``kappa``), :math:`K = \max_i |\ell'(\gamma_i^\star)|`,
    the theorem holds with

    .. math::

        C = \frac{8\, n\, K\, (T-1)\,\bar\Delta}{k\, \delta}, \qquad
        R_0 = \|W_{mm}\|_F \,\log \max\Big\{ C,\ \frac{(T-1)\bar\Delta}{h_0},\
        \frac{\delta\, C}{2 h_0} \Big\}

    (strictly above that value), where :math:`h_0` is a width on which the secant slopes of
    :math:`\ell` at :math:`\gamma_i^\star` lie in :math:`[|\ell'|/2, 2|\ell'|]`:
    :math:`h_0 = \log 2` for the logistic and exponential losses, :math:`h_0 = \infty` for
    the correlation loss.

    With batched ``data`` (and ``W_mm`` of shape (B, d, d)), each entry is an array over trials.

    Returns
    -------
    dict with ``gamma_hat, delta, Delta_bar, kappa, K, h0, C, R0``
    """
    check_choice("loss", loss, _LOSSES)
    if data.batched:
        W_mm = as_float_array("W_mm", W_mm, shape=(data.trials, data.d, data.d))
        rows = [path_constants(data.trial(b), W_mm[b], loss=loss) for b in range(data.trials)]
        return {k: np.array([r[k] for r in rows]) for k in rows[0]}
    gam = token_scores(data.X, data.y, data.v)
    opt = optimal_tokens(data.X, data.y, data.v)
    n, T = gam.shape
    gs = gam[np.arange(n), opt]
    gaps = gs[:, None] - gam
    mask = np.ones_like(gaps, dtype=bool)
    mask[np.arange(n), opt] = False
    delta, Dbar = float(gaps[mask].min()), float(gaps[mask].max())
    dl = get_loss(loss).neg_deriv_np(gs)
    kappa, Kmax = float(dl.min()), float(dl.max())
    h0 = math.inf if loss == "correlation" else math.log(2.0)
    C = 8.0 * n * Kmax * (T - 1) * Dbar / (kappa * delta)
    nW = float(np.linalg.norm(W_mm))
    R0 = nW * math.log(max(C, (T - 1) * Dbar / h0, delta * C / (2 * h0)))
    return dict(gamma_hat=1.0 / nW, delta=delta, Delta_bar=Dbar, kappa=kappa, K=Kmax, h0=h0,
                C=C, R0=R0)
