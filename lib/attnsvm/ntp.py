r"""Training wrappers of next-token prediction, kept until Chapter 15's driver calls
:func:`attnsvm.train.fit` directly (they are second doors to ``fit``, to be removed).

The NTP data, generators and corpus are in :mod:`attnsvm.data` (:class:`attnsvm.data.NTPData`,
:func:`attnsvm.data.ntp_synthetic`, :func:`attnsvm.data.ntp_patterns`,
:func:`attnsvm.data.ntp_corpus`), the cross-entropy in :mod:`attnsvm.losses`, the NTP and
logit SVMs in :mod:`attnsvm.svm.ntp`, the finite parts in :mod:`attnsvm.svm.finite`, the
token-priority graphs in :mod:`attnsvm.graphs`.
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_choice, check_int, check_positive, renamed
from .models import NTPUFM, NTPLinear
from .train import fit

__all__ = ["train", "train_ufm"]


@renamed(rule="optimizer")
def train(data, *, optimizer, steps, lr, betas=(0.9, 0.999), eps=1e-8, W0=None, record_steps=None):
    r"""Train the linear NTP decoder on every trial at once (float64).

    A thin wrapper over :func:`attnsvm.train.fit` with the model
    :class:`attnsvm.models.NTPLinear` (on CPU).

    Parameters
    ----------
    data : NTPData (batched)
    optimizer : {"gd", "ngd", "adam"}
        ``"gd"``: :math:`W_{k+1} = W_k - \eta\nabla\mathrm{CE}`; ``"ngd"``: the step divided by
        :math:`\|\nabla\mathrm{CE}\|_F`; ``"adam"``: Adam with bias correction.
    steps : int; lr : float or array (B,) (one step size per trial)
    W0 : array (B, V, d), optional (default zero)
    record_steps : array of int, optional (default 50 log-spaced steps; steps outside
        ``[0, steps]`` are ignored)

    Returns
    -------
    dict: ``steps`` (K,), ``iterates`` (K, B, V, d), ``ce`` (K, B).
    """
    optimizer = check_choice("optimizer", optimizer, ("gd", "ngd", "adam"))
    steps = check_int("steps", steps, minimum=1)
    if not data.batched:
        raise ValueError("data must be batched (a leading trials axis)")
    B, m, V = data.P.shape
    lr_a = np.asarray(lr, dtype=float)
    if lr_a.shape not in ((), (B,)) or not np.all(np.isfinite(lr_a)) or np.any(lr_a <= 0):
        raise ValueError(f"lr must be a positive float or an array of {B} positive floats")
    d = data.H.shape[-1]
    init = "zeros" if W0 is None else as_float_array("W0", W0, shape=(B, V, d))
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 50)).astype(int))
    rec = np.unique(np.asarray(record_steps, dtype=np.int64).ravel())
    rec = rec[(rec >= 0) & (rec <= steps)]
    h = fit(data, model=NTPLinear(), optimizer=optimizer, lr=float(lr_a) if lr_a.ndim == 0 else lr_a,
            steps=steps, init=init, record_every=rec if rec.size else "log", snapshots=True,
            device="cpu", **(dict(betas=betas, eps=eps) if optimizer == "adam" else {}))
    idx = np.searchsorted(h.steps, rec)
    return {"steps": rec, "iterates": h.snapshots[idx], "ce": h.loss[idx]}


def train_ufm(P, pi, *, d, steps, lr, init_scale=0.01, seed=0, record_steps=None):
    r"""Gradient descent on the NTP unconstrained-features model, every trial at once (float64).

    A thin wrapper over :func:`attnsvm.train.fit` with the model
    :class:`attnsvm.models.NTPUFM` (on CPU), recording both embeddings.

    Parameters
    ----------
    P : (B, m, V); pi : (B, m)
    d : int, embedding dimension; steps : int; lr : positive float
    init_scale : float
        Gaussian initialization :math:`N(0, \mathrm{init\_scale}^2)` of every entry of
        :math:`W` and :math:`H`; trial ``b`` draws from the key ``(seed, b)`` only.
    record_steps : array of int, optional (default 40 log-spaced steps)

    Returns
    -------
    dict: ``steps`` (K,), ``W`` (K, B, V, d), ``H`` (K, B, m, d), ``loss`` (K, B).
    """
    steps = check_int("steps", steps, minimum=1)
    lr = check_positive("lr", lr)
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 40)).astype(int))
    rec = np.unique(np.asarray(record_steps, dtype=np.int64).ravel())
    rec = rec[(rec >= 0) & (rec <= steps)]
    if not rec.size:
        raise ValueError(f"record_steps must contain a step in [0, {steps}]")
    h = fit({"P": P, "pi": pi}, model=NTPUFM(d), optimizer="gd", lr=lr, steps=steps,
            init="random", init_scale=check_positive("init_scale", init_scale), seed=seed,
            record_every=rec, snapshots=("W", "H"), device="cpu")
    idx = np.searchsorted(h.steps, rec)
    if not np.all(np.isfinite(h.loss)):
        raise FloatingPointError(f"UFM training diverged: lower lr (now {lr})")
    return {"steps": rec, "W": h.trajectory["W"][idx], "H": h.trajectory["H"][idx],
            "loss": h.loss[idx]}
