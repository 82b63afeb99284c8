r"""Models: the single-layer attention classifier, its parameterizations, heads and losses.

Everything here is a batched torch program: every parameter and data tensor carries a
leading trials axis ``B``, and trials never interact.

The attention classifier
------------------------
For a sequence :math:`X \in \mathbb{R}^{T\times d}` (rows :math:`x_t`) and a query
:math:`z \in \mathbb{R}^d`,

.. math::

    a = X W z \in \mathbb{R}^T, \qquad s = \mathrm{softmax}(a), \qquad
    h = X^\top s, \qquad f(X) = \psi(h),

with the linear head :math:`\psi(h) = v^\top h` (so :math:`f = \sum_t s_t\, g_t` with token
values :math:`g_t = v^\top x_t`) or a ReLU MLP head :math:`\psi(h) = c^\top \mathrm{relu}(U h)`.
The scores are parameterized as

* ``"W"``: :math:`a = X W z`, :math:`W \in \mathbb{R}^{d\times d}`;
* ``"KQ"``: :math:`a = X K Q^\top z`, :math:`K, Q \in \mathbb{R}^{d\times m}`;
* ``"prompt"``: :math:`a = X p`, :math:`p \in \mathbb{R}^d`.

Gradients (hand-derived, used by the engine)
---------------------------------------------
The margin of sequence :math:`i` is :math:`u_i = y_i f(X_i)`. For any coefficients
:math:`c_i` the engine needs :math:`\nabla \sum_i c_i u_i` (with :math:`c_i = \ell'(u_i)/n`
this is :math:`\nabla L`). The softmax Jacobian :math:`\mathrm{diag}(s) - s s^\top` gives, for
the linear head,

.. math::

    \frac{\partial f}{\partial a} = r, \qquad r_t = s_t\,(g_t - f),

and with :math:`q_{it} = c_i y_i r_{it}` and :math:`\bar x_i = \sum_t q_{it} x_{it} = X_i^\top q_i`,

.. math::

    \nabla_W = \sum_i \bar x_i z_i^\top, \qquad
    \nabla_K = \nabla_W\, Q, \qquad \nabla_Q = \nabla_W^\top K, \qquad
    \nabla_p = \sum_i \bar x_i, \qquad
    \nabla_v = \sum_i c_i y_i\, X_i^\top s_i .

(:math:`\nabla_W = \sum_i c_i y_i \sum_t s_{it}(g_{it} - f_i)\, x_{it} z_i^\top
= \sum_i c_i y_i X_i^\top(\mathrm{diag}(s_i) - s_i s_i^\top) X_i v\, z_i^\top`.)
The linear classifier :math:`f(x) = w^\top x` has :math:`\nabla_w = \sum_i c_i y_i x_i`.
The MLP head uses autograd.

The losses live in :mod:`attnsvm.losses`.
"""
from __future__ import annotations

import math

import torch

from ._checks import check_choice, check_int
from .losses import LOSSES, Loss, get_loss, grad_coefficients, log_mean_loss  # noqa: F401

__all__ = ["AttentionClassifier", "LinearClassifier"]


