"""A frozen copy of the engine's step as it was at attnsvm 74e9e46 (2026-11-28), before the lean
step of issue 36: the reference of ``benchmarks/step_speed.py`` (timed side by side with today's
step in one process) and of its op counts.

Verbatim copies of that commit's functions (models/attention.py: ``_exp_small``, ``_top_two``,
``jacobian_scalars``, ``softmax_jacobian``, ``AttentionClassifier.grad`` as :func:`grad`;
optim.py: ``log_norm``, ``_dir_normalized``, ``_log_norm_total``, ``_PolyakStep`` and
``Descent.update`` as :func:`descent_update`; train.py: ``_log_excess_logistic`` and the
step of ``_MarginTerms.step_terms`` / ``_Step.__call__`` for a full batch without penalty, as
:func:`frozen_step`). Only the names of the imports are adapted; the unchanged helpers
(scores, token sums, losses, the schedule) are imported from the library, as that commit did.
Do not edit: it is the measurement's baseline.
"""
# ruff: noqa
from __future__ import annotations

import math

import torch

from types import SimpleNamespace

from attnsvm._checks import check_positive
from attnsvm.losses import log_excess_loss, log_mean_loss
from attnsvm.optim import _bc, _dims, _dir_gradient, _log


def _sqnorm(g, batch_ndim):          # attnsvm.optim's at 74e9e46
    dims = _dims(g, batch_ndim)
    if not dims:
        return g * g
    return (g * g).sum(dim=dims)



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



# -- AttentionClassifier.grad at 74e9e46 (self -> net)
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


# -- optim.py at 74e9e46
#: where the plain float64 norm is trusted as it is: :math:`|\log\|g\|| < 300` (no square
#: overflowed, and the squares that underflowed, of entries below ~1.5e-154, weigh less than
#: 1e-40 of it)
_LOG_NORM_SAFE = 300.0


def log_norm(grads, batch_ndim=0):
    r"""Log of the global Frobenius norm :math:`\log\|g\|` of a list of tensors, per trial.

    Computed with a max-rescaling, so that it is finite for norms down to the smallest subnormal
    (:math:`\|g\|^2` itself would underflow below :math:`\sim 10^{-154}`) and up to the largest
    double. For float64 tensors on the CPU it is first computed plainly
    (:math:`\tfrac12\log\sum_j\|g_j\|^2`, one ``vector_norm``), which is kept when every
    trial's :math:`|\log\|g\||` is below 300 (the two agree to a few ulp there; a trial outside
    takes the rescaled value, the others keep theirs); other dtypes and devices (where the check
    would synchronize) always take the rescaled form.
    """
    plain = safe = None
    if grads[0].dtype == torch.float64 and grads[0].device.type == "cpu":
        if len(grads) == 1:
            dims = _dims(grads[0], batch_ndim)
            g = grads[0]
            plain = torch.log(torch.linalg.vector_norm(g, dim=dims) if dims else g.abs())
        else:
            plain = 0.5 * torch.log(sum(_sqnorm(g, batch_ndim) for g in grads))
        safe = plain.abs() < _LOG_NORM_SAFE
        if not torch.compiler.is_compiling() and bool(safe.all()):
            return plain          # (compiled: no host branch, the where below gives the same)
    mx = None
    for g in grads:
        dims = _dims(g, batch_ndim)
        a = g.abs().amax(dim=dims) if dims else g.abs()
        mx = a if mx is None else torch.maximum(mx, a)
    mx = torch.where(mx > 0, mx, torch.ones_like(mx))
    sq = sum(_sqnorm(g / _bc(mx, g), batch_ndim) for g in grads)
    rescaled = torch.log(mx) + 0.5 * torch.log(sq)
    return rescaled if plain is None else torch.where(safe, plain, rescaled)


#: above this log-multiplier, e^m overflows float64 (e^709.8): the gradient is rescaled first
_LOG_MULT_SAFE = 700.0


def _dir_normalized(grads, ctx):
    lg = _log_norm_total(grads, ctx)
    zero = ~torch.isfinite(lg)                      # zero gradient: no step
    out, mult = [], []
    for g, sc in zip(grads, ctx.log_scale):
        m = torch.where(zero, -math.inf, -lg if sc is None else sc - lg)
        # a gradient whose norm is below ~1e-304 (subnormal entries): e^m would overflow
        # although g e^m is part of a unit vector, so divide g by its largest entry there and
        # move that factor into m; elsewhere the divisor is exactly 1 (the step is unchanged)
        big = m > _LOG_MULT_SAFE
        if (m.device.type == "cpu" and not torch.compiler.is_compiling()
                and not bool(big.any())):
            out.append(g)                           # the divisor would be exactly 1 everywhere
            mult.append(m)
            continue
        dims = _dims(g, ctx.batch_ndim)
        mx = g.abs().amax(dim=dims) if dims else g.abs()
        mx = torch.where(big & (mx > 0), mx, torch.ones_like(mx))
        out.append(g / _bc(mx, g))
        mult.append(m + torch.log(mx))
    return out, mult


