"""Compute ops per engine step, counted by torch.profiler: the op count of issue 36.

``count_ops(fn)`` runs ``fn`` a few times under the profiler and returns the ops per call:
``compute``, the aten ops that are each at least one kernel on a GPU (an aten event with no
aten child that is not a metadata, view or allocation op), and ``syncs``, the host
synchronizations (``item``, ``is_nonzero``). The definition is the one of
``/work/shared/tools/opcount.py`` (the count quoted in issue 36), copied here so that the
benchmarks run from the repository alone.

As a script it prints the count per step of the engine's step (:class:`attnsvm.train._Step`
on the margin model of ``benchmarks/step_speed.py``) for each rule, on the CPU or on CUDA:

    python benchmarks/op_count.py [--device cuda] [--trials 100] [--branch-free]

(``--branch-free``: the CUDA path's count on the CPU: the norm that CUDA and compiled runs
take, :func:`attnsvm.optim.unit_scaled`, instead of the CPU's checked plain norm, and no
``exp`` flush clamps, which the library applies on the CPU only,
:data:`attnsvm.jacobian.FLUSH_DEVICES`.)

The last line is ``ops <rule>=<count> ...`` (``W`` unless named ``KQ/...``).
"""
from __future__ import annotations

import argparse
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

META = {
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::transpose",
    "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::t",
    "aten::permute", "aten::detach", "aten::empty", "aten::empty_like", "aten::empty_strided",
    "aten::resolve_conj", "aten::resolve_neg", "aten::_unsafe_view", "aten::alias",
    "aten::lift_fresh", "aten::flatten", "aten::numpy_T", "aten::_local_scalar_dense",
    "aten::item", "aten::is_nonzero", "aten::result_type", "aten::to", "aten::_to_copy",
    "aten::contiguous", "aten::squeeze_", "aten::unsqueeze_", "aten::view_as", "aten::expand_as",
    "aten::detach_", "aten::broadcast_tensors", "aten::unbind", "aten::split", "aten::chunk",
    "aten::narrow", "aten::matrix_H", "aten::mT", "aten::_has_compatible_shallow_copy_type",
    "aten::scalar_tensor", "aten::set_", "aten::resize_", "aten::_empty_affine_quantized",
    "aten::_reshape_copy", "aten::size", "aten::stride", "aten::dim", "aten::zeros",
    "aten::zeros_like", "aten::full", "aten::full_like", "aten::ones_like", "aten::ones",
}
# zeros/full/ones allocate AND fill: their fill_ child is counted as the kernel
HOST_SYNC = {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"}

#: the rows of the script: (label, model, optimizer, extra fit options)
RULES = (("ngd", "W", "ngd", {}), ("gd", "W", "gd", {}), ("polyak", "W", "polyak", {"eta_max": 1.0}),
         ("polyak_star", "W", "polyak_star", {"eta_max": 1.0}), ("adam", "W", "adam", {}),
         ("KQ/ngd", "KQ", "ngd", {}), ("KQ/gd", "KQ", "gd", {}), ("prompt/ngd", "prompt", "ngd", {}))


def count_ops(fn, calls=10, warm=2):
    """Per-call ``{"compute", "syncs", "hist"}`` of ``fn`` (profiled ``calls`` times after
    ``warm`` calls)."""
    for _ in range(warm):
        fn()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        for _ in range(calls):
            fn()
    ev = [e for e in prof.events() if e.name.startswith("aten::")]

    def aten_parent(e):
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return p
            p = p.cpu_parent
        return None

    def has_compute_child(e):
        stack = list(e.cpu_children)
        while stack:
            c = stack.pop()
            if c.name.startswith("aten::") and c.name not in META:
                return True
            stack.extend(c.cpu_children)
        return False

    compute = [e for e in ev if e.name not in META and not has_compute_child(e)]
    syncs = [e for e in ev if e.name in HOST_SYNC and (aten_parent(e) is None
                                                       or aten_parent(e).name not in HOST_SYNC)]
    hist = Counter(e.name.replace("aten::", "") for e in compute)
    return dict(compute=len(compute) / calls, syncs=len(syncs) / calls,
                hist={k: v / calls for k, v in hist.most_common()})


def engine_step(data, model, optimizer, device="cpu", **options):
    """The engine's step for these options: ``(step, full batch, initial parameters)``."""
    from attnsvm.train import FitConfig, _MarginTerms, _Step
    opts = dict(model=model, optimizer=optimizer, steps=1, device=device, progress=False,
                **options)
    if model == "KQ":
        opts.setdefault("init", "random")
    cfg = FitConfig.build(data, **opts)
    terms = _MarginTerms(cfg, data)
    return _Step(cfg, terms, terms.params), terms.full, terms.params


def main(argv=None):
    from attnsvm.data import random_unit
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--branch-free", action="store_true",
                    help="on the CPU, count the CUDA path: the branch-free norm "
                         "(attnsvm.optim.unit_scaled always) and no exp flush clamps")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.branch_free:
        import attnsvm.jacobian as jacobian
        import attnsvm.optim as optim
        optim._plain_norm = lambda grads, batch_ndim: None
        jacobian.FLUSH_DEVICES = frozenset()
    data = random_unit(6, 8, 10, trials=args.trials, seed=0)
    counts = {}
    for label, model, optimizer, extra in RULES:
        step, _, params = engine_step(data, model, optimizer, device=args.device, **extra)
        p = dict(params)
        k = [0]

        def one():
            step(p, k[0])
            k[0] += 1
        c = count_ops(one)
        counts[label] = c["compute"]
        print(f"{label:12s} compute ops per step {c['compute']:5.1f}  host syncs {c['syncs']:.1f}  "
              + " ".join(f"{n}:{v:g}" for n, v in c["hist"].items()))
    print("ops " + " ".join(f"{k}={v:g}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
