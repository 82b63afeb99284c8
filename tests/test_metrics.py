"""numpy metrics: corr, direction_error, softmax, attention, opt_mass, fit_rate."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnsvm.metrics import attention, corr, direction_error, fit_rate, opt_mass, softmax


def test_corr_batched_and_broadcast():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 3, 3))
    B = rng.standard_normal((3, 3))
    c = corr(A, B)
    assert c.shape == (4,)
    for b in range(4):
        assert np.isclose(c[b], np.sum(A[b] * B) / np.linalg.norm(A[b]) / np.linalg.norm(B))
    assert np.isclose(corr(A[0], 5 * A[0]), 1.0) and np.isclose(corr(A[0], -A[0]), -1.0)
    v = rng.standard_normal((4, 5))
    assert corr(v, v[0]).shape == (4,)
    assert corr(v, v, elem_ndim=1).shape == (4,)
    assert np.isnan(corr(np.zeros((2, 2)), B[:2, :2]))
    assert np.isclose(corr(A[0] * 1e200, A[0] * 1e-200), 1.0)     # no overflow / underflow
    with pytest.raises(ValueError, match="elements"):
        corr(A, rng.standard_normal((4, 4)))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (3, 4), elements=st.floats(-1e3, 1e3)),
       arrays(np.float64, (3, 4), elements=st.floats(-1e3, 1e3)))
def test_direction_error_identity(A, B):
    if np.linalg.norm(A) < 1e-6 or np.linalg.norm(B) < 1e-6:
        return
    e = direction_error(A, B)
    assert 0 <= e <= 2 + 1e-12
    assert np.isclose(e, np.sqrt(max(0.0, 2 - 2 * corr(A, B))), atol=1e-7)


def test_softmax_stable():
    a = np.array([[1e6, 0.0, -1e6], [0.0, 0.0, 0.0]])
    s = softmax(a)
    np.testing.assert_allclose(s, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]])
    assert np.all(np.isfinite(softmax(np.array([-np.inf, 0.0]))))


def test_attention_and_opt_mass():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 3, 4, 5))
    W = rng.standard_normal((2, 5, 5))
    Z = rng.standard_normal((2, 3, 5))
    S = attention(X, W, Z)
    want = softmax(np.einsum("bntd,bde,bne->bnt", X, W, Z))
    np.testing.assert_allclose(S, want)
    p = rng.standard_normal(5)
    np.testing.assert_allclose(attention(X, p), softmax(X @ p))
    opt = np.argmax(S, axis=-1)
    np.testing.assert_allclose(opt_mass(S, opt, reduce=None), S.max(-1))
    np.testing.assert_allclose(opt_mass(S, opt), S.max(-1).mean(-1))
    with pytest.raises(ValueError, match="opt"):
        opt_mass(S, opt + 10)
    with pytest.raises(ValueError, match="W"):
        attention(X, W[:, :4], Z)


def test_fit_rate_recovers_power_law():
    t = np.unique(np.round(np.geomspace(1, 1e4, 60)))
    err = np.stack([3 * t ** -0.5, 0.2 * t ** -1.0], axis=1)
    err[:5] *= 7                                           # an early transient, outside the tail
    slope, icpt = fit_rate(t, err, tail=0.5, return_intercept=True)
    np.testing.assert_allclose(slope, [-0.5, -1.0])
    np.testing.assert_allclose(np.exp(icpt), [3, 0.2])
    assert np.isclose(fit_rate(np.r_[0, t], np.r_[1.0, err[:, 0]], tail=(100, 1e4)), -0.5)
    with pytest.raises(ValueError, match="tail"):
        fit_rate(t, err, tail=1.5)
    with pytest.raises(ValueError, match="err"):
        fit_rate(t, -err)


def test_direction_error_from_corr_matches_the_matrices():
    rng = np.random.default_rng(5)
    A_, B_ = rng.standard_normal((2, 7, 4, 4))
    from attnsvm.metrics import corr, direction_error, direction_error_from_corr
    np.testing.assert_allclose(direction_error_from_corr(corr(A_, B_)), direction_error(A_, B_),
                               atol=1e-12)
    assert direction_error_from_corr(1.0) == 0.0 and direction_error_from_corr(-1.0) == 2.0
    with pytest.raises(ValueError, match="c must"):
        direction_error_from_corr(1.5)


def test_slopes_from_log_series_where_float64_underflows():
    """``slopes(..., log=True)`` fits the log series itself: equal to the linear-space fit where
    the series is representable (to 1e-12), and finite where the series underflows float64
    (NGD's non-optimal mass at the papers' sizes in chapter 10, 10^-593), where the linear-space
    fit is NaN (the twin: the finding of the first whole paper build)."""
    from attnsvm import metrics
    t = np.arange(1.0, 1001.0)
    log_ok = np.stack([-1.0 * np.log(t) + 0.3, -2.5 * np.log(t) - 1.0], axis=1)
    np.testing.assert_allclose(metrics.slopes(t, log_ok, log=True),
                               metrics.slopes(t, np.exp(log_ok)), rtol=1e-12)
    np.testing.assert_allclose(metrics.slopes(t, log_ok, log=True), [-1.0, -2.5], rtol=1e-12)
    log_tiny = -1400.0 - 2.0 * np.log(t)[:, None]          # e^-1400: 0.0 in float64
    assert np.isnan(metrics.slopes(t, np.exp(log_tiny))).all()
    np.testing.assert_allclose(metrics.slopes(t, log_tiny, log=True), [-2.0], rtol=1e-12)
