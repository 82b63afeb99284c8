r"""The single-layer attention classifier: one score parameterization
(:mod:`attnsvm.models.parameterizations`) composed with one head (:mod:`attnsvm.models.heads`);
the forward pass and the hand-derived, cancellation-free gradient (see :mod:`attnsvm.models`).
"""
from __future__ import annotations

import math

import torch

from .._checks import check_choice, check_int
from ..losses import grad_coefficients
from ._init import _broadcast_init, _stack
from .heads import HEADS
from .parameterizations import PARAMETERIZATIONS, token_products, token_sums

__all__ = ["AttentionClassifier", "softmax_jacobian"]


#: exponents below this are flushed to 0 by :func:`_exp_small` (e^-700 ~ 1e-304)
EXP_FLUSH = -700.0
_E_FLUSH = math.exp(EXP_FLUSH)


def _exp_small(x):
    r""":math:`e^x`, with 0 for :math:`x \le` :data:`EXP_FLUSH` (to rounding). torch's ``exp`` takes a slow path
    for results that underflow (10-25 times slower per element), which at saturation is most of
    them; every term computed with this is added to, or weighed against, a term of order one
    (``1 + e^{gap}\sum\hat s``; :math:`g_{t^\star} + e^{\mathrm{gap}}\sum \hat s g`;
    the sequence weights :math:`e^{lw - \sigma}`, the largest being 1), where a term below
    1e-304 is below rounding."""
    return torch.nn.functional.threshold_(torch.exp(x.clamp(min=EXP_FLUSH)), _E_FLUSH, 0.0)


def _top_two(a, G):
    r"""The token loop of :func:`softmax_jacobian`: the top token :math:`t^\star`, its group
    :math:`U = \{t: g_t = g_{t^\star}\}`, :math:`\hat s` and its sums (each (..., 1) but
    ``sh`` and ``su`` (..., T)), the gap :math:`a_{(2)} - a_{t^\star}` (:math:`a_{(2)}` the largest
    score outside :math:`U`; 0 when there is none, then :math:`\hat s = 0`), :math:`g_{t^\star}`,
    and ``some`` (..., 1): whether a token lies outside :math:`U`."""
    a_top, top = a.max(-1, keepdim=True)
    G_top = G.gather(-1, top)
    tied = G == G_top                                       # U, the top token included
    am = a.masked_fill(tied, -math.inf)                     # the scores outside U
    a2 = am.amax(-1, keepdim=True)
    some = a2 > -math.inf
    a2 = torch.where(some, a2, a_top)
    x = torch.exp(a - torch.where(tied, a_top, a2))         # s_t/s_top on U, s_t/s_(2) outside
    sh = x.masked_fill(tied, 0.0)                           # s_t / s_(2); 0 on U
    su = x - sh                                             # s_t / s_top on U; 0 outside
    Ssh = sh.sum(-1, keepdim=True)
    shG = (sh * G).sum(-1, keepdim=True)
    return sh, su, top, Ssh, shG, a2 - a_top, G_top, a_top, some


def jacobian_scalars(gap, e_gap, Ssh, shG, G_top, EU=0.0):
    r"""The per-sequence log-space scalars of :func:`softmax_jacobian` (elementwise), from the
    gap :math:`a_{(2)} - a_{t^\star} \le 0`, :math:`e^{\mathrm{gap}}` and
    :math:`E_U = \sum_{t \in U \setminus t^\star} s_t/s_{t^\star}` (0 when no token ties with the top):
    :math:`\log s_{t^\star} = -\log(1 + E_U + e^{\mathrm{gap}}\sum_t\hat s_t)`,
    :math:`\lambda_2 = \mathrm{gap} + \log s_{t^\star}`, :math:`s_{t^\star}` and
    :math:`f = s_{t^\star}\big((1 + E_U) g_{t^\star} + e^{\mathrm{gap}}\sum_t \hat s_t g_t\big)`.
    With :math:`E_U = 0` each expression is the one without the group, to the last bit."""
    log_s_top = -torch.log1p(EU + e_gap * Ssh)
    lam2 = gap + log_s_top
    s_top = torch.exp(log_s_top)                   # >= 1/T
    f = s_top * ((1 + EU) * G_top + e_gap * shG)
    return log_s_top, lam2, s_top, f