def _log_norm_total(grads, ctx):
    r""":math:`\log\|g\|` of the true gradients, :math:`\tfrac12\operatorname{logsumexp}_j
    2(\sigma_j + \log\|\tilde g_j\|)`, per trial."""
    scales = ctx.log_scale
    if all(sc is None for sc in scales) or len(grads) == 1:
        lg = log_norm(grads, ctx.batch_ndim)
        return lg if scales[0] is None else lg + scales[0]
    terms = [log_norm([g], ctx.batch_ndim) + (0.0 if sc is None else sc)
             for g, sc in zip(grads, scales)]
    return 0.5 * torch.logsumexp(2 * torch.stack(terms), dim=0)


# ----------------------------------------------------------------------------- step sizes
# A step size maps (grads, state, ctx) to ("value", eta_t) or ("log", log eta_t).
class _Schedule:
    def __init__(self, decay=0.0):
        self.decay = check_positive("decay", decay, allow_zero=True)

    def __call__(self, grads, state, ctx):
        return "value", schedule_value(ctx.lr, state["k"], self.decay)


def schedule_value(lr, t, decay):
    r""":math:`\eta_t = \eta\,(t+1)^{-a}` (``lr`` itself when ``decay`` is 0)."""
    return lr if decay == 0 else lr * (t + 1) ** (-decay)


class _PolyakStep:
    def __init__(self, star=False):
        self.star = star

    def __call__(self, grads, state, ctx):
        if ctx.log_loss is None:
            raise ValueError("the Polyak step needs log_loss")
        lg = _log_norm_total(grads, ctx)
        zero = ~torch.isfinite(lg)                      # zero gradient: no step
        log_eta = _log(ctx.lr) + ctx.log_loss - 2 * lg
        if torch.is_tensor(ctx.eta_max):              # one cap per trial: the clamp per trial
            log_eta = torch.minimum(log_eta, torch.log(ctx.eta_max))
        elif ctx.eta_max is not None:
            log_eta = torch.clamp(log_eta, max=math.log(ctx.eta_max))
        return "log", torch.where(zero, -math.inf, log_eta)



def descent_update(direction, step, grads, state, ctx):
    """``Descent.update`` at 74e9e46 (``self.direction``, ``self.step`` as arguments)."""
    d, lm = direction(grads, ctx)
    kind, eta = step(grads, state, ctx)
    state["k"] += 1
    out = []
    for dj, mj in zip(d, lm):
        if kind == "log":
            coef = -torch.exp(eta if mj is None else eta + mj)
        elif mj is None:
            if not torch.is_tensor(eta):
                out.append(-eta * dj)
                continue
            coef = -eta
        else:
            coef = -eta * torch.exp(mj)
        out.append(dj * _bc(coef, dj))
    return out


# -- models/parameterizations.py at 74e9e46 (the scores and the gradients from x-bar)
def _bilinear_scores(X, Z, W):
    r""":math:`a_{it} = x_{it}^\top (W z_i)`: ``W z`` first (one small product per trial), then
    one batched matrix-vector product per sequence, so ``X`` (B,...,T,d) is read once with no
    temporary of its size."""
    Wz = torch.matmul(Z, W.transpose(-1, -2))      # (B,...,d): rows W z_i
    return token_products(X, Wz)


def token_products(X, w):
    r""":math:`X_i w_i` for every sequence: ``X`` (..., T, d), ``w`` (..., d) -> (..., T), one
    batched matrix-vector product (``X`` read once, no (..., T, d) temporary)."""
    lead, (T, d) = X.shape[:-2], X.shape[-2:]
    return torch.bmm(X.reshape(-1, T, d), w.reshape(-1, d, 1)).view(lead + (T,))


def token_sums(X, q, Xt=None):
    r""":math:`\bar x_i = X_i^\top q_i`: ``X`` (..., T, d), ``q`` (..., T) -> (..., d), one
    batched product; ``Xt``, the tokens stored transposed (..., d, T), makes it the same
    contiguous matrix-vector product as :func:`token_products`."""
    lead, (T, d) = X.shape[:-2], X.shape[-2:]
    if Xt is not None:
        return torch.bmm(Xt.reshape(-1, d, T), q.reshape(-1, T, 1)).view(lead + (d,))
    return torch.bmm(q.reshape(-1, 1, T), X.reshape(-1, T, d)).view(lead + (d,))


