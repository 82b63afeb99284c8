r"""Step rules, defined once: used by the batched engine and by thin ``torch.optim`` wrappers.

A step rule maps gradients to parameter increments :math:`\Delta` (``param += Delta``).
Gradients are passed in *log-scaled* form: the true gradient of parameter :math:`j` is
:math:`e^{\sigma} \tilde g_j`, with one log-scale :math:`\sigma` per trial (``log_scale``;
``None`` means :math:`\sigma = 0`). This lets the engine run at losses far below the
smallest float: normalized rules never need :math:`e^{\sigma}`, and the Polyak step is
computed from logarithms.

Rules (``lr`` = :math:`\eta`):

* ``"gd"``: :math:`\Delta_j = -\eta\, g_j`.
* ``"ngd"``: :math:`\Delta_j = -\eta\, g_j / \|g\|` with :math:`\|g\|^2 = \sum_j \|g_j\|_F^2`
  (global norm over the trial's parameters).
* ``"ngd_param"``: :math:`\Delta_j = -\eta\, g_j / \|g_j\|_F` (each parameter by its own norm).
* ``"polyak"``: :math:`\Delta_j = -\eta_t g_j`,
  :math:`\eta_t = \min(\eta\, L / \|g\|^2,\ \eta_{\max})`, computed as
  :math:`\log \eta_t = \log\eta + \log L - 2\sigma - 2\log\|\tilde g\|` (so :math:`\eta = 1` is
  the classical Polyak step; it stays finite when :math:`L \approx 10^{-300}`).
* ``"polyak_star"``: the same formula with :math:`L - L^\star` in place of :math:`L`
  (:math:`L^\star = \inf L`): the caller passes :math:`\log(L - L^\star)` as ``log_loss``.
* ``"adam"``: Adam (Kingma & Ba) with bias correction, in the same arithmetic order as
  :class:`torch.optim.Adam`: :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`,
  :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
  :math:`\Delta = -\frac{\eta}{1-\beta_1^t} m / (\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon)`.
* ``"sign"``: :math:`\Delta_j = -\eta\, \mathrm{sign}(g_j)`.

In batched mode (``batch_ndim=1``) every norm is taken per trial over the non-batch axes,
never across trials.
"""
from __future__ import annotations

import math

import torch

from ._checks import check_choice, check_positive

__all__ = ["RULES", "update", "init_state", "log_norm", "NGD", "Polyak", "SignGD", "Adam"]

RULES = ("gd", "ngd", "ngd_param", "polyak", "polyak_star", "adam", "sign")


def _bc(x, g):
    """Reshape per-trial scalars ``x`` (B,) (or a 0-d tensor) to broadcast against ``g``."""
    if not torch.is_tensor(x) or x.ndim == 0:
        return x
    return x.reshape(x.shape + (1,) * (g.ndim - x.ndim))


def _sqnorm(g, batch_ndim):
    dims = tuple(range(batch_ndim, g.ndim))
    if not dims:
        return g * g
    return (g * g).sum(dim=dims)


def log_norm(grads, batch_ndim=0):
    r"""Log of the global Frobenius norm :math:`\log\|g\|` of a list of tensors, per trial.

    Computed with a max-rescaling so that it is finite for norms down to the smallest
    subnormal (:math:`\|g\|^2` itself would underflow below :math:`\sim 10^{-154}`).
    """
    dims = lambda g: tuple(range(batch_ndim, g.ndim))  # noqa: E731
    mx = None
    for g in grads:
        a = g.abs().amax(dim=dims(g)) if dims(g) else g.abs()
        mx = a if mx is None else torch.maximum(mx, a)
    mx = torch.where(mx > 0, mx, torch.ones_like(mx))
    sq = sum(_sqnorm(g / _bc(mx, g), batch_ndim) for g in grads)
    return torch.log(mx) + 0.5 * torch.log(sq)