def softmax_jacobian(a, G):
    r"""The softmax-Jacobian products of the linear head, cancellation-free, in one fused pass.

    For scores ``a`` and token values ``G`` (both (..., T)), with the top token
    :math:`t^\star` (largest score, first on ties), its group :math:`U = \{t : g_t = g_{t^\star}\}`
    (exact equality; :math:`t^\star \in U`), the largest score outside the group
    :math:`a_{(2)}`, :math:`\hat s_t = e^{a_t - a_{(2)}}` outside :math:`U` (:math:`\hat s_t := 0`
    on :math:`U`), :math:`E_U = \sum_{t \in U \setminus t^\star} e^{a_t - a_{t^\star}}` and
    :math:`E = E_U + e^{a_{(2)} - a_{t^\star}}\sum_t \hat s_t = \sum_{t \ne t^\star} e^{a_t - a_{t^\star}}`:

    .. math::

        \log s_{t^\star} = -\log(1 + E), \qquad
        \lambda_2 = \log s_{(2)} = a_{(2)} - a_{t^\star} - \log(1 + E), \qquad
        f = s_{t^\star} (1 + E_U) g_{t^\star} + e^{\lambda_2}\sum_t \hat s_t g_t,

        \rho_t = s_t\Big(g_{t^\star}\sum_\tau \hat s_\tau
        - \sum_\tau \hat s_\tau g_\tau\Big)\ \ (t \in U), \qquad
        \rho_t = \hat s_t (g_t - f)\ \ (t \notin U),

    so that :math:`\partial f / \partial a_t = s_t(g_t - f) = e^{\lambda_2}\rho_t` (see
    :meth:`AttentionClassifier.grad`): for :math:`t \in U`,
    :math:`s_t \sum_\tau s_\tau (g_t - g_\tau)` has no term from :math:`\tau \in U`. Only
    exponents :math:`\le 0` are exponentiated (no log-softmax of the full row): :math:`\hat s`
    and :math:`s_t/s_{t^\star}` are :math:`\le 1` and never overflow, however large the score
    gap, and the factor :math:`e^{\lambda_2}`, which underflows at gaps above ~745, stays in log
    space. The group matters where tokens tie exactly with the top one in :math:`g` (the
    equal-score instances): there the second largest probability overall would be the scale of
    terms that are exactly zero, and the informative ones, :math:`e^{\lambda_2}` smaller, would
    underflow against it (an NGD run on ch08's instances froze at :math:`\|W\| \approx 1190`
    that way). Without ties (:math:`U = \{t^\star\}`) every value is the one of the formulas
    without the group, to the last bit. With no token outside :math:`U`, :math:`\rho = 0`
    exactly and :math:`\lambda_2 = -\infty`.

    Returns
    -------
    rho : (..., T) (a fresh tensor the caller may overwrite)
    f : (...,)
    lam2, log_s_top : (...,)
        :math:`\lambda_2` and :math:`\log s_{t^\star}`.
    top : (..., 1) int
        :math:`t^\star`.
    a_top : (..., 1)
        :math:`a_{t^\star}`.
    """
    sh, su, top, Ssh, shG, gap, G_top, a_top, some = _top_two(a, G)
    EU = su.sum(-1, keepdim=True) - 1                        # exactly 0 when U = {t*}
    log_s_top, lam2, s_top, f = jacobian_scalars(gap, _exp_small(gap), Ssh, shG, G_top, EU)
    rho = sh.mul_(G - f)                                     # tokens outside U (sh is 0 on U)
    rho.add_(su * (s_top * (G_top * Ssh - shG)))             # U (su_top = 1: the top token)
    lam2 = torch.where(some, lam2, -math.inf)                # rho = 0: no scale of its own
    return rho, f.squeeze(-1), lam2.squeeze(-1), log_s_top.squeeze(-1), top, a_top


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
        A nonlinear head enters through its linearization at :math:`h_i = X_i^\top s_i`
        (:mod:`attnsvm.models.heads`): :math:`g_{it} = \nabla\psi(h_i)^\top x_{it}` in the formulas
        above and :math:`u_i = y_i\psi(h_i)`; its own parameters' gradients come from
        ``param_grads`` with the same log-scale as ``v``.
        """
        X, y = batch["X"], batch["y"]
        Xt = batch.get("Xt")                 # the tokens transposed, when the engine has them
        h = None
        W = self.matrix(params) if self.scoring.query else None
        a = self.scores(params, batch, W)
        if self.head == "linear":
            G = batch.get("G")
            if G is None or self.train_v:
                G = self.head_values(params, X)
        else:                                # the head linearized at h_i (models.heads)
            s = torch.exp(a - torch.logsumexp(a, dim=-1, keepdim=True))   # softmax (B,n,T)
            h = token_sums(X, s, Xt)                                   # (B,n,d)
            psi, w = self.psi.linearize(params, h)
            G = token_products(X, w)                                   # g~_it = w_i^T x_it
        rho, f, lam2, log_s_top, top, a_top = softmax_jacobian(a, G)
        u = y * (f if h is None else psi)
        logc = loss.log_neg_deriv(u) - math.log(u.shape[-1])   # (B,n)
        lw = logc + lam2
        sig = lw.amax(-1)
        sig = torch.where(sig > -math.inf, sig, 0.0)            # every rho = 0: a zero gradient
        coef = _exp_small(lw - sig.unsqueeze(-1)) * -y
        rho.mul_(coef.unsqueeze(-1))                            # q, in place
        xbar = token_sums(X, rho, Xt)                           # (B,n,d)
        grads, scales = self.scoring.grads(params, xbar, batch, sig)
        if self.train_v:
            sv = logc.amax(-1)
            cy = -torch.exp(logc - sv.unsqueeze(-1)) * y
            if h is None:
                s = torch.exp(a - (a_top - log_s_top.unsqueeze(-1)))    # softmax (B,n,T)
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

    def token_scores(self, params, batch):
        r""":math:`\gamma_{it} = y_i \psi(x_{it})` (B,n,T); the optimal token is its argmax."""
        return batch["y"].unsqueeze(-1) * self.head_values(params, batch["X"])
