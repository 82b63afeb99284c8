"""The compiled step of :func:`attnsvm.train.fit` (``engine="compiled"``, issue 25.1): the
eager step (:class:`attnsvm.train._Step`, unchanged) compiled by ``torch.compile`` with
``fullgraph=True`` and run by the graph path's blocks (on CUDA captured, ``"cuda-graph-compiled"``;
elsewhere called step by step, ``"compiled"``). What makes it compilable without a graph break
is tested here on the CPU: a fresh host counter per compiled step, and the branch-free form of
the two CPU-only host checks (``optim.log_norm``, ``optim._dir_normalized``), which must give
the same values as the branch form. Results equal the eager run to the rounding tolerance of
``tests/test_graph.py`` (the spread of ulp-jittered eager runs: the compiled kernels fuse the
elementwise chain and may round ``exp``/``log`` differently, measured ~1e-16-5e-13 relative
over 300 steps)."""
import warnings

import numpy as np
import pytest
import torch

import attnsvm.train as train
from attnsvm import optim
from attnsvm.train import fit
from rounding import rounding_spread
from test_graph import CASES, IDS, _data, _fields, _tolerance

CUDA = torch.cuda.is_available()


def _case_data(device):
    """The cases' data: 3 trials on the CPU, 64 on CUDA (as tests/test_graph.py)."""
    return _data(64 if device == "cuda" else 3)


def _compiled_fit(monkeypatch, device, **kw):
    monkeypatch.setattr(train, "GRAPH_BLOCK", 8)          # blocks between the records of 25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # torch.jit notes while compiling
        warnings.simplefilter("error", RuntimeWarning)          # a failed compilation fails here
        return fit(_case_data(device), engine="compiled", device=device, **kw)


def _check_against_eager(monkeypatch, device, kw, engine):
    """The compiled run of case ``kw`` names ``engine`` and equals the eager run on ``device``
    to the tolerance of the eager run's own rounding spread."""
    common = dict(steps=300, record_every=25, progress=False, snapshots=True, seed=2, **kw)

    def eager():
        return _fields(fit(_case_data(device), engine="eager", device=device, **common))

    ref, spread = rounding_spread(eager)
    h = _compiled_fit(monkeypatch, device, **common)
    assert h.config["engine"] == engine
    for name, v in _fields(h).items():
        np.testing.assert_allclose(v, ref[name], rtol=0, atol=_tolerance(ref, spread, name),
                                   err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_compiled_equals_eager_to_rounding(kw, monkeypatch):
    """Every model and rule family the block path admits compiles as one graph (a graph break
    would raise under ``fullgraph``, warn and run eagerly: the warning is an error here, and the
    engine named must be "compiled"), and its records equal the eager run's to the tolerance of
    the eager run's own rounding spread. A compiled step that skipped the update of one
    parameter, or used the step number, fails by orders of magnitude (not measured here: the
    eager path's tests pin the step itself)."""
    _check_against_eager(monkeypatch, "cpu", kw, "compiled")


@pytest.mark.slow
def test_compile_limit_reached_runs_eagerly_and_says_so(monkeypatch):
    """Past :data:`attnsvm.train.COMPILE_LIMIT` compilations of the step, a run does not go on
    eagerly under the compiled path's name: the compilation fails, ``fit`` warns and records
    ``engine="eager"``, and the numbers are the eager ones (bit for bit)."""
    torch._dynamo.reset()
    monkeypatch.setattr(train, "COMPILE_LIMIT", 1)
    common = dict(model="W", optimizer="ngd", steps=40, record_every=[40], progress=False, seed=2)
    first = _compiled_fit(monkeypatch, "cpu", lr=0.1, **common)
    assert first.config["engine"] == "compiled"
    monkeypatch.setattr(train, "GRAPH_BLOCK", 8)
    with pytest.warns(RuntimeWarning, match="compilation failed, running eagerly"):
        second = fit(_data(), engine="compiled", device="cpu", lr=0.2, **common)   # a new constant
    assert second.config["engine"] == "eager"
    ref = fit(_data(), engine="eager", device="cpu", lr=0.2, **common)
    np.testing.assert_array_equal(second.W, ref.W)
    torch._dynamo.reset()


def test_compiled_engine_refuses_what_the_block_path_refuses():
    """``engine="compiled"`` refuses the steps that cannot run in blocks, naming the argument
    and the reason, before anything is compiled."""
    for kw, why in ((dict(optimizer="adam"), "host"), (dict(optimizer="ngd", decay=0.5), "decay"),
                    (dict(optimizer="sngd", batch_size=2), "mini-batch")):
        with pytest.raises(ValueError, match=f"engine='compiled' cannot run this step: .*{why}"):
            fit(_data(), model="W", steps=5, device="cpu", progress=False, engine="compiled", **kw)


@pytest.mark.parametrize("scale", [1.0, 1e-200, 1e200])
def test_branch_free_forms_equal_the_branch_forms(scale, monkeypatch):
    """Under compilation (``torch.compiler.is_compiling()``) ``log_norm`` and the normalized
    direction take no host branch; their values equal the eager branch forms bit for bit, on
    gradients whose norms are ordinary, tiny (the rescaled branch of ``log_norm``; the
    divided branch of the direction) and mixed across trials. The test fails if the
    branch-free form of either took the other branch's value (e.g. the rescaled norm, a few ulp
    away, where the plain one is kept)."""
    rng = np.random.default_rng(0)
    g = torch.as_tensor(rng.standard_normal((4, 3, 3)))
    g[1] *= scale                      # one trial at the scale, the others ordinary
    g2 = torch.as_tensor(rng.standard_normal((4, 2)))
    ctx = optim.Context(lr=0.1, log_scale=[None, None], batch_ndim=1)
    ref = (optim.log_norm([g], 1), optim.log_norm([g, g2], 1), optim._dir_normalized([g, g2], ctx))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = (optim.log_norm([g], 1), optim.log_norm([g, g2], 1), optim._dir_normalized([g, g2], ctx))
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=0)
    for a, b in zip(got[2][0] + got[2][1], ref[2][0] + ref[2][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_cuda_graph_compiled_equals_eager_cuda(kw, monkeypatch):
    """The compiled steps captured in a CUDA graph against eager CUDA, to the rounding
    tolerance of the eager CUDA runs."""
    _check_against_eager(monkeypatch, "cuda", kw, "cuda-graph-compiled")


def test_failed_block_setup_runs_each_step_once(monkeypatch):
    """When the block path cannot be set up (a capture or compilation that fails), the run goes
    on eagerly from where it stands: every step runs once and the records are the eager run's,
    bit for bit (before this test a failed capture ran all the steps a second time, with a
    second set of records)."""
    def broken(self, *args, **kwargs):
        raise RuntimeError("no capture here")

    monkeypatch.setattr(train, "GRAPH_BLOCK", 4)
    monkeypatch.setattr(train._GraphBlock, "__init__", broken)
    common = dict(model="W", optimizer="ngd", steps=40, record_every=8, progress=False, seed=2,
                  device="cpu", snapshots=True)
    with pytest.warns(RuntimeWarning, match="capture failed, running eagerly"):
        h = fit(_data(), engine="graph", **common)
    ref = fit(_data(), engine="eager", **common)
    assert h.config["engine"] == "eager"
    np.testing.assert_array_equal(h.steps, ref.steps)
    np.testing.assert_array_equal(h.snapshots, ref.snapshots)