def init_state(rule, params):
    """Fresh optimizer state for ``rule`` given the list of parameter tensors."""
    check_choice("optimizer", rule, RULES)
    if rule == "adam":
        return {"t": 0, "m": [torch.zeros_like(p) for p in params],
                "v": [torch.zeros_like(p) for p in params]}
    return {}


def update(rule, grads, state=None, *, lr, log_scale=None, log_loss=None, eta_max=None,
           betas=(0.9, 0.999), eps=1e-8, batch_ndim=0):
    r"""Parameter increments for one step of ``rule``.

    Parameters
    ----------
    rule : {"gd", "ngd", "ngd_param", "polyak", "adam", "sign"}
    grads : list of Tensor
        Log-scaled gradients :math:`\tilde g_j`; the true gradient is
        :math:`e^{\sigma_j}\tilde g_j`.
    state : dict, optional
        From :func:`init_state` (needed by ``"adam"``; updated in place).
    lr : float
        Step size :math:`\eta` (for ``"polyak"`` a multiplier of the Polyak step).
    log_scale : None, Tensor, or list of Tensor
        :math:`\sigma_j`, per trial ((B,) or 0-d): one for all gradients or one per gradient.
        ``None`` means 0.
    log_loss : Tensor (B,) or 0-d
        :math:`\log L` (``"polyak"``), or :math:`\log(L - L^\star)` (``"polyak_star"``).
    eta_max : float, optional
        Cap on the Polyak step size.
    betas, eps : Adam's constants.
    batch_ndim : int
        Number of leading trial axes (0 for ``torch.optim`` use, 1 in the engine).

    Returns
    -------
    list of Tensor
        Increments, one per gradient.

    Notes
    -----
    The global norm is :math:`\log\|g\| = \tfrac12\operatorname{logsumexp}_j\,
    2(\sigma_j + \log\|\tilde g_j\|)`; normalized increments are :math:`-\eta\,\tilde g_j
    e^{\sigma_j - \log\|g\|}` and Polyak increments :math:`-\tilde g_j e^{\log\eta_t + \sigma_j}`,
    so no quantity that can underflow is ever formed.
    """
    if log_scale is None or torch.is_tensor(log_scale):
        scales = [log_scale] * len(grads)
    else:
        scales = list(log_scale)
        if len(scales) != len(grads):
            raise ValueError("log_scale must be one tensor or one per gradient")
    if rule == "gd" or rule == "adam":
        grads = [g if sc is None else g * _bc(torch.exp(sc), g) for g, sc in zip(grads, scales)]
        if rule == "gd":
            return [-lr * g for g in grads]
        b1, b2 = betas
        state["t"] += 1
        t = state["t"]
        bc1 = 1 - b1 ** t
        bc2s = math.sqrt(1 - b2 ** t)
        out = []
        for g, m, v in zip(grads, state["m"], state["v"]):
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            out.append(-(lr / bc1) * m / (v.sqrt() / bc2s + eps))
        return out
    if rule == "ngd_param":
        out = []
        for g in grads:
            dims = tuple(range(batch_ndim, g.ndim))
            nrm = torch.linalg.vector_norm(g, dim=dims) if dims else g.abs()
            nrm = torch.where(nrm > 0, nrm, 1.0)              # zero gradient: no step
            out.append(g * _bc(nrm.reciprocal_().mul_(-lr), g))
        return out
    if rule == "sign":
        return [-lr * torch.sign(g) for g in grads]
    if rule not in ("ngd", "polyak", "polyak_star"):
        raise ValueError(f"optimizer must be one of {sorted(RULES)!r}, got {rule!r}")
    if all(sc is None for sc in scales) or len(grads) == 1:
        lg = log_norm(grads, batch_ndim)
        sc0 = scales[0]
        lg_tot = lg if sc0 is None else lg + sc0
    else:
        terms = [log_norm([g], batch_ndim) + (0.0 if sc is None else sc)
                 for g, sc in zip(grads, scales)]
        lg_tot = 0.5 * torch.logsumexp(2 * torch.stack(terms), dim=0)
    zero = ~torch.isfinite(lg_tot)                      # zero gradient: no step
    if rule == "ngd":
        expo = [(-lg_tot if sc is None else sc - lg_tot) for sc in scales]
        return [g * _bc(torch.where(zero, torch.zeros_like(lg_tot), -lr * torch.exp(e)), g)
                for g, e in zip(grads, expo)]
    if log_loss is None:
        raise ValueError("the Polyak step needs log_loss")
    log_eta = math.log(lr) + log_loss - 2 * lg_tot
    if eta_max is not None:
        log_eta = torch.clamp(log_eta, max=math.log(eta_max))
    out = []
    for g, sc in zip(grads, scales):
        coef = -torch.exp(log_eta if sc is None else log_eta + sc)
        coef = torch.where(zero, torch.zeros_like(coef), coef)
        out.append(g * _bc(coef, g))
    return out


