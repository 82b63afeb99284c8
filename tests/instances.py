"""Instances shared by several test files: Part III's equal-score model, with equal scores in every
sequence and with heterogeneous per-sequence scores (gamma*_i, gamma°_i)."""
from __future__ import annotations

import attnsvm as A

#: equal scores in every sequence, and heterogeneous per-sequence scores (gamma*_i, gamma°_i)
SCORES = {"equal": {}, "heterogeneous": dict(gamma_opt=[1.0, 2.0, 0.5, 1.5],
                                             gamma_other=[0.0, -0.5, 0.0, 1.0])}


def score_instance(kind, n=4, T=4, d=6, *, trials=3, seed=1):
    """``(data, opt, W_mm)``: :func:`attnsvm.data.score_instances` with the scores ``SCORES[kind]``
    and the Att-SVMs of the optimal tokens."""
    data, opt = A.data.score_instances(n, T, d, trials=trials, seed=seed, **SCORES[kind])
    return data, opt, A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