# ----------------------------------------------------------------------------- models
class AttentionClassifier:
    r"""The single-layer attention classifier :math:`f(X) = \psi(X^\top \mathrm{softmax}(a))`.

    Parameters
    ----------
    param : {"W", "KQ", "prompt"}
        How the attention scores are parameterized (see the module docstring).
    m : int, optional
        Inner dimension of ``K`` and ``Q`` (``"KQ"`` only; default ``d``).
    head : {"linear", "mlp"}
        ``"linear"``: :math:`\psi(h) = v^\top h` with the data's ``v``.
        ``"mlp"``: :math:`\psi(h) = c^\top \mathrm{relu}(U h)`, ``U`` (width, d) and ``c`` (width,)
        drawn at init (seeded per trial); gradients by autograd.
    width : int, optional
        Hidden width of the MLP head (default ``2 d``).
    train_v : bool
        Train the head jointly (``v``, or ``U`` and ``c``) instead of keeping it fixed.

    Notes
    -----
    Parameters are held in a dict of tensors with a leading trials axis: ``W`` (B,d,d) or
    ``K``, ``Q`` (B,d,m) or ``p`` (B,d); ``v`` (B,d) for the linear head; ``U`` (B,k,d),
    ``c`` (B,k) for the MLP head. A data batch is a dict with ``X`` (B,n,T,d), ``y`` (B,n),
    ``Z`` (B,n,d) and, for the linear head with a fixed ``v``, optionally the token values
    ``G = X v`` (B,n,T) precomputed once.
    """

    def __init__(self, param="W", *, m=None, head="linear", width=None, train_v=False):
        self.param = check_choice("model", param, ("W", "KQ", "prompt"))
        self.head = check_choice("head", head, ("linear", "mlp"))
        if m is not None:
            if param != "KQ":
                raise ValueError(f"m applies only to model='KQ', got model={param!r}, m={m!r}")
            m = check_int("m", m, minimum=1)
        self.m = m
        self.width = None if width is None else check_int("width", width, minimum=1)
        if width is not None and head != "mlp":
            raise ValueError("width applies only to head='mlp'")
        self.train_v = bool(train_v)
        base = {"W": ("W",), "KQ": ("K", "Q"), "prompt": ("p",)}[param]
        headp = ("v",) if head == "linear" else ("U", "c")
        self.param_names = base + headp
        self.trainable = base + (headp if self.train_v else ())
        self.autograd = head == "mlp"

    # -- initialization -------------------------------------------------------------
    def init_params(self, d, v, rngs, *, init="zeros", init_scale=None, dtype=torch.float64,
                    device="cpu"):
        """Initial parameters for ``len(rngs)`` trials.

        Parameters
        ----------
        d : int
        v : Tensor, shape (B, d)
            The data's head (the linear head starts there).
        rngs : list of numpy Generators, one per trial (trial ``b`` draws only from ``rngs[b]``).
        init : {"zeros", "random"} or array or dict
            ``"random"``: i.i.d. :math:`N(0, \\mathrm{init\\_scale}^2)` entries. An array gives the
            main parameter (``W`` or ``p``), shape with or without the trials axis; a dict maps
            parameter names (``"K"``, ``"Q"``, ...) to arrays.
        """
        B = len(rngs)
        m = self.m or d
        shapes = {"W": (d, d), "K": (d, m), "Q": (d, m), "p": (d,)}
        k = self.width or 2 * d
        if self.param == "KQ" and isinstance(init, str) and init == "zeros":
            raise ValueError("init='zeros' is a saddle point of the (K,Q) parameterization "
                             "(zero gradient); use init='random'")
        scale = 0.01 if init_scale is None else init_scale
        out = {}
        base = [n for n in self.param_names if n in shapes]
        given = {}
        if isinstance(init, dict):
            given = dict(init)
            bad = set(given) - set(self.param_names)
            if bad:
                raise ValueError(f"init has unknown parameter names {sorted(bad)}; "
                                 f"expected a subset of {list(self.param_names)}")
            init_kind = "random"
        elif isinstance(init, str):
            init_kind = check_choice("init", init, ("zeros", "random"))
        else:
            if len(base) != 1:
                raise ValueError("init for model='KQ' must be 'random' or a dict with 'K' and 'Q'")
            given = {base[0]: init}
            init_kind = "random"
        draws = {name: [] for name in base}
        head_draws = {"U": [], "c": []}
        for r in rngs:
            for name in base:
                draws[name].append(r.standard_normal(shapes[name]) * scale)
            if self.head == "mlp":
                head_draws["U"].append(r.standard_normal((k, d)) / math.sqrt(d))
                head_draws["c"].append(r.choice([-1.0, 1.0], size=k) / math.sqrt(k))
        kw = dict(dtype=dtype, device=device)
        for name in base:
            if name in given:
                out[name] = _broadcast_init(name, given[name], B, shapes[name], kw)
            elif init_kind == "zeros":
                out[name] = torch.zeros((B,) + shapes[name], **kw)
            else:
                out[name] = torch.as_tensor(_stack(draws[name]), **kw)
        if self.head == "linear":
            out["v"] = (_broadcast_init("v", given["v"], B, (d,), kw) if "v" in given
                        else v.to(**kw).clone())
        else:
            for name, shp in (("U", (k, d)), ("c", (k,))):
                out[name] = (_broadcast_init(name, given[name], B, shp, kw) if name in given
                             else torch.as_tensor(_stack(head_draws[name]), **kw))
        return out

    # -- forward --------------------------------------------------------------------
    def matrix(self, params):
        """The main attention parameter: ``W`` (B,d,d) (``K Q^T`` for ``"KQ"``) or ``p`` (B,d)."""
        if self.param == "W":
            return params["W"]
        if self.param == "KQ":
            return params["K"] @ params["Q"].transpose(-1, -2)
        return params["p"]

    def scores(self, params, batch, W=None):
        r"""Attention scores :math:`a_{it} = x_{it}^\top W z_i` (or :math:`x_{it}^\top p`), (B,n,T)."""
        X = batch["X"]
        if self.param == "prompt":
            return (X * params["p"][:, None, None, :]).sum(-1)
        if W is None:
            W = self.matrix(params)
        Wz = batch["Z"] @ W.transpose(-1, -2)          # (B,n,d): rows W z_i
        return (X * Wz.unsqueeze(-2)).sum(-1)

    def head_values(self, params, X):
        r"""Per-token head values :math:`\psi(x_t)` for tokens ``X`` (..., d) -> (...)."""
        if self.head == "linear":
            v = params["v"]
            return (X * v.reshape(v.shape[:1] + (1,) * (X.ndim - 2) + v.shape[1:])).sum(-1)
        U, c = params["U"], params["c"]
        lead = (1,) * (X.ndim - 2)
        hid = torch.relu((X.unsqueeze(-2) * U.reshape(U.shape[:1] + lead + U.shape[1:])).sum(-1))
        return (hid * c.reshape(c.shape[:1] + lead + c.shape[1:])).sum(-1)

    def forward(self, params, batch):
        """Margins ``u = y f(X)`` (B,n) and a cache (``s``: attention (B,n,T); ``W``)."""
        W = self.matrix(params) if self.param != "prompt" else None
        a = self.scores(params, batch, W)
        s = torch.softmax(a, dim=-1)
        if self.head == "linear":
            G = batch.get("G")
            if G is None or self.train_v:
                G = self.head_values(params, batch["X"])
            f = (s * G).sum(-1)
        else:
            h = (batch["X"] * s.unsqueeze(-1)).sum(-2)          # (B,n,d)
            f = self.head_values(params, h)
            G = None
        u = batch["y"] * f
        return u, {"s": s, "G": G, "f": f, "W": W}

    def grad(self, params, batch, loss):
        r"""Margins and the log-scaled loss gradient, by the hand-derived formulas.

        Returns ``(u, grads, log_scales)`` with :math:`\nabla_j L = e^{\sigma_j}\tilde g_j`:
        ``grads[j]`` is :math:`\tilde g_j` and ``log_scales[j]`` is :math:`\sigma_j` (B,).

        Notes
        -----
        The softmax Jacobian term is evaluated without cancellation or underflow. The naive
        :math:`r_t = s_t(g_t - f)` is rounding noise for the top token once
        :math:`1 - s_{\mathrm{top}} < 10^{-16}` (score gaps above ~37): :math:`g_{\mathrm{top}} - f`
        is the difference of two nearly equal numbers (autograd's softmax backward has the same
        defect), and every :math:`s_t` underflows at gaps above ~745. With the top token
        :math:`t^\star` (largest score), the second largest log-probability
        :math:`\lambda_2 = \log s_{(2)}` and the rescaled probabilities
        :math:`\hat s_\tau = e^{\log s_\tau - \lambda_2}` (:math:`\le 1` for
        :math:`\tau \ne t^\star`; :math:`\hat s_{t^\star} := 0`), exactly

        .. math::

            r_t = s_t \sum_\tau s_\tau (g_t - g_\tau) = e^{\lambda_2}\rho_t, \qquad
            \rho_{t^\star} = s_{t^\star}\Big(g_{t^\star}\sum_\tau \hat s_\tau
            - \sum_\tau \hat s_\tau g_\tau\Big), \qquad
            \rho_t = \hat s_t (g_t - f)\ \ (t \ne t^\star),

        where no step cancels catastrophically (the :math:`\hat s_\tau` are O(1), the second
        largest is 1) and only negligible terms can underflow, however large the gap. The
        per-sequence factor :math:`e^{\lambda_{2,i}}(-\ell'(u_i)/n)` stays in log space; its
        maximum over the trial's sequences is :math:`e^{\sigma}`, so
        :math:`q_{it} = -y_i e^{\log(-\ell'(u_i)/n) + \lambda_{2,i} - \sigma} \rho_{it}`, then
        :math:`\bar x_i = X_i^\top q_i`, :math:`\tilde\nabla_W = \sum_i \bar x_i z_i^\top`, etc.
        """
        if self.autograd:
            return self._autograd_grad(params, batch, loss)
        X, y = batch["X"], batch["y"]
        W = self.matrix(params) if self.param != "prompt" else None
        a = self.scores(params, batch, W)
        ls = a - torch.logsumexp(a, dim=-1, keepdim=True)       # log-softmax, (B,n,T)
        s = torch.exp(ls)
        G = batch.get("G")
        if G is None or self.train_v:
            G = self.head_values(params, X)
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
        grads, scales = {}, {}
        if self.param == "prompt":
            grads["p"] = xbar.sum(-2)
            scales["p"] = sig
        else:
            gW = xbar.transpose(-1, -2) @ batch["Z"]           # (B,d,d)
            if self.param == "W":
                grads["W"] = gW
                scales["W"] = sig
            else:
                grads["K"] = gW @ params["Q"]
                grads["Q"] = gW.transpose(-1, -2) @ params["K"]
                scales["K"] = scales["Q"] = sig
        if self.train_v:
            sv = logc.amax(-1)
            cy = -torch.exp(logc - sv.unsqueeze(-1)) * y
            h = (X * s.unsqueeze(-1)).sum(-2)                  # (B,n,d)
            grads["v"] = (cy.unsqueeze(-1) * h).sum(-2)
            scales["v"] = sv
        return u, grads, scales

    def _autograd_grad(self, params, batch, loss):
        r"""Autograd version of :meth:`grad` (used for the MLP head): backpropagates
        :math:`\sum_{b,i} c_{bi} u_{bi}` with :math:`c = -e^{\log(-\ell'/n) - \sigma}` detached;
        trials are independent, so one backward pass gives every trial's gradient."""
        with torch.enable_grad():
            leaves = {k: (p.detach().requires_grad_(True) if k in self.trainable else p)
                      for k, p in params.items()}
            u, _ = self.forward(leaves, batch)
            coef, sig = grad_coefficients(loss, u.detach())
            gs = torch.autograd.grad((coef * u).sum(), [leaves[k] for k in self.trainable])
        return u.detach(), dict(zip(self.trainable, gs)), {k: sig for k in self.trainable}

    def token_scores(self, params, batch):
        r""":math:`\gamma_{it} = y_i \psi(x_{it})` (B,n,T); the optimal token is its argmax."""
        return batch["y"].unsqueeze(-1) * self.head_values(params, batch["X"])


