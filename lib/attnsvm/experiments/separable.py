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
from ..optim import settings_config

__all__ = ["DEFAULT_SETTINGS", "SeparableRun", "separable_rates"]

#: the chapter's optimizers: name -> ``fit`` keyword arguments
DEFAULT_SETTINGS = {"gd": dict(optimizer="gd", lr=1.0), "ngd": dict(optimizer="ngd", lr=0.1),
                    "polyak": dict(optimizer="polyak", eta_max=None),      # uncapped
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

    def norm_growth(self, name):
        r"""Median over trials of :math:`\|w_T\|/\|w_{t_1}\|`, :math:`t_1` the first record step
        :math:`\ge T/10` (linear growth gives about :math:`T/t_1`, logarithmic growth
        :math:`\log T/\log t_1`)."""
        i1 = int(np.searchsorted(self.steps, self.config["steps"] / 10))
        h = self.runs[name]
        return float(_nanmedian(h.norm[-1] / h.norm[i1]))

    def claims(self):
        r"""The chapter's interpretive sentences, as ``name -> (holds, detail)``
        (:func:`attnsvm.claims.check`); only the claims whose optimizers were run.

        * ``gd_log_rate``: GD's slope is above :math:`-0.3` and its error times :math:`\log t`
          varies by less than a factor 1.5 over the last decade (a :math:`1/\log t` rate);
        * ``ngd_polyak_polynomial``: NGD's and the uncapped Polyak step's slopes lie in
          :math:`(-1.2, -0.6)` (polynomial, near :math:`-1`);
        * ``capped_crawls``: the capped Polyak step's slope is above :math:`-0.2` and its final
          error at least 10 times the uncapped one's;
        * ``adam_slow``: Adam's slope is less than half of NGD's in magnitude;
        * ``norm_growth``: over the last decade NGD's norm grows by a factor above 8 (linear:
          about 9.2 at the default records) and GD's by less than 2 (logarithmic).
        """
        s = self.summary()
        have = set(self.err)
        out = {}
        if "gd" in have:
            out["gd_log_rate"] = (
                bool(s["slope_gd"] > -0.3 and s["gd_loglog_ratio"] < 1.5),
                f"slope {s['slope_gd']:.3f} (> -0.3), err log t ratio {s['gd_loglog_ratio']:.3f} (< 1.5)")
        if {"ngd", "polyak"} <= have:
            sl = (s["slope_ngd"], s["slope_polyak"])
            out["ngd_polyak_polynomial"] = (
                bool(all(-1.2 < v < -0.6 for v in sl)),
                f"slopes NGD {sl[0]:.3f}, Polyak {sl[1]:.3f} (in (-1.2, -0.6))")
        if {"polyak", "polyak_capped"} <= have:
            ratio = s["err_final_polyak_capped"] / s["err_final_polyak"]
            out["capped_crawls"] = (
                bool(s["slope_polyak_capped"] > -0.2 and ratio > 10),
                f"capped slope {s['slope_polyak_capped']:.3f} (> -0.2), final error "
                f"{ratio:.3g} times the uncapped one's (> 10)")
        if {"adam", "ngd"} <= have:
            out["adam_slow"] = (
                bool(s["slope_adam"] > 0.5 * s["slope_ngd"]),
                f"slope Adam {s['slope_adam']:.3f} vs half of NGD's {0.5 * s['slope_ngd']:.3f}")
        if {"gd", "ngd"} <= have:
            g_ngd, g_gd = self.norm_growth("ngd"), self.norm_growth("gd")
            out["norm_growth"] = (
                bool(g_ngd > 8 and g_gd < 2),
                f"norm growth over the last decade: NGD {g_ngd:.3f} (> 8), GD {g_gd:.3f} (< 2)")
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
                                    settings=settings, seed=seed, **settings_config(settings)))
