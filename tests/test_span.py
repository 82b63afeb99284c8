"""``W`` in the coordinates of the queries' span (``fit(coordinates="span")``,
:class:`attnsvm.models.parameterizations.WSpanScores`): the same runs as in the matrix
coordinates, to rounding, for every rule it takes; refused where it would not be the same run."""
import numpy as np
import pytest
import torch

from attnsvm.data import random_unit
from attnsvm.models.parameterizations import span_coordinates
from attnsvm.svm import att_svm
from attnsvm.train import SPAN_MAX_RATIO, SPAN_MIN_D, SPAN_RULES, fit

#: the largest relative difference allowed between the two coordinates (records and final W);
#: measured 2e-15 (GD, NGD, Polyak) and 1.3e-12 (the (L - L*) Polyak step, whose step size is
#: a difference of losses near L*) at 2,000 steps
RTOL = 1e-10


def _rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _pair(data, optimizer, **kw):
    opts = dict(model="W", optimizer=optimizer, steps=2000, init="random", init_scale=0.5,
                progress=False, **kw)
    return fit(data, coordinates="matrix", **opts), fit(data, coordinates="span", **opts)


@pytest.mark.parametrize("optimizer,kw", [
    ("gd", {}), ("ngd", {}), ("polyak", {"eta_max": 1.0}), ("polyak_star", {}),
    (["gd", "ngd", "polyak_star", "ngd", "gd", "polyak"], {}), ("ngd", {"decay": 0.5})])
def test_span_equals_matrix_coordinates(optimizer, kw):
    """Every record (loss, log-loss, norm, correlation with the attention SVM, optimal-token
    mass, selected tokens), the snapshots and the final ``W`` equal the run in the matrix
    coordinates to :data:`RTOL`, from a random start, for each rule of :data:`SPAN_RULES`, a
    rule per trial and a decaying step. Caught (checked by mutation, GD): ``Zh`` with rows of
    norm 2 (not orthonormal: the geometry of B is no longer that of W; log-loss off by 0.18
    relative, final W by 0.44) and ``CzT`` replaced by ``Cz`` (0.055 and 0.34)."""
    data = random_unit(6, 4, 16, trials=6, seed=0)
    W_mm = np.stack([att_svm(data.X[b], data.Z[b], data.opt[b]) for b in range(data.trials)]) \
        if hasattr(data, "opt") and data.opt is not None else None
    refs = {"mm": W_mm} if W_mm is not None else None
    h1, h2 = _pair(data, optimizer, refs=refs, snapshots=True, **kw)
    assert h2.config["coordinates"] == "span" and h1.config["coordinates"] == "matrix"
    assert list(h2.params) == list(h1.params)
    assert _rel(h2.params["W"], h1.params["W"]) <= RTOL
    for name in ("loss", "log_loss", "norm", "opt_mass"):
        assert _rel(getattr(h2, name), getattr(h1, name)) <= RTOL, name
    assert np.array_equal(h2.selected, h1.selected)
    assert _rel(h2.snapshots, h1.snapshots) <= RTOL
    for name in h1.corr:
        assert _rel(h2.corr[name], h1.corr[name]) <= RTOL


def test_span_equals_matrix_at_saturation():
    """NGD at lr = 1 drives ||W|| to ~2000, where most score gaps exceed 745 (every such mass
    underflows and the step relies on the log-space Jacobian; asserted for at least half of the
    sequences' second-largest gaps): the two coordinates still agree to :data:`RTOL` (measured
    1.6e-14). At lr = 10 the run itself is chaotic: a one-ulp change of its start moves the
    final ``W`` by 1e-2 in the matrix coordinates alone (measured), so no two implementations
    can agree there."""
    data = random_unit(4, 3, 12, trials=3, seed=1)
    h1, h2 = _pair(data, "ngd", lr=1.0)
    W = h1.params["W"]
    a = np.einsum("bntd,bde,bne->bnt", data.X, W, data.Z)
    a.sort(-1)
    assert np.median(a[..., -1] - a[..., -2]) > 745
    assert _rel(h2.params["W"], h1.params["W"]) <= RTOL
    assert _rel(h2.log_loss, h1.log_loss) <= RTOL


def test_span_coordinates_are_orthonormal_and_exact():
    """``Zh`` has orthonormal rows and ``Cz Zh`` reproduces the queries, so that
    ||dL/dB||_F = ||grad_W L||_F (the NGD and Polyak steps) and ``U0 + Cz B`` are the rows
    ``W z_i`` of ``W = W0 + B^T Zh``."""
    rng = np.random.default_rng(3)
    Z = torch.tensor(rng.standard_normal((2, 5, 9)))
    W0 = torch.tensor(rng.standard_normal((2, 9, 9)))
    B = torch.tensor(rng.standard_normal((2, 5, 9)))
    c = span_coordinates(W0, Z)
    eye = torch.eye(5, dtype=torch.float64).expand(2, 5, 5)
    torch.testing.assert_close(c["Zh"] @ c["Zh"].transpose(-1, -2), eye, rtol=0, atol=1e-14)
    torch.testing.assert_close(c["Cz"] @ c["Zh"], Z, rtol=0, atol=1e-14)
    W = W0 + B.transpose(-1, -2) @ c["Zh"]
    torch.testing.assert_close(c["U0"] + c["Cz"] @ B, Z @ W.transpose(-1, -2), rtol=1e-13, atol=1e-13)
    Xbar = torch.tensor(rng.standard_normal((2, 5, 9)))
    gW = Xbar.transpose(-1, -2) @ Z
    gB = c["CzT"] @ Xbar
    torch.testing.assert_close(gB.flatten(1).norm(dim=1), gW.flatten(1).norm(dim=1), rtol=1e-13, atol=0)
    torch.testing.assert_close(gB.transpose(-1, -2) @ c["Zh"], gW, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kw,match", [
    (dict(optimizer="adam"), "full-batch rules"),
    (dict(optimizer="sign"), "full-batch rules"),
    (dict(optimizer="sd", norm="spectral"), "full-batch rules"),
    (dict(optimizer="sgd", batch_size=2), "full-batch rules"),
    (dict(optimizer=["gd", "adam", "ngd", "gd"]), "full-batch rules"),
    (dict(optimizer="gd", penalty=0.1), "no penalty"),
    (dict(optimizer="gd", model="KQ", init="random"), "model='W'"),
    (dict(optimizer="gd", train_v=True), "model='W'"),
    (dict(optimizer="gd", head="mlp"), "model='W'"),
    (dict(optimizer="gd", coordinates="polar"), "coordinates"),
])
def test_span_refused_where_it_is_another_run(kw, match):
    """A rule that is not invariant under the rotation (Adam, sign, other norms), mini-batches,
    a penalty (it moves ``W0``), another model or a trained head: a ValueError naming
    ``coordinates`` and what it needs, before anything runs."""
    data = random_unit(4, 3, 8, trials=4, seed=0)
    opts = dict(model="W", steps=5, progress=False, coordinates="span")
    opts.update(kw)
    with pytest.raises(ValueError, match=match) as err:
        fit(data, **opts)
    assert "coordinates" in str(err.value)