class LinearClassifier:
    r"""The linear classifier :math:`f(x) = w^\top x` on :class:`~attnsvm.data.LinearData`.

    Margins :math:`u_i = y_i w^\top x_i`; :math:`\nabla_w \sum_i c_i u_i = \sum_i c_i y_i x_i`.
    Parameters: ``w`` (B,d). Data batch: ``X`` (B,n,d), ``y`` (B,n).
    """

    param = "linear"
    param_names = ("w",)
    trainable = ("w",)
    autograd = False
    train_v = False
    head = None

    def init_params(self, d, v, rngs, *, init="zeros", init_scale=None, dtype=torch.float64,
                    device="cpu"):
        B = len(rngs)
        kw = dict(dtype=dtype, device=device)
        scale = 0.01 if init_scale is None else init_scale
        if isinstance(init, dict):
            bad = set(init) - {"w"}
            if bad:
                raise ValueError(f"init has unknown parameter names {sorted(bad)}; expected ['w']")
            return {"w": _broadcast_init("w", init["w"], B, (d,), kw)}
        if isinstance(init, str):
            check_choice("init", init, ("zeros", "random"))
            if init == "zeros":
                return {"w": torch.zeros((B, d), **kw)}
            return {"w": torch.as_tensor(_stack([r.standard_normal(d) * scale for r in rngs]), **kw)}
        return {"w": _broadcast_init("w", init, B, (d,), kw)}

    def matrix(self, params):
        return params["w"]

    def forward(self, params, batch):
        u = batch["y"] * (batch["X"] * params["w"].unsqueeze(-2)).sum(-1)
        return u, {}

    def grad(self, params, batch, loss):
        """Margins and log-scaled gradient ``(u, {"w": g}, {"w": sigma})`` (see
        :meth:`AttentionClassifier.grad`)."""
        u, _ = self.forward(params, batch)
        coef, sig = grad_coefficients(loss, u)
        g = ((coef * batch["y"]).unsqueeze(-1) * batch["X"]).sum(-2)
        return u, {"w": g}, {"w": sig}


def _stack(arrs):
    import numpy as np
    return np.stack(arrs)


def _broadcast_init(name, value, B, shape, kw):
    import numpy as np
    from ._checks import as_float_array
    a = as_float_array(f"init[{name!r}]" if name else "init", value)
    if a.shape == shape:
        a = np.broadcast_to(a, (B,) + shape)
    elif a.shape != (B,) + shape:
        raise ValueError(f"init for {name} must have shape {shape} or {(B,) + shape}, got {a.shape}")
    return torch.as_tensor(np.array(a, copy=True), **kw)
