r"""Chapter 1: implicit bias on linearly separable data (GD, NGD, Polyak, Adam).

:func:`separable_rates` draws ``trials`` separable data sets (:func:`attnsvm.data.separable`),
solves their hard-margin SVMs :math:`\hat w` (:func:`attnsvm.svm.linear_svm`) and trains the
linear classifier with every optimizer of ``settings`` in one batched :func:`attnsvm.train.fit`
call each. :meth:`SeparableRun.summary` holds the chapter's headline numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import data as _data
from .. import metrics as _metrics
from .. import svm as _svm
from .. import train as _train

__all__ = ["DEFAULT_SETTINGS", "SeparableRun", "separable_rates"]

#: the chapter's optimizers: name -> ``fit`` keyword arguments
DEFAULT_SETTINGS = {"gd": dict(optimizer="gd", lr=1.0), "ngd": dict(optimizer="ngd", lr=0.1),
                    "polyak": dict(optimizer="polyak"),
                    "polyak_capped": dict(optimizer="polyak", eta_max=100.0),
                    "adam": dict(optimizer="adam", lr=0.01)}


_nanmedian = _metrics.nanmedian


def _safe_rate(t, e, tail):
    """:func:`attnsvm.metrics.fit_rate` per trial on ``tail``, NaN for the trials whose error is
    not finite and positive there (the fit needs logarithms)."""
    lo, hi = tail
    on = (t > 0) & (t >= lo) & (t <= hi)
    ok = np.all(np.isfinite(e[on]) & (e[on] > 0), axis=0)
    out = np.full(e.shape[1], np.nan)
    if ok.any():
        out[ok] = _metrics.fit_rate(t, e[:, ok], tail=tail)
    return out


@dataclass
class SeparableRun:
    r"""Result of :func:`separable_rates`.

    Attributes
    ----------
    data : LinearData, batched
    w_mm : (B, d)          the hard-margin SVMs :math:`\hat w`
    gamma : (B,)           maximum margins :math:`1/\|\hat w\|`
    R : (B,)               radii :math:`\max_i \|x_i\|`
    runs : dict name -> History
    err : dict name -> (K, B)   direction errors :math:`\|w_t/\|w_t\| - \hat w/\|\hat w\|\|`
    steps : (K,)           the record steps
    """

    data: object
    w_mm: np.ndarray
    gamma: np.ndarray
    R: np.ndarray
    runs: dict
    err: dict
    steps: np.ndarray
    config: dict = field(default_factory=dict)

    def summary(self):
        r"""Headline numbers (medians over trials, NaN-safe):

        ``slope_<name>``: fitted log-log slope of the direction error over the last decade of
        steps; ``err_final_<name>``: the final direction error; ``gd_loglog_ratio``: for GD,
        :math:`\max_t / \min_t` of :math:`\mathrm{err}_t \log t` over the last decade (bounded
        by the :math:`O(1/\log t)` rate).
        """
        T = self.config["steps"]
        t = self.steps
        out = {}
        for name, e in self.err.items():
            out[f"slope_{name}"] = float(_nanmedian(_safe_rate(t, e, (T / 10, T))))
            out[f"err_final_{name}"] = float(_nanmedian(e[-1]))
        if "gd" in self.err:
            late = (t >= T / 10) & (t > 1)
            prod = self.err["gd"][late] * np.log(t[late])[:, None]
            with np.errstate(all="ignore"):
                out["gd_loglog_ratio"] = float(_nanmedian(prod.max(axis=0) / prod.min(axis=0)))
        return out


def separable_rates(n=40, d=10, *, margin=0.1, trials=8, steps=20000, settings=None, seed=0,
                    device="auto", **fit_kw):
    r"""Train the linear classifier on ``trials`` separable data sets with every optimizer of
    ``settings`` (default :data:`DEFAULT_SETTINGS`) and follow the direction error to
    :math:`\hat w`.

    Returns
    -------
    SeparableRun
    """
    settings = DEFAULT_SETTINGS if settings is None else settings
    data = _data.separable(n, d, margin=margin, trials=trials, seed=seed)
    w_mm = _svm.linear_svm(data.X, data.y)
    gamma = 1.0 / np.linalg.norm(w_mm, axis=-1)
    R = np.linalg.norm(data.X, axis=-1).max(axis=-1)
    runs = {name: _train.fit(data, model="linear", steps=steps, refs={"w_mm": w_mm}, seed=seed,
                             device=device, **fit_kw, **kw)
            for name, kw in settings.items()}
    err = {name: _metrics.direction_error_from_corr(h.corr["w_mm"]) for name, h in runs.items()}
    return SeparableRun(data, w_mm, gamma, R, runs, err, runs[next(iter(runs))].steps,
                        config=dict(n=n, d=d, margin=margin, trials=trials, steps=steps,
                                    settings=settings, seed=seed))
