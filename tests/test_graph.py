"""The graph path of :func:`attnsvm.train.fit` (issue 25.1): on CUDA the step loop replays a
captured CUDA graph of the eager step in blocks of ``GRAPH_BLOCK`` steps. On a CPU the same
bookkeeping runs with each block executed eagerly instead of replayed (``engine="graph"``,
path ``"graph-eager"``): block splitting between records and guard checks, record placement,
the finite guard's values written per block, parameters kept in the same static tensors. The
CUDA tests (skipped without CUDA) compare the captured path with the eager one."""
import numpy as np
import pytest
import torch

import attnsvm.train as train
from attnsvm.data import LinearData, random_unit
from attnsvm.train import NonFiniteError, fit
from rounding import rounding_spread

EPS = np.finfo(np.float64).eps
CUDA = torch.cuda.is_available()

CASES = [
    dict(model="W", optimizer="ngd"),
    dict(model="W", optimizer="gd", loss="exponential"),
    dict(model="KQ", optimizer="ngd_param", penalty=1e-3, init_scale=0.3),
    dict(model="prompt", optimizer="polyak", train_v=True, eta_max=1.0),
    dict(model="W", optimizer="sd", norm=1),
    dict(model="W", head="mlp", width=4, train_v=True, optimizer="sign"),
]
IDS = ["-".join(str(v) for v in kw.values()) for kw in CASES]


def _data(B=3):
    return random_unit(5, 4, 3, trials=B, seed=1)


def _fields(h):
    return {"loss": h.loss, "norm": h.norm, "log_loss": h.log_loss, "snapshots": h.snapshots,
            **{"param " + k: v for k, v in h.params.items()}}


@pytest.mark.parametrize("block", [4, 7])
@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_graph_bookkeeping_equals_eager_bit_for_bit(kw, block, monkeypatch):
    """The graph path with eager blocks runs the same kernels in the same order as the eager
    loop, so every record is equal bit for bit; the record grids put records inside, at and
    between blocks (a block of 7 does not divide the guard's ring of 256)."""
    monkeypatch.setattr(train, "GRAPH_BLOCK", block)
    for grid in ("log", 25, [3, 100, 257, 300]):
        common = dict(steps=300, record_every=grid, device="cpu", progress=False, snapshots=True,
                      seed=2, **kw)
        a = fit(_data(), engine="eager", **common)
        b = fit(_data(), engine="graph", **common)
        assert a.config["engine"] == "eager" and b.config["engine"] == "graph-eager"
        np.testing.assert_array_equal(a.steps, b.steps)
        for name, v in _fields(a).items():
            np.testing.assert_array_equal(_fields(b)[name], v, err_msg=f"{name} grid={grid}")


def test_blocks_between_events_and_static_buffers(monkeypatch):
    """Blocks fill each stretch between events (records here; the guard's ring every 256
    steps), the rest runs one step at a time; each replay sees the same parameter tensors and
    the same guard buffer (static), and the finite-guard value of every step reaches the
    guard's ring at that step's row."""
    monkeypatch.setattr(train, "GRAPH_BLOCK", 8)
    seen, rows = [], []
    replay = train._GraphBlock.replay

    def spy_replay(self):
        seen.append((tuple(t.data_ptr() for t in self.params.values()), self.sums.data_ptr()))
        replay(self)

    write_block = train._FiniteGuard.write_block

    def spy_write_block(self, step, sums):
        rows.append((step, step - self.first))
        write_block(self, step, sums)

    singles = []
    step_into = train._step_into

    def spy_step_into(step, params, k):
        singles.append(k)
        return step_into(step, params, k)

    monkeypatch.setattr(train._GraphBlock, "replay", spy_replay)
    monkeypatch.setattr(train._FiniteGuard, "write_block", spy_write_block)
    monkeypatch.setattr(train, "_step_into", spy_step_into)
    h = fit(_data(), model="W", optimizer="ngd", steps=100, record_every=50, device="cpu",
            progress=False, engine="graph")
    # [0, 50): 6 blocks (48 steps) + steps 48, 49; [50, 100): 6 blocks + steps 98, 99
    assert len(seen) == 12 and singles == [48, 49, 98, 99]
    assert len(set(seen)) == 1                            # the same static tensors every time
    assert [s for s, _ in rows] == list(range(0, 48, 8)) + list(range(50, 98, 8))
    assert [r for _, r in rows] == list(range(0, 48, 8)) * 2   # the ring restarts at the record
    np.testing.assert_array_equal(h.steps, [0, 50, 100])
    # a long stretch without records: the guard's ring (256 rows) ends the stretches at 256, 512
    monkeypatch.setattr(train, "GRAPH_BLOCK", 7)
    rows.clear()
    singles.clear()
    fit(_data(), model="W", optimizer="ngd", steps=600, record_every=[600], device="cpu",
        progress=False, engine="graph")
    assert singles == [252, 253, 254, 255, 508, 509, 510, 511, 596, 597, 598, 599]
    assert [s for s, _ in rows] == [b + 7 * j for b, m in ((0, 36), (256, 36), (512, 12))
                                    for j in range(m)]
    assert max(r for _, r in rows) + 7 <= train._FiniteGuard.CHECK


