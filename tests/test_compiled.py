"""The compiled margin-model step (:mod:`attnsvm.compiled`): the same numbers as the eager torch
path to rounding (saturated scores included), a clean fallback, and a cache of compiled
libraries that never loads a broken file (tested with real faults: a truncated library, a forged
checksum, a compiler process killed mid-build).

The fault tests start fresh Python processes (slow tier). A machine without a C compiler
skips the comparisons (the eager path is then the only one); ``ATTNSVM_REQUIRE_COMPILED=1``
(set in CI) turns that skip into a failure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsvm import compiled, fit
from attnsvm.data import random_unit
from attnsvm.losses import get_loss
from attnsvm.models import AttentionClassifier
from attnsvm.models.attention import _top_two
from attnsvm.models.parameterizations import token_sums

HAVE_CC = shutil.which(os.environ.get("CC") or "cc") is not None
if not HAVE_CC and os.environ.get("ATTNSVM_REQUIRE_COMPILED"):
    raise RuntimeError("ATTNSVM_REQUIRE_COMPILED is set but no C compiler is on PATH")
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler: the eager path is the only one")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory; the module's loaded libraries are forgotten before and after."""
    monkeypatch.setenv(compiled.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(compiled.ENV, raising=False)
    compiled.reset()
    yield tmp_path / "cache" / "compiled"
    compiled.reset()


def _problem(B=7, n=5, T=6, d=9, scale=1.0, seed=0):
    data = random_unit(n, T, d, trials=B, seed=seed)
    g = torch.Generator().manual_seed(seed)
    X = torch.as_tensor(data.X)
    Z = torch.as_tensor(data.Z)
    v = torch.as_tensor(data.v)
    W = scale * torch.randn(B, d, d, dtype=torch.float64, generator=g)
    G = torch.einsum("bntd,bd->bnt", X, v).contiguous()
    y = torch.as_tensor(data.y)
    batch = {"X": X, "Xt": X.transpose(-1, -2).contiguous(), "Z": Z, "G": G, "y": y}
    return batch, W, v


def _eager(monkeypatch):
    monkeypatch.setenv(compiled.ENV, "0")


# --------------------------------------------------------------------------- the two passes
@needs_cc
@pytest.mark.parametrize("scale", [0.1, 3.0, 1e3, 1e6])
def test_jacobian_terms_match_eager(cache, scale):
    """The token loop, compiled, against :func:`_top_two` (the eager path) on scores from
    moderate to saturated (gaps of 1e3 to 1e6, where every rescaled probability but one
    underflows). The scores are sums in another order, so they agree to a few ulp of their
    size ``amax``; ``e^(a_t - a_(2))`` inherits that as a relative error ~ ``amax * eps``."""
    batch, W, _ = _problem(scale=scale)
    sh, top, Ssh, shG, gap, G_top, eg = compiled.jacobian_terms(batch["Xt"], batch["Z"], W,
                                                                batch["G"])
    a = torch.einsum("bntd,bde,bne->bnt", batch["X"], W, batch["Z"])
    e_sh, e_top, e_Ssh, e_shG, e_gap, e_Gtop, _ = _top_two(a, batch["G"])
    assert torch.equal(top, e_top.squeeze(-1))
    amax = max(1.0, a.abs().max().item())
    rtol = 64 * np.finfo(float).eps * amax
    torch.testing.assert_close(sh, e_sh, rtol=rtol, atol=1e-300)
    torch.testing.assert_close(Ssh, e_Ssh.squeeze(-1), rtol=rtol, atol=0)
    torch.testing.assert_close(shG, e_shG.squeeze(-1), rtol=rtol, atol=rtol)
    torch.testing.assert_close(gap, e_gap.squeeze(-1), rtol=0, atol=rtol)
    torch.testing.assert_close(G_top, e_Gtop.squeeze(-1), rtol=0, atol=0)
    torch.testing.assert_close(eg, torch.exp(gap), rtol=4 * np.finfo(float).eps, atol=1e-300)
    assert (sh.gather(-1, top.unsqueeze(-1)) == 0).all()


@needs_cc
def test_top_token_first_on_ties(cache):
    """Equal largest scores (tokens 1, 3 and 4 identical, and the largest): the top token is
    the first of them, 1, as ``torch.max`` picks it."""
    batch, W, _ = _problem(B=3, n=2, T=5, d=4)
    X = batch["X"].clone()
    X[:, :, 1, 0] = 5.0                               # unit tokens elsewhere: |x_t0| <= 1
    X[:, :, 3] = X[:, :, 1]
    X[:, :, 4] = X[:, :, 1]
    Z = batch["Z"].clone()
    Z[..., 0] = 1.0
    W = torch.zeros_like(W)
    W[:, 0, 0] = 1.0                                  # a_t = x_t0 z_0
    a = torch.einsum("bntd,bde,bne->bnt", X, W, Z)
    _, top, *_ = compiled.jacobian_terms(X.transpose(-1, -2).contiguous(), Z, W, batch["G"])
    assert (top == 1).all() and torch.equal(top, a.max(-1).indices)


@needs_cc
def test_exp_accuracy(cache):
    """The kernel's exponential is within 2 ulp of numpy's over [-745, 0]: three tokens with
    scores 1, 0 and x <= 0, so that the third rescaled probability is e^(x - 0)."""
    x = -np.unique(np.concatenate([np.linspace(0, 745, 4001), np.geomspace(1e-12, 745, 2000),
                                   [745.1, 745.13, 745.2, 746.0, 1e4, np.inf]]))
    m = len(x)
    X = torch.zeros(1, m, 3, 1, dtype=torch.float64)
    X[0, :, 0, 0] = 1.0
    X[0, :, 2, 0] = torch.as_tensor(x)
    Z = torch.ones(1, m, 1, dtype=torch.float64)
    W = torch.ones(1, 1, 1, dtype=torch.float64)
    G = torch.ones(1, m, 3, dtype=torch.float64)
    sh, top, *_ = compiled.jacobian_terms(X.transpose(-1, -2).contiguous(), Z, W, G)
    assert (top == 0).all()
    want, got = np.exp(x), sh[0, :, 2].numpy()
    ulp = np.spacing(np.maximum(want, np.finfo(float).tiny))
    err = np.abs(got - want) / ulp
    assert err.max() <= 2.0, (err.max(), x[err.argmax()])


@needs_cc
@pytest.mark.parametrize("scale", [0.1, 1e3])
def test_weighted_grad_matches_eager(cache, scale):
    """``sum_i (X_i^T q_i) z_i^T`` compiled, against the eager products."""
    batch, W, _ = _problem(scale=scale, seed=1)
    terms = compiled.jacobian_terms(batch["Xt"], batch["Z"], W, batch["G"])
    sh, top, Ssh, shG, gap, G_top, _ = terms
    g = torch.Generator().manual_seed(2)
    f = torch.randn(Ssh.shape, dtype=torch.float64, generator=g)
    s_top = torch.rand(Ssh.shape, dtype=torch.float64, generator=g)
    c = torch.randn(Ssh.shape, dtype=torch.float64, generator=g)
    gW = compiled.weighted_grad(batch["X"], batch["Z"], batch["G"], terms, f, s_top, c)
    rho = sh * (batch["G"] - f.unsqueeze(-1))
    rho.scatter_(-1, top.unsqueeze(-1), (s_top * (G_top * Ssh - shG)).unsqueeze(-1))
    q = rho * c.unsqueeze(-1)
    xbar = token_sums(batch["X"], q)
    want = torch.bmm(xbar.transpose(-1, -2), batch["Z"])
    torch.testing.assert_close(gW, want, rtol=1e-12, atol=1e-13 * want.abs().max().item())


# --------------------------------------------------------------------------- the gradient
@needs_cc
@pytest.mark.parametrize("param", ["W", "KQ", "KQ-m3"])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("scale", [0.3, 1e3])
def test_grad_matches_eager(cache, monkeypatch, param, loss, scale):
    """``AttentionClassifier.grad``: compiled and eager give the same margins, log-scales and
    log-scaled gradients to rounding, unsaturated and saturated; (K, Q) square and of inner
    dimension 3 < d (the compiled (K, Q) passes never form W)."""
    batch, W, v = _problem(scale=scale, seed=3)
    net = AttentionClassifier("KQ", m=3) if param == "KQ-m3" else AttentionClassifier(param)
    rngs = [np.random.default_rng(b) for b in range(W.shape[0])]
    params = net.init_params(W.shape[-1], v, rngs, init="random", init_scale=scale)
    lossobj = get_loss(loss)
    assert net._compiled(params, batch)
    u, grads, sig = net.grad(params, batch, lossobj)
    _eager(monkeypatch)
    assert not net._compiled(params, batch)
    u0, grads0, sig0 = net.grad(params, batch, lossobj)
    torch.testing.assert_close(u, u0, rtol=1e-12, atol=1e-14)
    for k in grads0:
        torch.testing.assert_close(sig[k], sig0[k], rtol=1e-12, atol=1e-12)
        scale_k = grads0[k].flatten(1).abs().amax(1).reshape(-1, 1, 1)
        torch.testing.assert_close(grads[k] / scale_k, grads0[k] / scale_k, rtol=0, atol=1e-12)


@needs_cc
@pytest.mark.parametrize("model,optimizer", [("W", "gd"), ("W", "ngd"), ("W", "polyak"),
                                             ("KQ", "ngd")])
def test_fit_matches_eager(cache, monkeypatch, model, optimizer):
    """A whole run of ``fit`` (400 steps, the records): compiled and eager agree to 1e-10.

    (K, Q) runs at lr 0.05: at lr 0.1-0.2 this instance's (K, Q) NGD passes near-ties of the
    selected token, where rounding decides the path (the eager path itself moves by ~0.5%
    when the initialization's scale changes by 1e-13), so no path agrees with another there."""
    data = random_unit(4, 5, 6, trials=6, seed=4)
    lr = {"polyak": 1.0, "ngd": 0.05 if model == "KQ" else 0.2}.get(optimizer, 0.2)
    kw = dict(model=model, optimizer=optimizer, init="random" if model == "KQ" else "zeros",
              lr=lr, eta_max=10.0 if optimizer == "polyak" else None,
              steps=400, n_records=9, seed=0, progress=False)
    calls = []
    for name in ("jacobian_terms", "jacobian_terms_kq"):
        real = getattr(compiled, name)
        monkeypatch.setattr(compiled, name,
                            lambda *a, _real=real, **k: calls.append(1) or _real(*a, **k))
    h = fit(data, **kw)
    assert len(calls) >= 400                          # the compiled path served every step
    _eager(monkeypatch)
    h0 = fit(data, **kw)
    assert len(calls) < 2 * 400                       # and the eager run did not use it
    for name in ("loss", "norm", "opt_mass"):
        np.testing.assert_allclose(getattr(h, name), getattr(h0, name), rtol=1e-10, atol=0)
    np.testing.assert_allclose(h.params["W"], h0.params["W"], rtol=1e-10,
                               atol=1e-10 * np.abs(h0.params["W"]).max())


@needs_cc
@pytest.mark.parametrize("param", ["W", "KQ"])
def test_threads_split_the_trials(cache, param):
    """With several torch threads the trials are split between them: the same numbers, both
    passes, W and (K, Q)."""
    batch, W, v = _problem(B=9)
    g = torch.Generator().manual_seed(5)
    K, Q = (torch.randn(9, 9, 4, dtype=torch.float64, generator=g) for _ in range(2))

    def both():
        if param == "W":
            terms = compiled.jacobian_terms(batch["Xt"], batch["Z"], W, batch["G"])
            extra = ()
        else:
            *terms, Qz = compiled.jacobian_terms_kq(batch["Xt"], batch["Z"], K, Q, batch["G"])
            extra = (Qz,)
        f, s_top, c = terms[2] * 0.3, terms[3] * 0.1 + 0.5, terms[4] - 1.0
        if param == "W":
            grads = (compiled.weighted_grad(batch["X"], batch["Z"], batch["G"], terms, f, s_top, c),)
        else:
            grads = compiled.weighted_grad_kq(batch["X"], batch["Z"], batch["G"], tuple(terms), f,
                                              s_top, c, *extra, K)
        return (*terms, *extra, *grads)

    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = both()
        torch.set_num_threads(3)
        three = both()
    finally:
        torch.set_num_threads(old)
    for a, b in zip(one, three, strict=True):
        assert torch.equal(a, b)


@needs_cc
def test_shapes_and_dtypes_not_served_fall_back(cache):
    """float32, T = 1, d > 256, a scratch over 2^24 doubles, non-contiguous tensors and shapes
    that do not fit together go the eager way."""
    batch, W, _ = _problem(B=2, n=2, T=3, d=4)
    X = batch["X"]
    assert not compiled.applicable(X.float(), T=3, d=4)
    assert not compiled.applicable(X, T=1, d=4)
    assert not compiled.applicable(X, T=3, d=257)
    assert not compiled.applicable(X.transpose(-1, -2), T=3, d=4)
    assert not compiled.applicable(X, T=3, d=4, n=10 ** 7)         # the scratch too big
    assert compiled.applicable(X, T=3, d=4, n=2)
    # tensors whose shapes do not fit together never reach the C code
    net = AttentionClassifier("W")
    params = {"W": W, "v": batch["X"].new_zeros(2, 4)}
    assert net._compiled(params, batch)
    assert not net._compiled({"W": W[0], "v": params["v"]}, batch)              # W unbatched
    assert not net._compiled(params, dict(batch, G=batch["G"][:1]))               # G of 1 trial
    assert not net._compiled(params, dict(batch, y=batch["y"][:, :1]))            # y of 1 sequence


# --------------------------------------------------------------------------- fallback and cache
def _run(code, env_extra, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), **env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=240)


