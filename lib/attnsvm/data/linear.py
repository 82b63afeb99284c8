"""Linear classification data: separable sets with a planted margin."""
from __future__ import annotations


import numpy as np

from .._checks import check_int, check_positive
from .attention import _signs, _unit
from .containers import LinearData
from .seeding import _generate, _generator


@_generator
def separable(n, d, *, margin=0.1, trials=None, seed=0):
    r"""Linearly separable data with a planted margin (Part I).

    A planted unit direction :math:`w_\star` (uniform, stored as ``w_star``), labels
    :math:`y_i = \pm 1` with probability 1/2, and

    .. math::

        x_i = P^\perp g_i + y_i\,(\mathrm{margin} + |w_\star^\top g_i|)\, w_\star,
        \qquad g_i \sim N(0, I_d/d),\quad P^\perp = I - w_\star w_\star^\top,

    so :math:`\|x_i\| \approx 1` for large :math:`d`. Guarantee (exact, for every draw):
    :math:`y_i w_\star^\top x_i \ge \mathrm{margin}` for all :math:`i`; hence the data are
    separable through the origin, the max-margin classifier exists with geometric margin
    :math:`1/\|w_{mm}\| \ge \mathrm{margin}`, i.e. :math:`\|w_{mm}\| \le 1/\mathrm{margin}`.

    Parameters
    ----------
    n, d : int >= 1
    margin : float > 0
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    LinearData (with ``w_star``)
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    margin = check_positive("margin", margin)

    def one(rng):
        w = _unit(rng, (d,))
        y = _signs(rng, n)
        g = rng.standard_normal((n, d)) / np.sqrt(d)
        proj = g @ w
        X = g - proj[:, None] * w + (y * (margin + np.abs(proj)))[:, None] * w
        return X, y, w
    return _generate(one, trials, seed, LinearData)
