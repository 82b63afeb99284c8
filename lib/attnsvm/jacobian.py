r"""The softmax Jacobian of the attention margins, cancellation-free and in log space: the one
source of every attention gradient of the library (the engine's step,
:meth:`attnsvm.models.AttentionClassifier.grad`; :func:`attnsvm.models.attention.softmax_jacobian`;
the numpy theory helpers :func:`attnsvm.losses.risk_grad` and :func:`attnsvm.losses.loss_grad`).
A module of its own, below :mod:`attnsvm.losses` and :mod:`attnsvm.models`, so that both import it
(torch only). :mod:`attnsvm.models.attention` re-exports its names.
"""
from __future__ import annotations

import torch

__all__ = ["EXP_FLUSH", "FLUSH_DEVICES", "softmax_parts", "jacobian_products"]


#: exponents below this are raised to it before ``exp`` (e^-700 ~ 1e-304): torch's ``exp`` takes a
#: slow path for results that underflow (6-25 times slower per element), which at saturation is
#: most of them; every value computed so is added to, or weighed against, a term of order one
#: (the top token's :math:`e^0 = 1` in :math:`\sum_t e^{a_t - a_{t^\star}}`; the largest
#: weight :math:`e^0` of a trial's log-space weights), where a term below 1e-304 is below
#: rounding
EXP_FLUSH = -700.0
#: the device types whose ``exp`` takes that slow path, where the flush clamps are applied (two ops
#: of the step; on CUDA they would be two kernels that change no value: the values are bitwise
#: equal without them, ``tests/test_models.py::test_exp_flush_changes_no_value_only_speed``)
FLUSH_DEVICES = frozenset({"cpu"})


def softmax_parts(a):
    r"""The softmax of scores ``a`` (..., T) in the form the gradient uses: the top token
    :math:`t^\star` (largest score, first on ties) ``top`` (..., 1), :math:`e = a - a_{t^\star}
    \le 0`, :math:`\Sigma = \sum_t e^{e_t} \ge 1` (..., 1) and :math:`s = e^{e}/\Sigma`; then
    :math:`\log s_t = e_t - \log\Sigma` exactly in log space, however large the gaps (the
    exponent is raised to :data:`EXP_FLUSH` only for ``s`` and :math:`\Sigma`, on the devices of
    :data:`FLUSH_DEVICES`)."""
    a_top, top = a.max(-1, keepdim=True)
    e = a - a_top
    E = torch.exp(e.clamp(min=EXP_FLUSH) if a.device.type in FLUSH_DEVICES else e)
    S = E.sum(-1, keepdim=True)
    return top, e, S, E.div_(S)


def jacobian_products(e, log_S, s, top, Gam, nlc, dims):
    r"""The softmax-Jacobian products of the margins, cancellation-free and in log space, in one
    pass: the one source of the attention gradient (:meth:`attnsvm.models.AttentionClassifier.grad`,
    :func:`attnsvm.models.attention.softmax_jacobian`, :func:`attnsvm.losses.risk_grad`).

    With the top token :math:`t^\star`, the token scores :math:`\Gamma_t` (:math:`y\,g_t`), the
    margin :math:`u = \sum_t s_t\Gamma_t`, :math:`\Delta_t = \Gamma_{t^\star} - \Gamma_t`
    (exactly 0 on the tie group :math:`U = \{t: \Gamma_t = \Gamma_{t^\star}\}`, the top token
    included) and a weight :math:`c > 0` per sequence,

    .. math::

        c\,\frac{\partial u}{\partial a_t} = c\, s_t(\Gamma_t - u)
        = -\Big(P_t - s_t \sum_\tau P_\tau\Big), \qquad P_t = c\, s_t \Delta_t,

    since :math:`\Gamma_t - u = -\Delta_t + \sum_\tau s_\tau\Delta_\tau`. No step cancels:
    :math:`P_{t^\star} = 0` exactly, so the top token's term is :math:`s_{t^\star}\sum_\tau P_\tau`,
    a sum of terms of one scale, where the textbook :math:`s_{t^\star}(\Gamma_{t^\star} - u)`
    is rounding noise once :math:`1 - s_{t^\star} < 10^{-16}` (score gaps above ~37; autograd's
    softmax backward has the same defect). :math:`P` is evaluated in log space,
    :math:`P_t = e^{\log c + \log s_t - \sigma}\Delta_t` with
    :math:`\sigma = \max_{t \notin U}(\log c + \log s_t)` over ``dims`` (a sequence, or all the
    sequences of a trial): its largest entry is :math:`|\Delta_t|` at that token, none overflows
    (the exponent is at most 0 outside :math:`U`, and :math:`\Delta = 0` on it), and none of the
    terms that matter underflows, at any score gap (the masses of the tokens outside :math:`U`
    underflow past gaps of ~745; their products with :math:`e^{-\sigma}` do not); exponents
    below :data:`EXP_FLUSH` are raised to it on the devices of :data:`FLUSH_DEVICES`, a change
    below rounding of the largest term. The
    tie group is left out of :math:`\sigma` because its :math:`\Delta` is 0: its probabilities
    can be :math:`e^{1000}` times the informative ones, which would then underflow against them
    (an NGD run on ch08's equal-score instances froze at :math:`\|W\| \approx 1190` that way).

    Parameters
    ----------
    e, s, top
        From :func:`softmax_parts` (``e``, ``s`` (..., T); ``top`` (..., 1)).
    log_S : (..., 1)
        :math:`\log\Sigma` (:func:`softmax_parts`), so that :math:`\log s = e - \log\Sigma`.
    Gam : (..., T)
        The token scores :math:`\Gamma`.
    nlc : (..., 1)
        :math:`-\log c` per sequence.
    dims : tuple of int
        The axes of :math:`\sigma` (``(-1,)``: per sequence; ``(-2, -1)``: per trial).

    Returns
    -------
    Q : (..., T)
        :math:`-e^{-\sigma}\, c\, \partial u/\partial a = P - s\sum P` (a fresh tensor).
    sigma : the shape of ``e`` without ``dims``
        :math:`\sigma`; ``torch.finfo(dtype).min`` where no token lies outside :math:`U` (then
        :math:`Q = 0` exactly).
    """
    dG = Gam.gather(-1, top) - Gam
    m = e - (log_S + nlc)                                    # log c + log s_t
    m = torch.where(dG == 0, torch.finfo(m.dtype).min, m)   # the tie group: no scale of its own
    sigma = m.amax(dims, keepdim=True)
    x = m - sigma
    if x.device.type in FLUSH_DEVICES:
        x.clamp_(min=EXP_FLUSH)
    P = torch.exp(x).mul_(dG)
    return torch.addcmul(P, s, P.sum(-1, keepdim=True), value=-1), sigma.squeeze(dims)