_PROBE = """
    import warnings, numpy as np, torch
    from attnsvm import compiled, fit
    from attnsvm.data import random_unit
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        st = compiled.status(T=5, d=6)
        h = fit(random_unit(4, 5, 6, trials=3, seed=0), model="W", optimizer="ngd", lr=0.1,
                steps=50, progress=False)
    print("ENABLED", st["enabled"])
    print("WHY", st["why"])
    print("FINITE", bool(np.isfinite(h.params["W"]).all()))
    for w in caught:
        print("WARNING", str(w.message).replace(chr(10), " "))
"""


@pytest.mark.slow
def test_no_compiler_falls_back_with_one_warning(tmp_path):
    """``CC`` names no compiler: a warning says so, the eager path runs, results are finite."""
    out = _run(_PROBE, {"CC": str(tmp_path / "no-such-cc"), compiled.CACHE_ENV: str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "ENABLED False" in out.stdout
    assert "no C compiler" in out.stdout and "no-such-cc" in out.stdout
    assert "FINITE True" in out.stdout
    assert out.stdout.count("WARNING attnsvm: the compiled step is unavailable") == 1


@pytest.mark.slow
def test_disabled_by_environment(tmp_path):
    out = _run(_PROBE, {compiled.ENV: "0", compiled.CACHE_ENV: str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "ENABLED False" in out.stdout and "ATTNSVM_COMPILED=0" in out.stdout
    assert not (tmp_path / "compiled").exists()              # nothing was built


@needs_cc
@pytest.mark.slow
def test_unwritable_cache_falls_back(tmp_path):
    """The cache directory cannot be created (a regular file is in the way): the warning names
    it and the eager path runs."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = _run(_PROBE, {compiled.CACHE_ENV: str(blocker)})
    assert out.returncode == 0, out.stderr
    assert "ENABLED False" in out.stdout and str(blocker) in out.stdout


@needs_cc
@pytest.mark.slow
def test_truncated_library_is_rebuilt(tmp_path):
    """A cached library cut short (a full disk, a killed copy) is detected by its checksum,
    rebuilt with a warning that says why, and the run is right."""
    env = {compiled.CACHE_ENV: str(tmp_path)}
    first = _run(_PROBE, env)
    assert "ENABLED True" in first.stdout, first.stdout + first.stderr
    (so,) = (tmp_path / "compiled").glob("margin_step-T5-d6-*.so")
    data = so.read_bytes()
    so.write_bytes(data[: len(data) // 3])
    second = _run(_PROBE, env)
    assert second.returncode == 0, second.stderr
    assert "ENABLED True" in second.stdout
    assert "do not match the recorded SHA-256, rebuilding" in second.stdout
    assert so.read_bytes() == data                      # the same compiler rebuilds the same bytes
    assert "FINITE True" in second.stdout


@needs_cc
@pytest.mark.slow
def test_garbage_library_with_matching_checksum_is_rebuilt(tmp_path):
    """A file whose checksum was rewritten to match but which is no library: loading fails,
    it is rebuilt once, and the run is right."""
    env = {compiled.CACHE_ENV: str(tmp_path)}
    assert "ENABLED True" in _run(_PROBE, env).stdout
    (so,) = (tmp_path / "compiled").glob("margin_step-T5-d6-*.so")
    so.write_bytes(b"\x7fELF garbage")
    import hashlib
    so.with_suffix(".sha256").write_text(hashlib.sha256(so.read_bytes()).hexdigest() + "\n")
    out = _run(_PROBE, env)
    assert out.returncode == 0, out.stderr
    assert "ENABLED True" in out.stdout and "FINITE True" in out.stdout
    assert so.read_bytes()[:4] == b"\x7fELF" and len(so.read_bytes()) > 1000


@needs_cc
@pytest.mark.slow
def test_killed_build_leaves_no_library(tmp_path):
    """The process building the library is SIGKILLed while the compiler is writing its output:
    nothing is left under a library's name (only a temporary), and the next process builds a
    working library."""
    cc = shutil.which(os.environ.get("CC") or "cc")
    wrapper = tmp_path / "slowcc"
    # forwards to the real compiler, then writes a partial output and kills the Python process
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *--version*) exec {cc} "$@";; esac
        out=""; prev=""
        for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
        head -c 100 /bin/sh > "$out"
        kill -9 $PPID
        sleep 30
        """))
    wrapper.chmod(0o755)
    env = {compiled.CACHE_ENV: str(tmp_path)}
    killed = _run(_PROBE, dict(env, CC=str(wrapper)))
    assert killed.returncode == -9
    assert not list((tmp_path / "compiled").glob("margin_step-*.so"))
    after = _run(_PROBE, env)
    assert "ENABLED True" in after.stdout, after.stdout + after.stderr
    assert "FINITE True" in after.stdout


@needs_cc
@pytest.mark.slow
def test_two_processes_build_one_shape_at_once(tmp_path):
    """Two processes start with an empty cache and build the same library at the same time:
    both load a working one and neither warns (no partial file is ever seen)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), **{compiled.CACHE_ENV: str(tmp_path)})
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_PROBE)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "ENABLED True" in out and "FINITE True" in out
        assert "WARNING" not in out, out
    assert len(list((tmp_path / "compiled").glob("margin_step-T5-d6-*.so"))) == 1
