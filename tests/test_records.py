"""``fit(records="snapshots")``: a record step records only the snapshots. The run itself is
unchanged (the same steps, bit for bit); the metrics are absent; the finite guard still names
the first non-finite trial and step; :func:`attnsvm.runs.every_step` uses it."""
import numpy as np
import pytest
import torch

from attnsvm import metrics, runs, train
from attnsvm.data import LinearData, random_inits, score_instances
from attnsvm.losses import excess_loss
from attnsvm.train import NonFiniteError, fit


@pytest.fixture(scope="module")
def inst():
    data, opt = score_instances(5, 4, 6, trials=4, queries="orthogonal", seed=3)
    return data, opt, random_inits(6, 4, radius=1.0, seed=3)


@pytest.mark.parametrize("grid", [1, 7, "log"])
@pytest.mark.parametrize("model", ["W", "KQ"])
def test_snapshot_records_equal_full_records(inst, grid, model):
    """The snapshots and the final parameters equal those of a run recording everything, bit
    for bit; the metrics are None (a record step that still computed them would not change
    the snapshots, so the time is what ``benchmarks``-style callers gain, not tested here)."""
    data = inst[0]
    common = dict(model=model, optimizer="ngd", lr=0.1, steps=60, record_every=grid,
                  snapshots=True, device="cpu", progress=False, seed=1,
                  refs={"one": np.ones((6, 6))})
    a = fit(data, **common)
    b = fit(data, records="snapshots", **common)
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.snapshots, b.snapshots)
    for k, v in a.params.items():
        np.testing.assert_array_equal(b.params[k], v)
    assert b.loss is None and b.norm is None and b.log_loss is None and b.corr == {}
    assert b.opt_mass is None and b.trials == a.trials == 4
    assert b.config["records"] == "snapshots" and a.config["records"] == "all"
    with pytest.raises(ValueError, match="'loss' was not recorded"):
        b.series("loss")


def test_snapshot_records_need_snapshots(inst):
    with pytest.raises(ValueError, match="records='snapshots'"):
        fit(inst[0], records="snapshots", steps=3, device="cpu")
    with pytest.raises(ValueError, match="records"):
        fit(inst[0], records="some", snapshots=True, steps=3, device="cpu")


def test_guard_names_first_nonfinite_step_without_per_record_checks():
    """With records at every step but no guard check at each of them, an overflow at step 89
    is still reported as trial 1, step 89 (the ring's check finds the first bad row)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 5))
    X = rng.standard_normal((3, 12, 5))
    y = np.sign(np.einsum("bnd,bd->bn", X, w))
    X[1] *= 1e150
    for records in ("all", "snapshots"):
        with pytest.raises(NonFiniteError) as info:
            fit(LinearData(X, y), model="linear", loss="correlation", lr=1e5, steps=400,
                record_every=1, snapshots=True, records=records, progress=False, device="cpu")
        assert (info.value.trial, info.value.step) == (1, 89), records


def test_every_step_records_only_snapshots(inst, monkeypatch):
    """every_step asks fit for the snapshots only, and its log q and excess are those computed
    from a fully recorded run's snapshots."""
    data, opt, W0 = inst
    seen = []
    real = train.fit

    def spy(*args, **kwargs):
        seen.append(kwargs.get("records"))
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "fit", spy)
    lq, ex, W = runs.every_step(data, opt, optimizer="gd", lr=0.5, steps=30, init=W0,
                                 device="cpu")
    assert seen == ["snapshots"]
    h = real(data, model="W", optimizer="gd", lr=0.5, steps=30, init=W0, snapshots=True,
             record_every=1, device="cpu")
    np.testing.assert_array_equal(lq, metrics.log_q(data, opt, h.snapshots))
    np.testing.assert_array_equal(ex, excess_loss(data, opt, h.snapshots))
    np.testing.assert_array_equal(W, h.W)


@pytest.mark.parametrize("block", [4, 7])
@pytest.mark.parametrize("grid", [1, 5, "log", [3, 100, 257, 300]])
@pytest.mark.parametrize("kw", [dict(model="W", optimizer="ngd", snapshots=True),
                                dict(model="KQ", optimizer="ngd_param", snapshots=True),
                                dict(model="W", train_v=True, optimizer="gd",
                                     snapshots=("W", "v"))],
                         ids=["W", "KQ", "W+v"])
def test_block_path_takes_snapshots_inside_blocks(inst, kw, grid, block, monkeypatch):
    """With ``records="snapshots"`` the block path (CPU: ``engine="graph"``, each block
    executed) runs whole blocks across record steps, writing each step's snapshots into the
    block's buffers: the snapshots equal the eager loop's bit for bit, and blocks did run even
    when every step is recorded (a block that wrote the wrong row, or the snapshot before the
    step instead of after it, fails)."""
    monkeypatch.setattr(train, "GRAPH_BLOCK", block)
    replays = []
    real = train._GraphBlock.replay

    def spy(self):
        replays.append(1)
        real(self)

    monkeypatch.setattr(train._GraphBlock, "replay", spy)
    common = dict(lr=0.1, steps=300, record_every=grid, records="snapshots", device="cpu",
                  progress=False, seed=1, **kw)
    a = fit(inst[0], engine="eager", **common)
    assert not replays
    b = fit(inst[0], engine="graph", **common)
    assert b.config["engine"] == "graph-eager" and len(replays) >= 300 // block - 2
    np.testing.assert_array_equal(a.steps, b.steps)
    for name, v in a.trajectory.items():
        np.testing.assert_array_equal(b.trajectory[name], v, err_msg=name)
    for name, v in a.params.items():
        np.testing.assert_array_equal(b.params[name], v, err_msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_snapshots_every_step_equal_eager_cuda(inst):
    """On CUDA a run recorded at every step with ``records="snapshots"`` replays captured
    blocks (``"cuda-graph"``) and its snapshots equal the eager CUDA loop's bit for bit (the
    same kernels in the same order, as for the graph path's other records)."""
    common = dict(model="W", optimizer="ngd", lr=0.1, steps=200, record_every=1,
                  records="snapshots", snapshots=True, device="cuda", progress=False, seed=1)
    a = fit(inst[0], engine="eager", **common)
    b = fit(inst[0], engine="auto", **common)
    assert b.config["engine"] == "cuda-graph"
    np.testing.assert_array_equal(b.snapshots, a.snapshots)
