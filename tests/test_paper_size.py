"""The notebooks that run at the papers' sizes on a laptop CPU, strict, at those sizes.

A checked claim is a finding only if it survives the papers' sizes (more instances, longer
horizons). Seven claims that held at the ``quick`` size once failed at ``paper`` size
(``notes/paper_claims.md``: a generator whose equal scores were equal only to rounding, a claim
about every draw that a larger batch refutes, a horizon the statement depended on). So every
notebook that finishes at ``paper`` size on the 2-core development CPU in under 90 s (times of
``benchmarks/paper_profile.py``, one core per notebook, in :data:`PAPER_CHEAP`) is executed here
with the ``paper`` profile's parameters, by the build's own executor, with
``ATTNSVM_STRICT_CLAIMS=1``: a claim that fails at the papers' sizes fails the case, naming the
claim and its numbers. ch08 and ch13, whose claims once broke there, also run at a second seed.

The notebooks that take longer at ``paper`` size on a CPU (ch01, ch03, ch07, ch09, ch10, ch11,
ch15b, ch16) are checked by ``make paper-cpu`` (``benchmarks/paper_profile.py``) and, on a GPU, by
``benchmarks/gpu_profile.py``; ch12a/b need data on disk. Run time here: about four minutes of
compute (two workers: two to three minutes), hence ``slow``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import attnsvm_book
from strict_run import run_strict

REPO = Path(__file__).resolve().parents[1]

#: notebook stem -> seconds at ``paper`` size on the development CPU (one core, idle machine;
#: ``notes/paper_profile_cpu.md`` and ``notes/paper_claims.md``)
PAPER_CHEAP = {
    "ch02_attsvm": 44, "ch04a_trajectories": 6, "ch04b_local": 8, "ch04c_overparam": 20,
    "ch05_kq_nuclear": 15, "ch06_prompt": 20, "ch08_global": 45, "ch13_geometry_linear": 61,
    "ch14_geometry_attention": 52, "ch15_ntp": 48,
}
#: notebooks that also run at another seed at ``paper`` size (their claims once broke there)
PAPER_SEEDS = {"ch08_global": (0, 1), "ch13_geometry_linear": (0, 1)}

CASES = [(stem, seed) for stem in PAPER_CHEAP for seed in PAPER_SEEDS.get(stem, (0,))]


def _notebook(stem):
    [nb] = [nb for nb in attnsvm_book.toc_notebooks(REPO) if Path(nb).stem == stem]
    return nb


def test_cheap_list_names_real_notebooks():
    """Every name of the list is a notebook of the book with a ``paper`` entry (a renamed notebook
    would silently drop out of the slow tier otherwise)."""
    paper = attnsvm_book.resolve_profile(REPO, "paper")
    for stem in PAPER_CHEAP:
        assert _notebook(stem) in paper, stem
    assert set(PAPER_SEEDS) <= set(PAPER_CHEAP)


@pytest.mark.slow
@pytest.mark.parametrize(("stem", "seed"), CASES, ids=[f"{s}-seed{k}" for s, k in CASES])
def test_notebook_holds_its_claims_at_paper_size(stem, seed, tmp_path):
    notebook = _notebook(stem)
    params = dict(attnsvm_book.resolve_profile(REPO, "paper")[notebook])
    params["seed"] = seed
    run_strict(notebook, params, tmp_path, f"paper_seed{seed}")
