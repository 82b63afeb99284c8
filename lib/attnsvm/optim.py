r"""Step rules, defined once: a registry of small units used by the batched engine
(:func:`attnsvm.train.fit`) and by thin ``torch.optim`` wrappers (:func:`make_optimizer` builds the
stochastic optimizers of Part III, :data:`STOCHASTIC`).

A step rule maps gradients to parameter increments :math:`\Delta` (``param += Delta``).
Gradients are passed in *log-scaled* form: the true gradient of parameter :math:`j` is
:math:`e^{\sigma_j} \tilde g_j`, with one log-scale :math:`\sigma_j` per trial (``None`` means
:math:`\sigma = 0`). This lets the engine run at losses far below the smallest float:
normalized rules never need :math:`e^{\sigma}`, and the Polyak step is computed from logarithms.

The units
---------
Every rule is an object with ``init_state(params) -> dict`` and
``update(grads, state, ctx) -> list of increments`` (:class:`Rule`); ``ctx`` is a
:class:`Context` (base step size, log-scales, log-loss, Polyak cap, number of trial axes, the
current parameters). Most rules are one :class:`Descent`: a *direction* unit times a *step
size* unit, :math:`\Delta_j = -\eta_t\, d_j`:

directions (:data:`DIRECTIONS`)
    ``gradient`` :math:`d_j = g_j`; ``normalized`` :math:`d_j = g_j/\|g\|` with
    :math:`\|g\|^2 = \sum_j \|g_j\|_F^2` (global norm over the trial's parameters);
    ``normalized_param`` :math:`d_j = g_j/\|g_j\|_F`; ``sign`` :math:`d_j = \mathrm{sign}(g_j)`;
    ``steepest(norm)`` :math:`d_j = \arg\max_{\|d\|\le 1}\langle g_j, d\rangle`
    (:func:`steepest_direction`, each parameter in its own norm).
step sizes (:data:`STEP_SIZES`)
    ``schedule(decay)`` :math:`\eta_t = \eta\,(t+1)^{-a}` (``decay`` :math:`a \ge 0`; ``t`` counts
    the updates from 0); ``polyak(star)`` :math:`\eta_t = \min(\eta\, L / \|g\|^2,\ \eta_{\max})`,
    computed as :math:`\log \eta_t = \log\eta + \log L - 2\sigma - 2\log\|\tilde g\|` (so
    :math:`\eta = 1` is the classical Polyak step; it stays finite when
    :math:`L \approx 10^{-300}`); with ``star`` the caller passes :math:`\log(L - L^\star)`.

The rules (:data:`RULES`; ``lr`` = :math:`\eta`)
-------------------------------------------------
* ``"gd"`` = gradient x schedule; ``"ngd"`` = normalized x schedule; ``"ngd_param"`` =
  normalized_param x schedule; ``"sign"`` = sign x schedule; ``"sd"`` = steepest(``norm``) x
  schedule (``norm`` 2 is normalized GD per parameter, ``inf`` sign descent, ``1`` greedy
  coordinate descent, a real ``p``, or ``"spectral"``: :math:`UV^\top` from the SVD);
  ``"polyak"`` = gradient x polyak; ``"polyak_star"`` = gradient x polyak(star).
* ``"md"``: mirror descent with potential :math:`\psi(w) = \frac1p\|w\|_p^p` (entrywise,
  :math:`\nabla\psi(w) = \mathrm{sign}(w)|w|^{p-1}`, ``p > 1``, :func:`mirror_map`):
  :math:`\nabla\psi(w_{t+1}) = \nabla\psi(w_t) - \eta_t g`; with ``normalize=True`` the
  gradient is divided by its dual norm :math:`\|g\|_{p/(p-1)}` (:func:`attnsvm.norms.dual_norm`). The dual
  iterate :math:`\theta = \nabla\psi(w)` is the rule's state.
* ``"prgd"``: progressive norm rescaling (the book's variant): phase ``k`` starts at step
  :math:`k P` (``period`` :math:`P`) by rescaling :math:`w \leftarrow R_k w/\|w\|_2`,
  :math:`R_k = R_0 c^k` (``R0``, ``growth`` :math:`c`), and takes :math:`P` normalized gradient
  steps of length :math:`\eta_t R_k^{\beta}` (``step_power`` :math:`\beta`, default 1/2) from
  there. The schedule of Wang, Min and Wu could not be read; :math:`\beta = 1/2` is our choice
  (with :math:`\beta = 0` the angular steps :math:`\eta/R_k` vanish too fast, with
  :math:`\beta = 1` they do not shrink and the margin oscillates). Each parameter is rescaled
  by its own norm.
* ``"adam"``: Adam (Kingma & Ba) with bias correction and the step schedule:
  :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`, :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
  :math:`\Delta = -\eta_t \hat m/(\sqrt{\hat v} + \epsilon)`, :math:`\hat m = m/(1-\beta_1^t)`,
  :math:`\hat v = v/(1-\beta_2^t)`. The moments are held in the log-scaled form of the
  gradients (:math:`m = e^{s}\tilde m`, :math:`v = e^{2s}\tilde v`), so ``eps=0`` (Adam without
  its stability constant) is exact at any loss; with ``decay=0`` and ``eps > 0`` it is
  :class:`torch.optim.Adam` without weight decay (up to float rounding).

In batched mode (``batch_ndim=1``) every norm is taken per trial over the non-batch axes,
never across trials. ``lr`` may be a float or a tensor of per-trial step sizes (B,), and so
may the Polyak cap ``eta_max`` (the clamp is then taken per trial).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ._checks import check_choice, check_int, check_positive
from .norms import dual_norm, parse_norm

__all__ = ["RULES", "DIRECTIONS", "STEP_SIZES", "Context", "Rule", "Descent", "MirrorDescent",
           "PRGD", "AdamRule", "PerTrial", "make_rule", "update", "init_state", "log_norm", "unit_scaled",
           "steepest_direction", "mirror_map",
           "NGD", "Polyak", "SignGD", "Adam", "settings_config", "STOCHASTIC", "make_optimizer",
           "Optimizer", "OPTIMIZERS"]


# ----------------------------------------------------------------------------- helpers
def _bc(x, g):
    """Reshape per-trial scalars ``x`` (B,) (or a 0-d tensor / float) to broadcast against ``g``."""
    if not torch.is_tensor(x) or x.ndim == 0:
        return x
    return x.reshape(x.shape + (1,) * (g.ndim - x.ndim))


def _dims(g, batch_ndim):
    return tuple(range(batch_ndim, g.ndim))


def _log(x):
    return torch.log(x) if torch.is_tensor(x) else math.log(x)


#: where the plain float64 norm is trusted as it is: :math:`|\log\|g\|| < 300` (no square
#: overflowed, and the squares that underflowed, of entries below ~1.5e-154, weigh less than
#: 1e-40 of it)
_LOG_NORM_SAFE = 300.0


def log_norm(grads, batch_ndim=0):
    r"""Log of the global Frobenius norm :math:`\log\|g\|` of a list of tensors, per trial.

    Finite for norms down to the smallest subnormal (:math:`\|g\|^2` itself would underflow
    below :math:`\sim 10^{-154}`) and up to the largest double: the plain norm
    (:func:`_plain_norm`, float64 on the CPU) where it is exact, per trial, else
    :math:`\log M + \log n_2` of :func:`unit_scaled` (other dtypes and devices always: no host
    check). The one computation of the norm behind every normalized and Polyak step.
    """
    plain = _plain_norm(grads, batch_ndim)
    if plain is not None and plain[1] is True:
        return torch.log(plain[0])
    _, mx, n2 = unit_scaled(grads, batch_ndim)
    lg = torch.log(mx) + torch.log(n2)
    return lg if plain is None else torch.where(plain[1], torch.log(plain[0]), lg)


def unit_scaled(grads, batch_ndim=0):
    r"""The gradients divided by their largest entry, and the norm of the result, per trial:
    ``(gs, mx, n2)`` with :math:`M = \max_j \|g_j\|_\infty` (raised to the smallest positive
    float, so a zero gradient gives ``gs = 0``), ``gs[j]`` :math:`= g_j/M` and
    :math:`n_2 = \|(g_j/M)_j\|` (global Frobenius norm), so :math:`\|g\| = M n_2` and
    :math:`g/\|g\| = \mathrm{gs}/n_2` at any scale, from subnormal gradients to the largest
    double, with no host synchronization (every step of the normalized and Polyak rules of a
    run with one log-scale). :math:`n_2 \ge 1` unless the gradient is 0 (its largest entry of
    ``gs`` is exactly :math:`\pm 1`)."""
    mx = None
    for g in grads:
        dims = _dims(g, batch_ndim)
        a = g.abs().amax(dim=dims) if dims else g.abs()
        mx = a if mx is None else torch.maximum(mx, a)
    fi = torch.finfo(mx.dtype)
    mx = mx.clamp(min=fi.tiny * fi.eps)               # the smallest positive (subnormal) float
    gs = [g / _bc(mx, g) for g in grads]
    n2 = None
    for g in gs:
        dims = _dims(g, batch_ndim)
        nj = torch.linalg.vector_norm(g, dim=dims) if dims else g.abs()
        n2 = nj if n2 is None else torch.hypot(n2, nj)
    return gs, mx, n2


#: the plain float64 norm is exact where it lies in [e^-300, e^300] (see :data:`_LOG_NORM_SAFE`)
_PLAIN_LO, _PLAIN_HI = math.exp(-_LOG_NORM_SAFE), math.exp(_LOG_NORM_SAFE)


def _plain_norm(grads, batch_ndim):
    r"""The plain global norm :math:`\|g\|` per trial and where it is exact: ``(n, True)``
    when it is for every trial, ``(n, ok)`` (a (B,) bool tensor) when not (the caller takes
    :func:`unit_scaled` for the others, so that a trial's step never depends on the others'),
    None off float64 on the CPU (other devices take :func:`unit_scaled`, the same values to
    rounding). One host check on the CPU, free there (no device to wait for); under
    ``torch.compile`` none: ``(n, ok)`` always, the same values bit for bit. Exact where it
    lies in :math:`[e^{-300}, e^{300}]` (:data:`_LOG_NORM_SAFE`); a zero or non-finite gradient
    is not."""
    g0 = grads[0]
    if g0.dtype != torch.float64 or g0.device.type != "cpu":
        return None
    n = None
    for g in grads:
        dims = _dims(g, batch_ndim)
        nj = torch.linalg.vector_norm(g, dim=dims) if dims else g.abs()
        n = nj if n is None else torch.hypot(n, nj)
    c = n.clamp(_PLAIN_LO, _PLAIN_HI)
    if torch.compiler.is_compiling():      # no host branch: both forms, selected per trial
        return n, c == n
    return (n, True) if torch.equal(c, n) else (n, c == n)     # equal: False with a NaN


def steepest_direction(g, norm, batch_ndim=1):
    r"""The unit steepest direction :math:`d = \arg\max_{\|d\|\le 1}\langle g, d\rangle`.

    ``norm`` 2: :math:`g/\|g\|_2`; ``inf``: :math:`\mathrm{sign}(g)`; ``1``: :math:`\pm e_k` at the
    largest :math:`|g_k|` (first on ties); real ``p``: :math:`\mathrm{sign}(g)|g|^{q-1}/
    \|g\|_q^{q-1}` with :math:`q = p/(p-1)`; ``"spectral"``: :math:`UV^\top` (thin SVD of
    :math:`g`, matrices only). Zero gradients give zero directions. Then
    :math:`\langle g, d\rangle = \|g\|_*` (:func:`attnsvm.norms.dual_norm`) and :math:`\|d\| = 1`.
    """
    norm = parse_norm(norm)
    dims = _dims(g, batch_ndim)
    if norm == "spectral":
        if g.ndim - batch_ndim != 2:
            raise ValueError("norm='spectral' needs matrix parameters")
        U, S, Vh = torch.linalg.svd(g, full_matrices=False)
        keep = (S > S[..., :1] * 1e-12).to(g.dtype)
        return (U * keep.unsqueeze(-2)) @ Vh
    if norm == math.inf:
        return torch.sign(g)
    if norm == 1:
        flat = g.reshape(g.shape[:batch_ndim] + (-1,))
        k = flat.abs().argmax(-1, keepdim=True)
        d = torch.zeros_like(flat).scatter_(-1, k, torch.sign(flat.gather(-1, k)))
        return d.reshape(g.shape)
    q = norm / (norm - 1)
    scale = g.abs().amax(dim=dims, keepdim=True)
    gs = g / torch.where(scale > 0, scale, 1.0)
    a = torch.sign(gs) * gs.abs() ** (q - 1)
    nq = torch.linalg.vector_norm(gs, ord=q, dim=dims, keepdim=True) ** (q - 1)
    return a / torch.where(nq > 0, nq, 1.0)


def mirror_map(w, p, inverse=False):
    r""":math:`\nabla\psi(w) = \mathrm{sign}(w)|w|^{p-1}` (or its inverse, exponent
    :math:`1/(p-1)`), entrywise."""
    e = 1.0 / (p - 1) if inverse else p - 1
    return torch.sign(w) * w.abs() ** e


# ----------------------------------------------------------------------------- context
@dataclass
class Context:
    r"""What a rule may read at one step.

    Attributes
    ----------
    lr : float or Tensor (B,)
        Base step size :math:`\eta`.
    log_scale : list of (None or Tensor (B,))
        :math:`\sigma_j`, one per gradient.
    log_loss : Tensor (B,) or None
        :math:`\log L` (or :math:`\log(L - L^\star)`), for the Polyak step.
    eta_max : float, Tensor (B,) or None
        Cap on the Polyak step (a tensor: one cap per trial).
    batch_ndim : int
        Number of leading trial axes.
    params : list of Tensor or None
        The current parameters (``"md"`` at init, ``"prgd"`` each step).
    """

    lr: object
    log_scale: list
    log_loss: object = None
    eta_max: object = None
    batch_ndim: int = 0
    params: list | None = None


def _true(g, sc):
    return g if sc is None else g * _bc(torch.exp(sc), g)


# ----------------------------------------------------------------------------- directions
# A direction maps (grads, ctx) to (d, log_mult): the direction of parameter j is
# d[j] * exp(log_mult[j]) (log_mult[j] None: 1).
def _dir_gradient(grads, ctx):
    return grads, list(ctx.log_scale)


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


def _dir_normalized_param(grads, ctx):
    out = []
    for g in grads:
        dims = _dims(g, ctx.batch_ndim)
        nrm = torch.linalg.vector_norm(g, dim=dims) if dims else g.abs()
        nrm = torch.where(nrm > 0, nrm, 1.0)              # zero gradient: no step
        out.append(g * _bc(nrm.reciprocal(), g))
    return out, [None] * len(grads)


def _dir_sign(grads, ctx):
    return [torch.sign(g) for g in grads], [None] * len(grads)


def _dir_steepest(norm):
    norm = parse_norm(norm)

    def direction(grads, ctx):
        return ([steepest_direction(g, norm, ctx.batch_ndim) for g in grads], [None] * len(grads))
    direction.norm = norm
    return direction


DIRECTIONS = {"gradient": lambda: _dir_gradient, "normalized": lambda: _dir_normalized,
              "normalized_param": lambda: _dir_normalized_param, "sign": lambda: _dir_sign,
              "steepest": _dir_steepest}


def _one_scale(scales):
    """Whether every gradient has the same log-scale (the same tensor, or all None)."""
    return all(sc is scales[0] for sc in scales)


def _log_norm_total(grads, ctx):
    r""":math:`\log\|g\|` of the true gradients, :math:`\tfrac12\operatorname{logsumexp}_j
    2(\sigma_j + \log\|\tilde g_j\|)`, per trial."""
    scales = ctx.log_scale
    if _one_scale(scales):
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
        log_eta = torch.add(ctx.log_loss, lg, alpha=-2.0) + _log(ctx.lr)
        # a zero gradient (lg = -inf: +inf here) or a NaN: no step (-inf), before the cap
        log_eta = torch.nan_to_num(log_eta, nan=-math.inf, posinf=-math.inf)
        if torch.is_tensor(ctx.eta_max):              # one cap per trial: the clamp per trial
            log_eta = torch.minimum(log_eta, torch.log(ctx.eta_max))
        elif ctx.eta_max is not None:
            log_eta = torch.clamp(log_eta, max=math.log(ctx.eta_max))
        return "log", log_eta


STEP_SIZES = {"schedule": _Schedule, "polyak": _PolyakStep}


# ----------------------------------------------------------------------------- rules
class Rule:
    """A step rule: ``init_state(params)`` and ``update(grads, state, ctx)`` (increments).

    ``state["k"]`` counts the updates applied (the ``t`` of the step schedule)."""

    name = ""
    needs_log_loss = False

    def init_state(self, params):
        return {"k": 0}

    def update(self, grads, state, ctx):
        raise NotImplementedError

    def apply(self, params, grads, state, ctx):
        """The new parameters ``params + update(...)`` (a rule may fuse the two)."""
        return [p + dl for p, dl in zip(params, self.update(grads, state, ctx))]


class Descent(Rule):
    r""":math:`\Delta_j = -\eta_t\, d_j`: a direction unit times a step-size unit.

    :meth:`apply` adds the increments with one fused op per parameter (``addcmul``,
    ``addcdiv``). Where every gradient has the same log-scale (a model's parameters share it),
    the normalized direction needs none of it: :math:`g/\|g\|` with the plain norm where it
    is exact (:func:`_plain_norm`, float64 on the CPU), else :math:`\mathrm{gs}/\max(n_2, 1)`
    of :func:`unit_scaled` (exact at any scale, no host synchronization: the CUDA and compiled
    paths); the Polyak step takes its norm from there too."""

    def __init__(self, name, direction, step):
        self.name, self.direction, self.step = name, direction, step
        self.needs_log_loss = isinstance(step, _PolyakStep)

    def _plan(self, grads, state, ctx):
        """Per parameter ``(d, c, v, op)``: the increment is ``v * d * c`` (``op`` "mul") or
        ``v * d / c`` ("div"), ``c`` a per-trial tensor or None (``v * d``), ``v`` a float."""
        scales = ctx.log_scale
        if self.direction is _dir_normalized and isinstance(self.step, _Schedule) \
                and _one_scale(scales):
            _, eta = self.step(grads, state, ctx)
            state["k"] += 1
            plain = _plain_norm(grads, ctx.batch_ndim)
            if plain is not None and plain[1] is True:
                div = plain[0]
            else:
                gs, _, n2 = unit_scaled(grads, ctx.batch_ndim)
                div = n2.clamp(min=1.0)                # n2 >= 1 but for a zero gradient
                if plain is not None:                  # the trials where the plain norm is exact
                    ok = plain[1]
                    gs = [torch.where(_bc(ok, g), g, d) for g, d in zip(grads, gs)]
                    div = torch.where(ok, plain[0], div)
                grads = gs
            if torch.is_tensor(eta):
                div, eta = div / eta, 1.0
            return [(d, div, -eta, "div") for d in grads]
        d, lm = self.direction(grads, ctx)
        kind, eta = self.step(grads, state, ctx)
        state["k"] += 1
        out, seen = [], {}                # parameters sharing a log-scale share its factor
        for dj, mj in zip(d, lm):
            if id(mj) not in seen:
                if kind == "log":
                    c, v = torch.exp(eta if mj is None else eta + mj), -1.0
                elif torch.is_tensor(eta):
                    c, v = (eta if mj is None else eta * torch.exp(mj)), -1.0
                else:
                    c, v = (None if mj is None else torch.exp(mj)), -eta
                seen[id(mj)] = (c, v)
            out.append((dj,) + seen[id(mj)] + ("mul",))
        return out

    def update(self, grads, state, ctx):
        out = []
        for d, c, v, op in self._plan(grads, state, ctx):
            if c is None:
                out.append(v * d)
            else:
                out.append(v * d * _bc(c, d) if op == "mul" else v * d / _bc(c, d))
        return out

    def apply(self, params, grads, state, ctx):
        out = []
        for p, (d, c, v, op) in zip(params, self._plan(grads, state, ctx)):
            if c is None:
                out.append(p.add(d, alpha=v))
            elif op == "mul":
                out.append(torch.addcmul(p, d, _bc(c, d), value=v))
            else:
                out.append(torch.addcdiv(p, d, _bc(c, d), value=v))
        return out


class MirrorDescent(Rule):
    r"""Mirror descent with :math:`\psi = \frac1p\|w\|_p^p` (state: the dual iterate)."""

    name = "md"

    def __init__(self, p, normalize=False, decay=0.0):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 1 or not math.isfinite(p):
            raise ValueError(f"p must be a real number > 1 for optimizer='md', got {p!r}")
        self.p, self.normalize = float(p), bool(normalize)
        self.sched = _Schedule(decay)

    def init_state(self, params):
        if params is None:
            raise ValueError("mirror descent needs the initial parameters (init_state(params))")
        return {"k": 0, "theta": [mirror_map(w, self.p) for w in params]}

    def update(self, grads, state, ctx):
        if ctx.params is None:
            raise ValueError("mirror descent needs the current parameters (params=)")
        _, eta = self.sched(grads, state, ctx)
        state["k"] += 1
        out = []
        for j, (g, sc, w) in enumerate(zip(grads, ctx.log_scale, ctx.params)):
            if self.normalize:            # g / ||g||_{p/(p-1)}: scale-free, sigma not needed
                step = g / _bc(dual_norm(g, self.p, ctx.batch_ndim), g).clamp_min(1e-300)
            else:
                step = _true(g, sc)
            theta = state["theta"][j] - _bc(eta, g) * step
            state["theta"][j] = theta
            out.append(mirror_map(theta, self.p, inverse=True) - w)
        return out


class PRGD(Rule):
    r"""Progressive norm rescaling (see the module docstring)."""

    name = "prgd"

    def __init__(self, period=100, growth=2.0, R0=1.0, step_power=0.5, decay=0.0):
        self.period = check_int("period", period, minimum=1)
        self.growth = check_positive("growth", growth)
        self.R0 = check_positive("R0", R0)
        self.step_power = check_positive("step_power", step_power, allow_zero=True)
        self.sched = _Schedule(decay)

    def update(self, grads, state, ctx):
        if ctx.params is None:
            raise ValueError("PRGD needs the current parameters (params=)")
        t = state["k"]
        _, eta = self.sched(grads, state, ctx)
        state["k"] += 1
        Rk = self.R0 * self.growth ** (t // self.period)
        out = []
        for g, w0 in zip(grads, ctx.params):
            w = w0
            if t % self.period == 0:
                nrm = torch.linalg.vector_norm(w, dim=_dims(w, ctx.batch_ndim))
                w = torch.where(_bc(nrm, w) > 0, w * _bc(Rk / nrm.clamp_min(1e-300), w), w)
            w = w - _bc(eta, g) * Rk ** self.step_power * steepest_direction(g, 2, ctx.batch_ndim)
            out.append(w - w0)
        return out


class AdamRule(Rule):
    r"""Adam with bias correction, a step schedule and moments in log-scaled form."""

    name = "adam"

    def __init__(self, betas=(0.9, 0.999), eps=1e-8, decay=0.0):
        betas = tuple(betas)
        if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.betas = betas
        self.eps = check_positive("eps", eps, allow_zero=True)
        self.sched = _Schedule(decay)

    def init_state(self, params):
        return {"k": 0, "t": 0, "m": [torch.zeros_like(p) for p in params],
                "v": [torch.zeros_like(p) for p in params], "s": [None] * len(params)}

    def update(self, grads, state, ctx):
        b1, b2 = self.betas
        _, eta = self.sched(grads, {"k": state["t"]}, ctx)
        state["t"] += 1
        state["k"] = state.get("k", 0) + 1
        t = state["t"]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        s_old = state.setdefault("s", [None] * len(grads))
        out = []
        for j, (g, sc) in enumerate(zip(grads, ctx.log_scale)):
            m, v = state["m"][j], state["v"][j]
            if sc is not None and s_old[j] is not None:   # old moments to the new scale e^sc
                # a zero gradient may come with the scale finfo.min (no token outside a tie
                # group, attnsvm.models.attention.jacobian_products): keep the old scale there
                sc = torch.where(sc > torch.finfo(sc.dtype).min, sc, s_old[j])
                r = _bc(torch.exp(s_old[j] - sc), g)             # log-scales are finite
                m = b1 * m * r + (1 - b1) * g
                v = b2 * v * r * r + (1 - b2) * g * g
            else:
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * g * g
            state["m"][j], state["v"][j] = m, v
            s_old[j] = None if sc is None else sc.clone()
            den = torch.sqrt(v / bc2)
            if self.eps > 0:
                den = den + (self.eps if sc is None
                             else self.eps * _bc(torch.exp(-sc).clamp(max=1e300), g))
            out.append(-_bc(eta, g) * (m / bc1) / torch.where(den > 0, den, 1.0))
        return out


class PerTrial(Rule):
    r"""Several rules in one batch: trial :math:`b` takes the step of ``rules[names[b]]``.

    Each rule runs on the sub-batch of its own trials, so a trial's step is the step it would
    take in a batch of that rule alone: the rules are per trial (every norm, step size and cap
    is taken per trial), so it equals one run per rule up to rounding. A rule whose trials are
    one contiguous range (the tiled trials of :func:`attnsvm.runs.fit_rules`) reads views of the
    batch, and the rules' outputs are concatenated; other layouts are gathered and scattered
    back. The context's per-trial values (``lr``, ``eta_max``, ``log_loss``, the log-scales)
    are sliced alike; ``log_loss`` holds, per trial, what that trial's rule needs
    (:math:`\log L` or :math:`\log(L - L^\star)`). A step size or cap that is one number on a
    rule's trials reaches that rule as a float, as in a run of its own.

    Parameters
    ----------
    rules : dict name -> Rule
    names : sequence of str (B,)
        The rule of each trial (every name a key of ``rules``).
    """

    name = "per_trial"

    def __init__(self, rules, names):
        self.rules = dict(rules)
        self.names = tuple(names)
        unknown = sorted(set(self.names) - set(self.rules))
        if unknown:
            raise ValueError(f"no rule given for {unknown}")
        index = {k: [b for b, nm in enumerate(self.names) if nm == k] for k in self.rules}
        self.index = {k: v for k, v in index.items() if v}
        self.needs_log_loss = any(r.needs_log_loss for r in self.rules.values())
        # a rule's trials as a slice where they are one contiguous range; in the order of
        # their first trial, the rules' outputs concatenate to the batch when all are
        self.order = sorted(self.index, key=lambda k: self.index[k][0])
        self.blocks = all(v == list(range(v[0], v[-1] + 1)) for v in self.index.values())
        self._sel = {}                     # (name, device) -> slice or index tensor
        self._uniform = {}                 # (name, cap) -> (the tensor read, its value per rule)

    def _select(self, name, device):
        key = (name, str(device))
        if key not in self._sel:
            v = self.index[name]
            self._sel[key] = (slice(v[0], v[-1] + 1) if self.blocks else
                              torch.as_tensor(v, dtype=torch.long, device=device))
        return self._sel[key]

    @staticmethod
    def _take(x, sel):
        if not torch.is_tensor(x) or x.ndim == 0:
            return x
        return x[sel] if isinstance(sel, slice) else x.index_select(0, sel)

    def _per_rule(self, name, value, sel, cap=False):
        """``value`` (``lr`` or ``eta_max``) for the trials of rule ``name``: a float where it is
        one number on them (the rule then runs exactly as in a batch of its own, float step,
        float cap; no cap for a cap of inf), else the slice. Read on the host once per tensor
        (the engine passes the same tensors at every step)."""
        if not torch.is_tensor(value) or value.ndim == 0:
            return value
        key = (name, cap)
        hit = self._uniform.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        sub = self._take(value, sel)
        vals = sub.unique()
        out = sub
        if vals.numel() == 1:
            out = float(vals[0])
            if cap and math.isinf(out):
                out = None
        self._uniform[key] = (value, out)
        return out

    def _sub(self, name, ctx, sel, params):
        take = self._take
        return Context(lr=self._per_rule(name, ctx.lr, sel),
                       log_scale=[take(sc, sel) for sc in ctx.log_scale],
                       log_loss=take(ctx.log_loss, sel),
                       eta_max=self._per_rule(name, ctx.eta_max, sel, cap=True),
                       batch_ndim=ctx.batch_ndim,
                       params=None if params is None else [take(p, sel) for p in params])

    def init_state(self, params):
        if params is None:
            return {"k": 0, "rules": {k: self.rules[k].init_state(None) for k in self.order}}
        dev = params[0].device
        return {"k": 0, "rules": {k: self.rules[k].init_state(
            [self._take(p, self._select(k, dev)) for p in params]) for k in self.order}}

    def _each(self, grads, state, ctx, params):
        """``(selector, new values)`` per rule, in :attr:`order`: its increments, or its new
        parameters when ``params`` is given."""
        dev = grads[0].device
        state["k"] += 1
        for k in self.order:
            sel = self._select(k, dev)
            sub = self._sub(k, ctx, sel, ctx.params if params is None else params)
            g = [self._take(x, sel) for x in grads]
            st = state["rules"][k]
            rule = self.rules[k]
            yield sel, (rule.update(g, st, sub) if params is None
                        else rule.apply(sub.params, g, st, sub))

    def _join(self, like, parts):
        if self.blocks:
            return [torch.cat([vals[j] for _, vals in parts]) for j in range(len(like))]
        out = []
        for j, x in enumerate(like):
            full = torch.empty_like(x)
            for sel, vals in parts:
                full.index_copy_(0, sel, vals[j])
            out.append(full)
        return out

    def update(self, grads, state, ctx):
        return self._join(grads, list(self._each(grads, state, ctx, None)))

    def apply(self, params, grads, state, ctx):
        return self._join(params, list(self._each(grads, state, ctx, list(params))))


def _descent(name, direction, step="schedule"):
    def make(decay=0.0, **_):
        st = _PolyakStep(step == "polyak_star") if step != "schedule" else _Schedule(decay)
        return Descent(name, DIRECTIONS[direction](), st)
    return make


#: rule name -> (factory, the options it takes)
_FACTORIES = {
    "gd": (_descent("gd", "gradient"), ("decay",)),
    "ngd": (_descent("ngd", "normalized"), ("decay",)),
    "ngd_param": (_descent("ngd_param", "normalized_param"), ("decay",)),
    "sign": (_descent("sign", "sign"), ("decay",)),
    "polyak": (_descent("polyak", "gradient", "polyak"), ()),
    "polyak_star": (_descent("polyak_star", "gradient", "polyak_star"), ()),
    "sd": (lambda norm=2, decay=0.0: Descent("sd", DIRECTIONS["steepest"](norm), _Schedule(decay)),
           ("norm", "decay")),
    "md": (lambda p=None, normalize=False, decay=0.0: MirrorDescent(p, normalize, decay),
           ("p", "normalize", "decay")),
    "prgd": (lambda period=100, growth=2.0, R0=1.0, step_power=0.5, decay=0.0:
             PRGD(period, growth, R0, step_power, decay),
             ("period", "growth", "R0", "step_power", "decay")),
    "adam": (lambda betas=(0.9, 0.999), eps=1e-8, decay=0.0: AdamRule(betas, eps, decay),
             ("betas", "eps", "decay")),
}

#: the registered rules and the options each takes
RULES = {name: opts for name, (_, opts) in _FACTORIES.items()}


class Optimizer(NamedTuple):
    """What a name of ``fit(optimizer=...)`` means: its step ``rule`` (a key of :data:`RULES`),
    whether it is ``stochastic`` (the rule on a fresh mini-batch at every step, ``batch_size``)
    and its default step size ``lr``."""

    rule: str
    stochastic: bool
    lr: float


#: the one table of optimizer names and defaults (:func:`attnsvm.train.fit`): a rule of
#: :data:`RULES` under its own name, full batch, and the stochastic rules of Part III
OPTIMIZERS = {
    **{name: Optimizer(name, False, lr) for name, lr in (
        ("gd", 0.1), ("ngd", 0.1), ("ngd_param", 0.1), ("polyak", 1.0), ("polyak_star", 1.0),
        ("adam", 0.01), ("sign", 0.01), ("sd", 0.1), ("md", 0.1), ("prgd", 0.1))},
    "sgd": Optimizer("gd", True, 0.1),
    "sngd": Optimizer("ngd", True, 0.1),
    "sps": Optimizer("polyak", True, 1.0),
}


def make_rule(rule, **options):
    """The :class:`Rule` object ``rule`` built with ``options`` (validated; unknown or
    inapplicable options raise ValueError naming them)."""
    check_choice("optimizer", rule, RULES)
    factory, allowed = _FACTORIES[rule]
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ValueError(f"options {bad} do not apply to optimizer={rule!r} "
                         f"(it takes {list(allowed) or 'none'})")
    return factory(**options)


def init_state(rule, params, **options):
    """Fresh optimizer state for ``rule`` given the list of parameter tensors."""
    return make_rule(rule, **options).init_state(params)


def update(rule, grads, state=None, *, lr, log_scale=None, log_loss=None, eta_max=None,
           betas=(0.9, 0.999), eps=1e-8, batch_ndim=0, params=None, **options):
    r"""Parameter increments for one step of ``rule`` (a thin dispatcher over :func:`make_rule`).

    Parameters
    ----------
    rule : str or Rule
        A name of :data:`RULES` or a :class:`Rule` object.
    grads : list of Tensor
        Log-scaled gradients :math:`\tilde g_j`; the true gradient is
        :math:`e^{\sigma_j}\tilde g_j`.
    state : dict, optional
        From :func:`init_state` (updated in place; a fresh one when ``None``).
    lr : float or Tensor (B,)
        Step size :math:`\eta` (for ``"polyak"`` a multiplier of the Polyak step).
    log_scale : None, Tensor, or list of Tensor
        :math:`\sigma_j`, per trial ((B,) or 0-d): one for all gradients or one per gradient.
        ``None`` means 0.
    log_loss : Tensor (B,) or 0-d
        :math:`\log L` (``"polyak"``), or :math:`\log(L - L^\star)` (``"polyak_star"``).
    eta_max : float or Tensor (B,), optional
        Cap on the Polyak step size (a tensor: one cap per trial).
    betas, eps : Adam's constants.
    batch_ndim : int
        Number of leading trial axes (0 for ``torch.optim`` use, 1 in the engine).
    params : list of Tensor, optional
        The current parameters (needed by ``"md"`` and ``"prgd"``).
    **options
        The rule's options (``norm``, ``p``, ``normalize``, ``decay``, ``period``, ``growth``,
        ``R0``, ``step_power``; see :data:`RULES`).

    Returns
    -------
    list of Tensor
        Increments, one per gradient.
    """
    if isinstance(rule, Rule):
        obj = rule
    else:
        if rule == "adam":
            options = dict(options, betas=betas, eps=eps)
        obj = make_rule(rule, **options)
    if log_scale is None or torch.is_tensor(log_scale):
        scales = [log_scale] * len(grads)
    else:
        scales = list(log_scale)
        if len(scales) != len(grads):
            raise ValueError("log_scale must be one tensor or one per gradient")
    if state is None:
        state = obj.init_state(params if params is not None else list(grads))
    ctx = Context(lr=lr, log_scale=scales, log_loss=log_loss, eta_max=eta_max,
                  batch_ndim=batch_ndim, params=params)
    return obj.update(list(grads), state, ctx)


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
            for p, m, v in zip(params, state["m"], state["v"]):
                self.state[p]["step"] = state["t"]
                self.state[p]["exp_avg"] = m
                self.state[p]["exp_avg_sq"] = v
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


def settings_config(settings):
    """The step sizes of optimizer settings (name -> ``fit`` keyword arguments) under the names
    of a chapter's parameters cell: ``lr_<name>`` for every setting that gives ``lr``, and
    ``eta_max`` when the settings give one cap (a result's ``config``, see
    :func:`attnsvm.claims.publish`)."""
    out = {f"lr_{name}": kw["lr"] for name, kw in settings.items() if "lr" in kw}
    caps = {kw["eta_max"] for kw in settings.values() if kw.get("eta_max") is not None}
    if len(caps) == 1:
        out["eta_max"] = caps.pop()
    return out


#: the optimizers of Part III's stochastic training of networks (:func:`make_optimizer`): the
#: stochastic ones of :data:`OPTIMIZERS`, and Adam
STOCHASTIC = tuple(name for name, o in OPTIMIZERS.items() if o.stochastic) + ("adam",)


def make_optimizer(name, params, *, lr, eta_max=None):
    """``"sgd"``: ``torch.optim.SGD(lr)``; ``"sngd"``: :class:`NGD` (one global
    norm over all parameters); ``"sps"``: :class:`Polyak` with multiplier ``lr``
    and cap ``eta_max``; ``"adam"``: :class:`Adam`."""
    params = [p for p in params if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sngd":
        return NGD(params, lr=lr)
    if name == "sps":
        return Polyak(params, lr=lr, eta_max=eta_max)
    if name == "adam":
        return Adam(params, lr=lr)
    raise ValueError(f"optimizer must be one of {STOCHASTIC}, got {name!r}")
