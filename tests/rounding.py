"""A rounding-level perturbation of the transcendental functions, to measure how far a run's
numbers may move when ``exp``, ``log``, ``log1p``, ``softplus``, ``softmax`` and ``logsumexp``
round differently.

Why: on a CPU, torch evaluates an elementwise function over a contiguous tensor in SIMD blocks
(SLEEF, within 1 ulp) and the elements past the last full block with the scalar C library
(within 1 ulp); which path an element takes depends on its position in the whole tensor, so a
trial's values can differ by an ulp between a batched run and a run of that trial alone
(AVX2: blocks of 8 doubles; AVX-512: 16; with 5 sequences per trial, ``B = 1`` is all scalar
and ``B = 3`` is not). Everything else the engine does per trial (products, sums, norms over
a trial's own axes) takes the same order whatever ``B``. :class:`UlpJitter` moves each value
of those functions by one ulp up or down at random, so the spread of a few jittered runs is
the tolerance that rounding of this kind allows, derived from the run itself (its steps and
its conditioning) instead of guessed.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: the functions whose SIMD and scalar kernels may round differently
TRANSCENDENTAL = frozenset({
    "aten.exp.default", "aten.exp_.default", "aten.log.default", "aten.log_.default",
    "aten.log1p.default", "aten.log1p_.default", "aten.softplus.default",
    "aten._softmax.default", "aten._log_softmax.default", "aten.logsumexp.default",
    "aten.expm1.default", "aten.sigmoid.default", "aten.tanh.default",
    "aten.logaddexp.default"})


#: matrix products: a BLAS kernel's order of summation may depend on the shape of the whole
#: product, so a batch whose matrices are stacked into one product (the regularization path's
#: objective, runs grouped by instance) rounds a run's products differently when the batch changes
PRODUCTS = frozenset({"aten.mm.default", "aten.bmm.default", "aten.addmm.default",
                      "aten.baddbmm.default"})


class UlpJitter(TorchDispatchMode):
    """Within this context, each floating value returned by a function of ``ops`` (default
    :data:`TRANSCENDENTAL`) moves one ulp up or down (each with probability 1/2, else it
    stays), from a seeded generator."""

    def __init__(self, seed=0, ops=TRANSCENDENTAL):
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)
        self.ops = ops
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func) in self.ops and isinstance(out, torch.Tensor) \
                and out.is_floating_point() and out.numel():
            self.calls += 1
            r = torch.randint(0, 3, out.shape, generator=self.gen).to(out.device)
            up = torch.nextafter(out, torch.full_like(out, torch.inf))
            down = torch.nextafter(out, torch.full_like(out, -torch.inf))
            j = torch.where(r == 1, up, torch.where(r == 2, down, out))
            j = torch.where(torch.isfinite(out), j, out)
            if func._schema.name.endswith("_"):          # in place: the argument is the result
                out.copy_(j)
            else:
                out = j
        return out


def rounding_spread(run, repeats=3, ops=TRANSCENDENTAL):
    """``(ref, spread)``: ``ref = run()`` (a dict name -> ndarray) and, for each floating entry,
    the largest absolute difference between ``ref`` and ``repeats`` runs under
    :class:`UlpJitter` (seeds 0, 1, ...) of the functions ``ops``."""
    import numpy as np
    ref = run()
    names = [k for k, v in ref.items() if np.asarray(v).dtype.kind == "f"]
    spread = {k: np.zeros(np.shape(ref[k])) for k in names}
    for s in range(repeats):
        with UlpJitter(seed=s, ops=ops):
            out = run()
        for k in names:
            spread[k] = np.fmax(spread[k], np.abs(np.asarray(out[k], float) - ref[k]))
    return ref, spread
