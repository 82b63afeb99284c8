r"""Optimizer geometry (Part IV): steepest descent in a norm, mirror descent, progressive norm
rescaling (PRGD) and Adam with a step schedule, batched over trials, float64.

:func:`run` drives the models of :mod:`attnsvm.models` that have a single trained parameter
(``LinearClassifier``: ``w``; ``AttentionClassifier("W")``: ``W``) on a ready batch of tensors,
through their log-scaled gradients (``model.grad``: :math:`\nabla L = e^{\sigma}\tilde g`), so
the loss is the one of :mod:`attnsvm.losses` and nothing underflows. It is a thin wrapper over
the one engine, :func:`attnsvm.train.fit` (the model wrapped as an
:class:`attnsvm.models.MarginObjective`); the rules and the geometry
(:func:`steepest_direction`, :func:`dual_norm`, :func:`mirror_map`) live in
:mod:`attnsvm.optim` and are re-exported here.

Rules: ``"gd"``, ``"sd"`` (normalized steepest descent in ``norm``: 2, inf, 1, a real p or
``"spectral"``), ``"md"`` (mirror descent with :math:`\psi = \frac1p\|w\|_p^p`, optionally
normalized by the dual norm), ``"prgd"`` (progressive norm rescaling, the book's variant) and
``"adam"`` (``eps=0``: no stability constant, exact in log-scaled form), all with the schedule
:math:`\eta_t = \eta\,(t+1)^{-a}` (``decay`` :math:`a`); their definitions are in
:mod:`attnsvm.optim`.
"""
from __future__ import annotations

import numpy as np

from ._checks import check_choice, check_int, check_positive
from .optim import dual_norm, mirror_map, steepest_direction
from .models import MarginObjective
from .train import fit

__all__ = ["RULES", "steepest_direction", "dual_norm", "mirror_map", "run"]

RULES = ("gd", "sd", "md", "prgd", "adam")


def run(model, params, batch, *, rule, steps, lr, loss="exponential", norm=2, p=None,
        normalize=False, decay=0.0, period=100, growth=2.0, R0=1.0, betas=(0.9, 0.999),
        eps=0.0, step_power=0.5, record_steps=None):
    r"""Train the single trained parameter of ``model`` with a geometry rule, all trials at once.

    A thin wrapper over :func:`attnsvm.train.fit` (``model`` wrapped as an
    :class:`attnsvm.models.MarginObjective` with the loss ``loss``, ``params`` its
    initialization).

    Parameters
    ----------
    model : ``attnsvm.models.LinearClassifier`` or ``AttentionClassifier("W")``
    params : dict of Tensor
        From ``model.init_params`` (leading trial axis B); the trained one is copied.
    batch : dict of Tensor
        The model's data batch (``X``, ``y``[, ``Z``, ``G``]).
    rule : {"gd", "sd", "md", "prgd", "adam"}
    steps : int >= 1
    lr : float > 0
        :math:`\eta` (the schedule is :math:`\eta (t+1)^{-\mathrm{decay}}`).
    loss : str
        A loss of :mod:`attnsvm.losses` (default exponential).
    norm : 2, inf, 1, real p or "spectral"
        Norm of ``"sd"``.
    p : float > 1
        Potential exponent of ``"md"``.
    normalize : bool
        ``"md"``: divide the gradient by its dual norm.
    decay : float >= 0
        Exponent ``a`` of the step schedule.
    period, growth, R0, step_power
        PRGD's phase length, radius growth factor, first radius and step exponent.
    betas, eps
        Adam's constants (``eps=0``: no stability constant).
    record_steps : array of int, optional
        Steps at which the iterate is recorded (default: 60 log-spaced steps up to ``steps``).

    Returns
    -------
    dict
        ``steps`` (K,), ``iterates`` (K, B, ...) numpy float64, ``log_loss`` (K, B).
    """
    rule = check_choice("rule", rule, RULES)
    steps = check_int("steps", steps, minimum=1)
    lr = check_positive("lr", lr)
    if rule == "md" and (p is None or not p > 1):
        raise ValueError(f"p must be a real number > 1 for rule='md', got {p!r}")
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 60)).astype(int))
    record_steps = np.asarray(record_steps, dtype=int)
    if record_steps.ndim != 1 or record_steps.min() < 0 or record_steps.max() > steps:
        raise ValueError(f"record_steps must be integers in [0, {steps}]")
    record_steps = np.unique(record_steps)
    opts = {"gd": dict(decay=decay), "sd": dict(norm=norm, decay=decay),
            "md": dict(p=p, normalize=normalize, decay=decay),
            "prgd": dict(period=period, growth=growth, R0=R0, step_power=step_power, decay=decay),
            "adam": dict(betas=betas, eps=eps, decay=decay)}[rule]
    name = model.trainable[0]
    h = fit(batch, model=MarginObjective(model, loss), init=params, optimizer=rule, lr=lr,
            steps=steps, record_every=record_steps, snapshots=(name,),
            device=params[name].device, **opts)
    idx = np.searchsorted(h.steps, record_steps)
    return {"steps": record_steps, "iterates": h.trajectory[name][idx],
            "log_loss": h.log_loss[idx]}