@pytest.mark.parametrize("block", [8, 1000])
def test_finite_guard_names_the_same_trial_and_step(block, monkeypatch):
    """A trial that overflows inside a block (step 89, in the block of steps 88-95) is named
    with its step, as the eager loop names it."""
    monkeypatch.setattr(train, "GRAPH_BLOCK", block)
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 5))
    X = rng.standard_normal((3, 12, 5))
    y = np.sign(np.einsum("bnd,bd->bn", X, w))
    X[1] *= 1e150
    caught = []
    for engine in ("eager", "graph"):
        with pytest.raises(NonFiniteError) as info:
            fit(LinearData(X, y), model="linear", loss="correlation", lr=1e5, steps=400,
                record_every=[300], progress=False, device="cpu", engine=engine)
        caught.append((info.value.trial, info.value.step))
    assert caught[0] == caught[1] and caught[0] == (1, 89)


def test_engine_choice_and_log(tmp_path, monkeypatch):
    """``engine="auto"`` is eager off CUDA; ``engine="graph"`` refuses a step it cannot replay
    (naming the argument); every fit appends its device and engine path to
    ``$ATTNSVM_ENGINE_LOG``."""
    log = tmp_path / "engines.log"
    monkeypatch.setenv(train.ENGINE_LOG_ENV, str(log))
    h = fit(_data(), model="W", optimizer="ngd", steps=5, device="cpu", progress=False)
    assert h.config["engine"] == "eager"
    fit(_data(), model="W", optimizer="ngd", steps=5, device="cpu", progress=False, engine="graph")
    assert log.read_text().split("\n")[:2] == ["cpu eager", "cpu graph-eager"]
    for kw in (dict(optimizer="sngd", batch_size=2), dict(optimizer="adam"),
               dict(optimizer="ngd", decay=0.5), dict(optimizer="sd", norm="spectral")):
        with pytest.raises(ValueError, match="engine"):
            fit(_data(), model="W", steps=5, device="cpu", progress=False, engine="graph", **kw)
    with pytest.raises(ValueError, match="engine"):
        fit(_data(), model="W", steps=5, device="cpu", progress=False, engine="jit")


def _tolerance(ref, spread, name):
    scale = np.nanmax(np.abs(ref[name])) if np.any(np.isfinite(ref[name])) else 0.0
    return 4 * np.nanmax(spread[name], initial=0.0) + 8 * EPS * scale


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_cuda_graph_equals_eager_cuda(kw):
    """The captured path against eager CUDA, to the rounding tolerance of
    ``test_train.test_batched_equals_one_at_a_time`` (the spread of ulp-jittered eager runs)."""
    common = dict(steps=300, record_every=25, device="cuda", progress=False, snapshots=True,
                  seed=2, **kw)

    def eager():
        return _fields(fit(_data(64), engine="eager", **common))

    ref, spread = rounding_spread(eager)
    g = fit(_data(64), engine="auto", **common)
    assert g.config["engine"] == "cuda-graph"
    for name, v in _fields(g).items():
        np.testing.assert_allclose(v, ref[name], rtol=0, atol=_tolerance(ref, spread, name),
                                   err_msg=name)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_cuda_equals_cpu(kw):
    """CUDA (the graph path) against the CPU, to the same rule: the spread of ulp-jittered CPU
    runs (the two devices' exp/log differ by an ulp, like SIMD and scalar kernels)."""
    common = dict(steps=300, record_every=25, progress=False, snapshots=True, seed=2, **kw)

    def cpu():
        return _fields(fit(_data(), device="cpu", **common))

    ref, spread = rounding_spread(cpu)
    g = _fields(fit(_data(), device="cuda", **common))
    for name, v in g.items():
        np.testing.assert_allclose(v, ref[name], rtol=0, atol=_tolerance(ref, spread, name),
                                   err_msg=name)
