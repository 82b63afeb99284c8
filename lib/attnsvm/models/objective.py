r"""Models with their own objective: the interface :func:`attnsvm.train.fit` trains.

A model object ``net`` passed as ``fit(data, model=net, ...)`` provides

``trainable`` : tuple of str
    Names of the trained parameters (the step rule acts on these, in this order).
``param_names`` : tuple of str, optional
    Every parameter it holds (trained or fixed); default ``trainable``.
``main`` : str, optional
    The parameter whose norm, correlations with ``refs`` and snapshots are recorded
    (default ``trainable[0]``).
``batch(data, *, dtype, device) -> dict of Tensor``
    The data as tensors, every one with a leading trials axis ``B`` (the number of trials is
    the length of that axis). Validate ``data`` here and raise ``ValueError`` naming it.
``init_params(batch, rngs, *, init, init_scale, dtype, device) -> dict of Tensor``
    Initial parameters with a leading trials axis; trial ``b`` draws only from ``rngs[b]``
    (a numpy Generator). ``init`` is ``"zeros"``, ``"random"``, an array (the main parameter,
    with or without the trials axis) or a dict name -> array. :class:`ObjectiveModel`
    implements it from :meth:`ObjectiveModel.param_shapes`.
``objective(params, batch) -> (loss, grads, log_scale[, log_loss])``
    ``loss`` (B,): the training objective of each trial; ``grads``: dict name -> Tensor for
    every name in ``trainable``; ``log_scale``: ``None`` (``grads`` are the true gradients) or
    a dict name -> (B,) :math:`\sigma_j` with :math:`\nabla_j L = e^{\sigma_j}\,`
    ``grads[j]`` (the log-scaled form of :mod:`attnsvm.optim`, for losses that underflow);
    optional ``log_loss`` (B,): :math:`\log L` when ``loss`` may underflow (default
    ``log(loss)``). Trials must not interact.
``gradient(params, batch) -> (grads, log_scale)``, optional
    A faster path without the loss: when present, :func:`~attnsvm.train.fit` calls it instead
    of ``objective`` on the steps whose rule does not need the loss (all but the Polyak rules);
    it must return what ``objective`` returns in those two places.
``L_star(batch) -> Tensor (B,)``, optional
    The infimum of the objective; ``optimizer="polyak_star"`` uses :math:`L - L^\star` and the
    History records ``excess`` :math:`= L - L^\star`.

:class:`ObjectiveModel` is a base class implementing ``init_params`` (from
``param_shapes(batch) -> dict name -> shape``) and the defaults; :class:`MarginObjective`
puts a margin model (:class:`~attnsvm.models.LinearClassifier`,
:class:`~attnsvm.models.AttentionClassifier`) and a loss on this interface, with a ready
batch of tensors and given parameters (how the Part IV drivers train them with
:func:`attnsvm.train.fit`).
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import check_choice
from ..losses import get_loss, log_mean_loss
from ._init import _broadcast_init, _stack

__all__ = ["ObjectiveModel", "MarginObjective", "is_objective_model"]


def is_objective_model(model):
    """Whether ``model`` is an object on the objective interface (not a model name)."""
    return not isinstance(model, str) and callable(getattr(model, "objective", None))


class ObjectiveModel:
    """Base class of the models with their own objective (see the module docstring).

    Subclasses set ``trainable`` (and optionally ``param_names``, ``main``) and implement
    ``batch``, ``param_shapes`` and ``objective`` (and optionally ``L_star``)."""

    trainable: tuple = ()
    default_init = "zeros"
    default_init_scale = 0.01

    @property
    def param_names(self):
        return tuple(self.trainable)

    @property
    def main(self):
        return self.trainable[0]

    def batch(self, data, *, dtype=torch.float64, device="cpu"):
        raise NotImplementedError

    def param_shapes(self, batch):
        """dict name -> shape (without the trials axis) of every parameter."""
        raise NotImplementedError

    def objective(self, params, batch):
        raise NotImplementedError

    def init_params(self, batch, rngs, *, init=None, init_scale=None, dtype=torch.float64,
                    device="cpu"):
        """Zeros, i.i.d. :math:`N(0, \\mathrm{init\\_scale}^2)` (per trial from ``rngs[b]``),
        an array for the main parameter or a dict of arrays (missing names: zeros)."""
        shapes = self.param_shapes(batch)
        B = len(rngs)
        kw = dict(dtype=dtype, device=device)
        init = self.default_init if init is None else init
        scale = self.default_init_scale if init_scale is None else init_scale
        if isinstance(init, dict):
            bad = set(init) - set(shapes)
            if bad:
                raise ValueError(f"init has unknown parameter names {sorted(bad)}; "
                                 f"expected a subset of {sorted(shapes)}")
            return {k: (_broadcast_init(k, init[k], B, shp, kw) if k in init
                        else torch.zeros((B,) + tuple(shp), **kw)) for k, shp in shapes.items()}
        if isinstance(init, str):
            check_choice("init", init, ("zeros", "random"))
            if init == "zeros":
                return {k: torch.zeros((B,) + tuple(shp), **kw) for k, shp in shapes.items()}
            draws = {k: [] for k in shapes}
            for r in rngs:                                   # trial b draws only from rngs[b]
                for k, shp in shapes.items():
                    draws[k].append(r.standard_normal(shp) * scale)
            return {k: torch.as_tensor(_stack(v), **kw) for k, v in draws.items()}
        out = {k: torch.zeros((B,) + tuple(shp), **kw) for k, shp in shapes.items()}
        out[self.main] = _broadcast_init(self.main, init, B, tuple(shapes[self.main]), kw)
        return out


class MarginObjective(ObjectiveModel):
    r"""A margin model and a loss as a model with its own objective.

    ``net`` is a :class:`~attnsvm.models.LinearClassifier` or
    :class:`~attnsvm.models.AttentionClassifier`; the objective is
    :math:`L = \frac1n\sum_i \ell(u_i)` with the margins of ``net`` and the loss ``loss`` of
    :mod:`attnsvm.losses`, its log-scaled gradient from ``net.grad`` and :math:`\log L` from
    :func:`attnsvm.losses.log_mean_loss` (exact where :math:`L` underflows). The data is a
    ready batch (a dict of tensors with the trials axis: ``X``, ``y``[, ``Z``, ``G``]) and the
    initial parameters must be given (``init`` = a dict with every parameter of ``net``).
    """

    def __init__(self, net, loss="logistic"):
        self.net = net
        self.lossobj = get_loss(loss)
        self.trainable = tuple(net.trainable)

    @property
    def param_names(self):
        return tuple(getattr(self.net, "param_names", self.trainable))

    def batch(self, data, *, dtype=torch.float64, device="cpu"):
        if not isinstance(data, dict) or "X" not in data or "y" not in data:
            raise ValueError("data must be a dict of tensors with 'X' and 'y' (and the trials "
                             "axis) for a MarginObjective")
        return {k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in data.items()}

    def init_params(self, batch, rngs, *, init=None, init_scale=None, dtype=torch.float64,
                    device="cpu"):
        if (not isinstance(init, dict) or not set(self.trainable) <= set(init)
                or not set(init) <= set(self.param_names)):
            raise ValueError(f"init must be a dict of the parameters {list(self.param_names)} "
                             f"(at least {list(self.trainable)}) for a MarginObjective")
        B = len(rngs)
        out = {}
        for k, v in init.items():
            t = torch.as_tensor(np.asarray(v) if not torch.is_tensor(v) else v,
                                dtype=dtype, device=device).clone()
            if t.shape[0] != B:
                raise ValueError(f"init[{k!r}] must have the trials axis {B}, got {tuple(t.shape)}")
            out[k] = t
        return out

    def objective(self, params, batch):
        r"""``(L, grads, log_scales, log L)``; :math:`\log L` is NaN for a loss that can be
        negative (the correlation loss :math:`-u`), where it is undefined."""
        u, grads, scales = self.net.grad(params, batch, self.lossobj)
        loss = self.lossobj.value(u).mean(-1)
        log_loss = (log_mean_loss(self.lossobj, u) if self.lossobj.nonnegative
                    else torch.full_like(loss, float("nan")))
        return loss, grads, scales, log_loss

    def gradient(self, params, batch):
        _, grads, scales = self.net.grad(params, batch, self.lossobj)
        return grads, scales
