r"""Joint training of the attention matrix and the head (Chapter 11).

:func:`joint_data` draws seeded instances with one planted label-carrying token per sequence
(:func:`attnsvm.data.planted_token`), :func:`joint_references` solves the attention SVM and the
max-margin head of the reference tokens, and :func:`joint_fit` trains ``W`` and ``v`` jointly
in one :func:`attnsvm.train.fit` call (snapshots of both along the way) and compares them with
the references.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_int
from ..data import planted_token
from ..svm import att_svm_batch, head_svm
from ..metrics import attention, corr
from ..train import fit

__all__ = ["joint_data", "JointRun", "joint_references", "joint_fit"]


def joint_data(n=8, T=6, d=16, *, trials=4, signal=1.0, seed=0):
    r"""Seeded instances for joint training with one planted label-carrying token:
    :func:`attnsvm.data.planted_token` batched with ``trials`` trials (trial ``b`` does not
    depend on ``trials``). The head starts at :math:`v_0 = 0` (``v`` of the data).

    Returns ``(data, planted)``: an :class:`attnsvm.data.AttnData` with a trials axis and the
    planted positions (trials, n).
    """
    trials = check_int("trials", trials, minimum=1)
    return planted_token(n, T, d, signal=signal, trials=trials, seed=seed)


@dataclass
class JointRun:
    r"""Joint training of ``W`` and ``v`` recorded at ``steps`` (K,), for B trials.

    ``loss``, ``log_loss`` (natural log, exact when ``loss`` underflows), ``norm_W``,
    ``norm_v``, ``corr_W``, ``corr_v``, ``mass`` (mean softmax mass on the reference tokens) and
    ``min_margin`` (:math:`\min_i y_i f(X_i)`) are (K, B); ``W`` (B,d,d), ``v`` (B,d) final; ``W_ref``, ``v_ref`` the
    attention SVM and the max-margin head of the reference tokens ``alpha`` (B, n).
    """
    steps: np.ndarray
    loss: np.ndarray
    log_loss: np.ndarray
    norm_W: np.ndarray
    norm_v: np.ndarray
    corr_W: np.ndarray
    corr_v: np.ndarray
    mass: np.ndarray
    min_margin: np.ndarray
    W: np.ndarray
    v: np.ndarray
    W_ref: np.ndarray
    v_ref: np.ndarray
    alpha: np.ndarray


def joint_references(data, alpha):
    """Per trial, the Frobenius attention SVM (``att_svm_batch(X, Z, alpha, strict=True)``) and the max-margin head
    ``head_svm(X, y, alpha)``; an infeasible trial raises (it is reported, never zero-filled)."""
    W = att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    v = np.stack([head_svm(data.X[b], data.y[b], alpha[b]) for b in range(data.trials)])
    return W, v


def joint_fit(data, alpha, *, optimizer="gd", lr=None, eta_max=None, steps=10000, segments=24,
              record_steps=None, refs=None, seed=0, device="auto"):
    r"""Train ``W`` and ``v`` jointly from ``W_0 = 0`` and the data's ``v`` and record both along
    the way: one :func:`attnsvm.train.fit` call (``model="W", train_v=True``,
    ``snapshots=("W", "v")``), for any step rule of :data:`attnsvm.train.OPTIMIZERS`.

    Parameters
    ----------
    data : AttnData with a trials axis; alpha : (B, n) reference tokens (e.g. the planted ones).
    segments : int
        Number of log-spaced record steps after 0 (``record_grid(steps, "log", segments + 1)``).
    record_steps : increasing ints from 0 to ``steps``, optional: explicit record steps (instead
        of ``segments`` log-spaced ones).
    refs : ``(W_ref, v_ref)``, optional (default :func:`joint_references`).
    """
    W_ref, v_ref = joint_references(data, alpha) if refs is None else refs
    if record_steps is None:
        grid = "log"
    else:
        grid = np.asarray(record_steps, dtype=int)
        if grid[0] != 0 or grid[-1] != steps or np.any(np.diff(grid) <= 0):
            raise ValueError("record_steps must increase strictly from 0 to steps")
    kw = dict(model="W", train_v=True, optimizer=optimizer, lr=lr, opt=alpha, seed=seed,
              device=device)
    if eta_max is not None:
        kw["eta_max"] = eta_max
    B, d = data.trials, data.d
    h = fit(data, steps=steps, init={"W": np.zeros((B, d, d)), "v": np.array(data.v, dtype=float)},
            record_every=grid, n_records=segments + 1, snapshots=("W", "v"), **kw)
    Ws, vs = h.trajectory["W"], h.trajectory["v"]                       # (K,B,d,d), (K,B,d)

    def min_margin(W, v):                                               # min_i y_i f(X_i), (B,)
        S = attention(data.X, W, data.Z)                                # (B,n,T)
        return (data.y * np.einsum("bnt,bnt->bn", S, np.einsum("bntd,bd->bnt", data.X, v))).min(-1)

    def per_record(fn):
        return np.stack([fn(W, v) for W, v in zip(Ws, vs)])

    return JointRun(
        h.steps, h.loss, h.log_loss,
        per_record(lambda W, v: np.linalg.norm(W, axis=(-2, -1))),
        per_record(lambda W, v: np.linalg.norm(v, axis=-1)),
        per_record(lambda W, v: corr(W, W_ref)),
        per_record(lambda W, v: corr(v, v_ref, elem_ndim=1)),
        h.opt_mass, per_record(min_margin), h.params["W"], h.params["v"], W_ref, v_ref,
        np.asarray(alpha))
