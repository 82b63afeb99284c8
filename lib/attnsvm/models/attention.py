r"""The single-layer attention classifier: one score parameterization
(:mod:`attnsvm.models.parameterizations`) composed with one head (:mod:`attnsvm.models.heads`);
the forward pass and the hand-derived, cancellation-free gradient (see :mod:`attnsvm.models`).
"""
from __future__ import annotations

import copy
import math

import torch

from .._checks import check_choice, check_int
from ..jacobian import EXP_FLUSH, jacobian_products, softmax_parts  # noqa: F401 (re-exported)
from ..losses import grad_coefficients
from ._init import _broadcast_init, _stack
from .heads import HEADS
from .parameterizations import PARAMETERIZATIONS, SPAN_FIXED, WSpanScores, token_products, token_sums

__all__ = ["AttentionClassifier", "softmax_jacobian"]


def softmax_jacobian(a, G):
    r"""The softmax-Jacobian products of the linear head for one set of scores, per sequence
    (the form of :func:`jacobian_products` with :math:`c = 1` and a scale per sequence).

    For scores ``a`` and token values ``G`` (both (..., T)), with the top token
    :math:`t^\star`, its tie group :math:`U = \{t: g_t = g_{t^\star}\}` and
    :math:`\lambda_2 = \max_{t \notin U} \log s_t` (the largest log-probability outside the
    group; :math:`-\infty` when there is none),

    .. math::

        \frac{\partial f}{\partial a_t} = s_t(g_t - f) = e^{\lambda_2}\rho_t,

    with :math:`\rho` from :func:`jacobian_products` (no cancellation; only terms below
    rounding of the largest underflow, at any score gap).

    Returns
    -------
    rho : (..., T)
    f : (...,)
    lam2, log_s_top : (...,)
        :math:`\lambda_2` and :math:`\log s_{t^\star}`.
    top : (..., 1) int
        :math:`t^\star`.
    a_top : (..., 1)
        :math:`a_{t^\star}`.
    """
    top, e, S, s = softmax_parts(a)
    log_S = torch.log(S)
    Q, lam2 = jacobian_products(e, log_S, s, top, G, 0.0, (-1,))
    lam2 = torch.where(lam2 > torch.finfo(lam2.dtype).min, lam2, -math.inf)
    return (Q.neg_(), (s * G).sum(-1), lam2, -log_S.squeeze(-1), top, a.gather(-1, top))


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
        drawn at init (seeded per trial); gradients by the head linearized at
        :math:`h_i` (:mod:`attnsvm.models.heads`), exact at any saturation.
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
        self.scoring = PARAMETERIZATIONS[param]          # the score parameterization
        self.psi = HEADS[head]                             # the head
        base, headp = self.scoring.names, self.psi.names
        self.param_names = base + headp
        self.trainable = base + (headp if self.train_v else ())

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
        shapes = self.scoring.shapes(d, m)
        k = self.width or 2 * d
        if self.param == "KQ" and isinstance(init, str) and init == "zeros":
            raise ValueError("init='zeros' is a saddle point of the (K,Q) parameterization "
                             "(zero gradient); use init='random'")
        scale = 0.01 if init_scale is None else init_scale
        out = {}
        base = list(self.scoring.names)
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
        head_draws = {name: [] for name in self.psi.names}
        for r in rngs:                                   # trial b draws only from rngs[b]
            for name in base:
                draws[name].append(r.standard_normal(shapes[name]) * scale)
            for name, a in self.psi.draw(r, d, k).items():
                head_draws[name].append(a)
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
            for name, shp in self.psi.shapes(d, k).items():
                out[name] = (_broadcast_init(name, given[name], B, shp, kw) if name in given
                             else torch.as_tensor(_stack(head_draws[name]), **kw))
        return out

    # -- forward --------------------------------------------------------------------
    def matrix(self, params):
        """The main attention parameter: ``W`` (B,d,d) (``K Q^T`` for ``"KQ"``) or ``p`` (B,d)."""
        return self.scoring.matrix(params)

    def scores(self, params, batch, W=None):
        r"""Attention scores :math:`a_{it} = x_{it}^\top W z_i` (or :math:`x_{it}^\top p`), (B,n,T)."""
        return self.scoring.scores(params, batch, W)

    def head_values(self, params, X):
        r"""Per-token head values :math:`\psi(x_t)` for tokens ``X`` (..., d) -> (...)."""
        return self.psi.values(params, X)

    def forward(self, params, batch):
        """Margins ``u = y f(X)`` (B,n) and a cache (``s``: attention (B,n,T); ``W``)."""
        W = self.matrix(params) if self.scoring.query else None
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

    def grad(self, params, batch, loss, out=None):
        r"""Margins and the log-scaled loss gradient, by the hand-derived formulas.

        Returns ``(u, grads, log_scales)`` with :math:`\nabla_j L = e^{\sigma_j}\tilde g_j`:
        ``grads[j]`` is :math:`\tilde g_j` and ``log_scales[j]`` is :math:`\sigma_j` (B,).
        ``out``, a dict, receives ``"log_s"``, the log-attention :math:`\log s` (B,n,T), for a
        caller that needs it (the excess-loss Polyak step).

        Notes
        -----
        With :math:`c_i = -\ell'(u_i)/n` and :math:`\Gamma_{it} = y_i g_{it}`,
        :math:`\nabla_W L = -\sum_i c_i \sum_t \partial u_i/\partial a_{it}\; x_{it} z_i^\top`, and
        :func:`jacobian_products` gives :math:`-c_i\,\partial u_i/\partial a_{it} =
        e^{\sigma}Q_{it}` with one :math:`\sigma` per trial (the largest
        :math:`\log c_i + \log s_{it}` outside the tie groups), without cancellation or
        underflow at any score gap. The naive :math:`r_t = s_t(g_t - f)` is rounding noise for
        the top token once :math:`1 - s_{\mathrm{top}} < 10^{-16}` (score gaps above ~37), and
        every :math:`s_t` underflows at gaps above ~745. Then :math:`\bar x_i = X_i^\top Q_i`,
        :math:`\tilde\nabla_W = \sum_i \bar x_i z_i^\top`, etc., and
        :math:`\sigma_W = \sigma - \log n`. The margins are :math:`u_i = \sum_t s_{it}\Gamma_{it}`.
        A nonlinear head enters through its linearization at :math:`h_i = X_i^\top s_i`
        (:mod:`attnsvm.models.heads`): :math:`g_{it} = \nabla\psi(h_i)^\top x_{it}` in the formulas
        above and :math:`u_i = y_i\psi(h_i)`; its own parameters' gradients come from
        ``param_grads`` with the log-scale :math:`\max_i \log c_i`.
        """
        X, y = batch["X"], batch["y"]
        Xt = batch.get("Xt")                 # the tokens transposed, when the engine has them
        h = None
        top, e, S, s = softmax_parts(self.scores(params, batch))
        if self.head == "linear":
            Gam = None if self.train_v else batch.get("Gy")     # y g, when the engine has it
            if Gam is None:
                G = batch.get("G")
                if G is None or self.train_v:
                    G = self.head_values(params, X)
                Gam = y.unsqueeze(-1) * G
            u = torch.linalg.vecdot(s, Gam)
        else:                                # the head linearized at h_i (models.heads)
            h = token_sums(X, s, Xt)                                   # (B,n,d)
            psi, w = self.psi.linearize(params, h)
            Gam = y.unsqueeze(-1) * token_products(X, w)               # y_i w_i^T x_it
            u = y * psi
        nlc = loss.neg_log_neg_deriv(u).unsqueeze(-1)                  # -log(-l'(u)), (B,n,1)
        log_S = torch.log(S)
        Q, sig = jacobian_products(e, log_S, s, top, Gam, nlc, (-2, -1))
        if out is not None:
            out["log_s"] = e - log_S
        sig = sig - math.log(u.shape[-1])
        grads, scales = self.scoring.grads(params, token_sums(X, Q, Xt), batch, sig)
        if self.train_v:
            logc = -nlc.squeeze(-1) - math.log(u.shape[-1])
            sv = logc.amax(-1)
            cy = -torch.exp(logc - sv.unsqueeze(-1)) * y
            if h is None:
                h = token_sums(X, s, Xt)                           # (B,n,d)
            for name, g in self.psi.param_grads(params, h, cy).items():
                grads[name] = g
                scales[name] = sv
        return u, grads, scales

    def autograd_grad(self, params, batch, loss):
        r"""Autograd version of :meth:`grad`, the reference the tests compare with away from
        saturation (where it is exact) and show wrong at saturation: backpropagates
        :math:`\sum_{b,i} c_{bi} u_{bi}` with :math:`c = -e^{\log(-\ell'/n) - \sigma}` detached;
        trials are independent, so one backward pass gives every trial's gradient."""
        with torch.enable_grad():
            leaves = {k: (p.detach().requires_grad_(True) if k in self.trainable else p)
                      for k, p in params.items()}
            u, _ = self.forward(leaves, batch)
            coef, sig = grad_coefficients(loss, u.detach())
            gs = torch.autograd.grad((coef * u).sum(), [leaves[k] for k in self.trainable])
        return u.detach(), dict(zip(self.trainable, gs)), {k: sig for k in self.trainable}

    def in_span(self):
        r"""This classifier with ``W`` held in the coordinates of the queries' span
        (:class:`attnsvm.models.parameterizations.WSpanScores`): trainable ``B``, the fixed
        tensors of :func:`attnsvm.models.parameterizations.span_coordinates` among the
        parameters. For the ``W`` model with a fixed linear head only."""
        if self.param != "W" or self.head != "linear" or self.train_v:
            raise ValueError("the span coordinates apply to model='W' with a fixed linear head")
        net = copy.copy(self)
        net.scoring = WSpanScores()
        net.param_names = WSpanScores.names + SPAN_FIXED + self.psi.names
        net.trainable = WSpanScores.names
        return net

    def token_scores(self, params, batch):
        r""":math:`\gamma_{it} = y_i \psi(x_{it})` (B,n,T); the optimal token is its argmax."""
        return batch["y"].unsqueeze(-1) * self.head_values(params, batch["X"])