def test_span_refused_without_fewer_sequences_than_dimensions():
    """With n >= d the span is all of R^d and the coordinates save nothing: refused, naming n
    and d."""
    data = random_unit(8, 3, 8, trials=2, seed=0)
    with pytest.raises(ValueError, match=r"n < d.*n=8, d=8"):
        fit(data, model="W", optimizer="gd", steps=5, progress=False, coordinates="span")
    assert SPAN_RULES == {"gd", "ngd", "polyak", "polyak_star"}


@pytest.mark.parametrize("shape,kw,want", [
    ((6, 4, 16), dict(optimizer="ngd"), "span"),
    ((6, 4, 16), dict(optimizer=["gd", "polyak_star"]), "span"),
    ((6, 4, 10), dict(optimizer="ngd"), "matrix"),            # d below SPAN_MIN_D
    ((20, 4, 16), dict(optimizer="ngd"), "matrix"),           # n >= d
    ((13, 4, 16), dict(optimizer="ngd"), "matrix"),           # n > 3d/4: no gain measured
    ((9, 4, 12), dict(optimizer="gd"), "span"),
    ((6, 4, 11), dict(optimizer="gd"), "matrix"),
    ((6, 4, 16), dict(optimizer="adam"), "matrix"),
    ((6, 4, 16), dict(optimizer=["gd", "adam"]), "matrix"),
    ((6, 4, 16), dict(optimizer="ngd", model="KQ", init="random"), "matrix"),
    ((6, 4, 16), dict(optimizer="ngd", train_v=True), "matrix"),
    ((6, 4, 16), dict(optimizer="gd", penalty=0.01), "matrix"),
    ((6, 4, 16), dict(optimizer="sngd", batch_size=3), "matrix"),
])
def test_auto_takes_the_span_where_it_applies_and_gains(shape, kw, want):
    """``coordinates="auto"`` (the default) resolves to "span" exactly where the span applies,
    ``d >= SPAN_MIN_D`` and ``n <= SPAN_MAX_RATIO d`` (the thresholds of
    ``benchmarks/span_speed.py``), and says so in ``History.config``."""
    n, t, d = shape
    data = random_unit(n, t, d, trials=2, seed=0)
    opts = dict(model="W", steps=3, progress=False)
    opts.update(kw)
    assert fit(data, **opts).config["coordinates"] == want
    assert (SPAN_MIN_D, SPAN_MAX_RATIO) == (12, 0.75)


def test_span_on_the_block_path():
    """The block path (``engine="graph"``: off CUDA each block executed eagerly with the same
    static buffers as a captured graph) runs the span coordinates like the eager loop: its
    fixed tensors stay untouched, the records equal the eager run's to rounding."""
    data = random_unit(6, 4, 16, trials=3, seed=2)
    opts = dict(model="W", optimizer="ngd", steps=300, init="random", init_scale=0.5,
                progress=False, coordinates="span")
    h1 = fit(data, engine="eager", **opts)
    h2 = fit(data, engine="graph", **opts)
    assert h2.config["engine"] == "graph-eager"
    assert _rel(h2.params["W"], h1.params["W"]) <= RTOL
    assert _rel(h2.log_loss, h1.log_loss) <= RTOL


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("optimizer", ["ngd", "polyak"])
def test_span_on_cuda_equals_the_cpu(optimizer):
    """On CUDA (``engine="auto"``: the captured graph) the span coordinates give the CPU's run:
    final ``W`` and log-loss to 1e-9 relative (the devices' exp/log differ by an ulp; the run is
    not chaotic at these steps). Run by ``benchmarks/gpu_check.sh``."""
    data = random_unit(6, 4, 16, trials=8, seed=5)
    opts = dict(model="W", optimizer=optimizer, steps=300, init="random", init_scale=0.5,
                progress=False, coordinates="span")
    cpu = fit(data, device="cpu", **opts)
    gpu = fit(data, device="cuda", **opts)
    assert gpu.config["coordinates"] == "span" and gpu.config["engine"] == "cuda-graph"
    assert _rel(gpu.params["W"], cpu.params["W"]) <= 1e-9
    assert _rel(gpu.log_loss, cpu.log_loss) <= 1e-9