def _grads_W(params, xbar, batch, sig):
    gW = torch.bmm(xbar.transpose(-1, -2), batch["Z"])
    return {"W": gW}, {"W": sig}


def _grads_KQ(params, xbar, batch, sig):
    gW = torch.bmm(xbar.transpose(-1, -2), batch["Z"])
    return ({"K": gW @ params["Q"], "Q": gW.transpose(-1, -2) @ params["K"]},
            {"K": sig, "Q": sig})


def _scores_prompt(params, batch, W=None):
    X, p = batch["X"], params["p"]
    B, n, T, d = X.shape
    return torch.bmm(X.reshape(B, n * T, d), p.reshape(B, d, 1)).view(B, n, T)


def _grads_prompt(params, xbar, batch, sig):
    return {"p": xbar.sum(-2)}, {"p": sig}


class FrozenNet:
    """The attention classifier of 74e9e46 for the fixed linear head: the frozen scores, the
    frozen gradient (:func:`grad`) and the frozen gradients from x-bar; the rest (the matrix
    ``K Q^T``, the head) delegated to the library's object ``net``."""

    def __init__(self, net):
        self.net, self.param = net, net.param
        self.head, self.train_v, self.psi = net.head, net.train_v, net.psi
        self.trainable = net.trainable
        self.scoring = self
        self.query = net.param != "prompt"
        self.grads = {"W": _grads_W, "KQ": _grads_KQ, "prompt": _grads_prompt}[net.param]

    def matrix(self, params):
        return params["W"] if self.param == "W" else (
            params["K"] @ params["Q"].transpose(-1, -2) if self.param == "KQ" else params["p"])

    def scores(self, params, batch, W=None):
        if self.param == "prompt":
            return _scores_prompt(params, batch)
        return _bilinear_scores(batch["X"], batch["Z"], self.matrix(params) if W is None else W)

    def head_values(self, params, X):
        return self.net.head_values(params, X)


# -- train.py at 74e9e46
def _log_excess_logistic(a, G):
    r""":math:`\log(\mathcal{L} - \mathcal{L}^\star)` of the logistic risk with fixed token scores
    ``G`` (B,n,T) (:math:`\gamma_{it} = y_i\psi(x_{it})`) at attention scores ``a`` (B,n,T),
    :math:`\mathcal{L}^\star = \frac1n\sum_i \ell(\gamma^\star_i)`,
    :math:`\gamma^\star_i = \max_t G_{it}`. Per sequence
    :math:`\delta_i = \sum_t s_{it}(\gamma^\star_i - G_{it})` is summed in log space and
    :math:`\ell(\gamma^\star - \delta) - \ell(\gamma^\star) = \log(1 + \sigma(-\gamma^\star)
    (e^\delta - 1))` (:func:`attnsvm.losses.log_excess_loss`), shape (B,)."""
    gs = G.max(-1, keepdim=True).values
    D = gs - G
    log_gap = torch.where(D > 0, torch.log(torch.where(D > 0, D, 1.0)), -torch.inf)
    return log_excess_loss(torch.log_softmax(a, -1), log_gap, gs[..., 0])


def frozen_step(net, rule, lr, params, batch, loss, state, eta_max=None):
    """One step of ``_Step.__call__`` on ``_MarginTerms.step_terms`` at 74e9e46, for a full
    batch without penalty and the rules "gd", "ngd", "polyak", "polyak_star" (without
    ``L_star``): ``(new parameters, margins)``. ``net`` a :class:`FrozenNet`, ``state`` the
    rule's state (``{"k": 0}``)."""
    want_log_loss = rule in ("polyak", "polyak_star")
    u, grads, sigma = grad(net, params, batch, loss)
    log_loss = log_mean_loss(loss, u) if want_log_loss else None
    if rule == "polyak_star":
        log_loss = _log_excess_logistic(net.scores(params, batch),
                                        batch["G"] * batch["y"][..., None])
    names = net.trainable
    ctx = SimpleNamespace(lr=lr, log_scale=[sigma[n] for n in names], log_loss=log_loss,
                          eta_max=eta_max, batch_ndim=1, params=[params[n] for n in names])
    direction = _dir_normalized if rule == "ngd" else _dir_gradient
    step = _PolyakStep(rule == "polyak_star") if want_log_loss else _Schedule()
    deltas = descent_update(direction, step, [grads[n] for n in names], state, ctx)
    new = dict(params)
    for n, dl in zip(names, deltas):
        new[n] = params[n] + dl
    return new, u