# ----------------------------------------------------------------------------- torch.optim
class _RuleOptimizer(torch.optim.Optimizer):
    """Base: applies :func:`update` to every parameter group (norms taken over the group)."""

    rule = None

    def _group_step(self, group, loss):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        kw = {}
        if self.rule == "polyak":
            if loss is None:
                raise ValueError("Polyak.step needs the loss: pass closure= or loss=")
            loss_t = torch.as_tensor(loss, dtype=grads[0].dtype, device=grads[0].device).detach()
            if loss_t.numel() != 1 or not bool(loss_t > 0):
                raise ValueError(f"the Polyak step needs a positive scalar loss, got {loss!r}")
            kw = dict(log_loss=torch.log(loss_t), eta_max=group["eta_max"])
        state = None
        if self.rule == "adam":
            for p in params:
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
            state = {"t": self.state[params[0]]["step"],
                     "m": [self.state[p]["exp_avg"] for p in params],
                     "v": [self.state[p]["exp_avg_sq"] for p in params]}
            kw = dict(betas=group["betas"], eps=group["eps"])
        deltas = update(self.rule, grads, state, lr=group["lr"], **kw)
        if state is not None:
            for p in params:
                self.state[p]["step"] = state["t"]
        for p, dlt in zip(params, deltas):
            p.add_(dlt)

    @torch.no_grad()
    def step(self, closure=None, loss=None):
        """One step. ``closure`` (re-evaluates and returns the loss) or ``loss`` is optional
        except for :class:`Polyak`."""
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._group_step(group, loss)
        return loss


class NGD(_RuleOptimizer):
    r"""Normalized gradient descent, :math:`\theta \leftarrow \theta - \eta\, g/\|g\|`.

    ``per_param=False``: one global norm over the group; ``per_param=True``: each parameter
    divided by its own Frobenius norm (the rule ``"ngd_param"``).
    """

    def __init__(self, params, lr=0.1, per_param=False):
        check_positive("lr", lr)
        super().__init__(params, dict(lr=lr))
        self.rule = "ngd_param" if per_param else "ngd"


class Polyak(_RuleOptimizer):
    r"""Polyak step size :math:`\eta_t = \min(\mathrm{lr}\cdot L/\|g\|^2, \eta_{\max})`
    (global norm over the group; computed in log space). ``step`` needs the loss."""

    rule = "polyak"

    def __init__(self, params, lr=1.0, eta_max=None):
        check_positive("lr", lr)
        if eta_max is not None:
            check_positive("eta_max", eta_max)
        super().__init__(params, dict(lr=lr, eta_max=eta_max))


class SignGD(_RuleOptimizer):
    r"""Sign descent :math:`\theta \leftarrow \theta - \eta\, \mathrm{sign}(g)`."""

    rule = "sign"

    def __init__(self, params, lr=0.01):
        check_positive("lr", lr)
        super().__init__(params, dict(lr=lr))


class Adam(_RuleOptimizer):
    """Adam through the shared rule (matches :class:`torch.optim.Adam` without weight decay)."""

    rule = "adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        check_positive("lr", lr)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))
