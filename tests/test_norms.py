"""The library's one norms module (:mod:`attnsvm.norms`): the matrix norms against their
definitions, the one parser of a norm's name, and the homes that use it (the step rules, the
Att-SVMs, the vector norms, the regularization path) importing it rather than a copy."""
import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsvm.norms import dual_norm, matrix_norm, parse_norm, vector_norm

LIB = Path(__file__).resolve().parents[1] / "lib" / "attnsvm"


def test_matrix_norm_numpy_and_torch_agree_with_definitions():
    """``norms.matrix_norm`` (the library's one matrix norm): numpy and torch give the same
    numbers per trial, equal to the definitions (entrywise sum of |w|^p, the singular values);
    bad norms and non-matrix spectral norms are
    refused by name. A wrong exponent or a norm over the batch axis fails by far more than 1e-12."""
    W = np.random.default_rng(3).normal(size=(2, 3, 4, 5))
    W[1] *= 1e6
    s = np.linalg.svd(W, compute_uv=False)
    flat = np.abs(W).reshape(2, 3, -1)
    want = {1: flat.sum(-1), 3.0: (flat ** 3).sum(-1) ** (1 / 3), "fro": np.sqrt((flat ** 2).sum(-1)),
            "inf": flat.max(-1), "spectral": s[..., 0], "nuc": s.sum(-1)}
    for norm, w in want.items():
        a, t = matrix_norm(W, norm), matrix_norm(torch.as_tensor(W), norm)
        assert isinstance(a, np.ndarray) and torch.is_tensor(t) and a.shape == (2, 3)
        np.testing.assert_allclose(a, w, rtol=1e-12)
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-12)
    # batch_ndim: one norm per leading index over all the other axes (entrywise only)
    np.testing.assert_allclose(matrix_norm(W, 2.0, batch_ndim=1),
                               np.sqrt((W.reshape(2, -1) ** 2).sum(-1)), rtol=1e-12)
    with pytest.raises(ValueError, match="needs matrices"):
        matrix_norm(torch.as_tensor(W), "nuc", batch_ndim=1)
    with pytest.raises(ValueError, match="norm"):
        matrix_norm(W, 0.5)


@pytest.mark.parametrize("matrix,good,bad", [
    (("spectral",), {1: 1.0, 2.5: 2.5, "inf": math.inf, math.inf: math.inf, "spectral": "spectral"},
     ["fro", "nuc", 0.5, True, float("nan"), "2"]),
    (("fro", "nuc", "spectral"), {np.int64(3): 3.0, "fro": "fro", "nuc": "nuc", "inf": math.inf},
     [0.99, None, "l2"]),
    ((), {1: 1.0, "inf": math.inf, np.float64(1.5): 1.5}, ["spectral", "fro", 0, False]),
])
def test_parse_norm_accepts_exactly_its_norms(matrix, good, bad):
    """One parser for the three homes that parsed norms before (the step rules, the Att-SVMs, the
    vector norms): exponents >= 1 and inf always, the matrix norms the caller names, anything else
    refused with the argument's name. Can fail: a parser that accepted p = 0.5, a boolean, NaN or a
    matrix norm the caller did not allow is caught by the bad cases."""
    for norm, want in good.items():
        got = parse_norm(norm, matrix=matrix)
        assert got == want and type(got) is type(want), (norm, got)
    for norm in bad:
        with pytest.raises(ValueError, match="^q must"):
            parse_norm(norm, matrix=matrix, name="q")


def test_vector_and_dual_norms():
    """``vector_norm`` is numpy's l_p norm along an axis; ``dual_norm`` is attained by the steepest
    direction (<g, d> = ||g||_* with ||d|| = 1, here for p = 3 and spectral, whose dual is nuclear).
    A dual exponent p instead of
    p/(p-1) changes the 3-norm case by more than 10 %."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 7))
    np.testing.assert_allclose(vector_norm(w, 3.0), (np.abs(w) ** 3).sum(-1) ** (1 / 3), rtol=1e-13)
    np.testing.assert_allclose(vector_norm(w, "inf", axis=0), np.abs(w).max(0))
    with pytest.raises(ValueError, match="p must"):
        vector_norm(w, 0.5)
    g = torch.as_tensor(rng.normal(size=(2, 3, 4)))
    d = g.sign() * g.abs() ** 0.5                                     # the steepest direction of l_3
    d = d / torch.linalg.vector_norm(d, ord=3.0, dim=(1, 2), keepdim=True)
    torch.testing.assert_close((g * d).sum((1, 2)), dual_norm(g, 3.0), rtol=1e-12, atol=0)
    s = torch.linalg.svdvals(g)
    torch.testing.assert_close(dual_norm(g, "spectral"), s.sum(-1), rtol=1e-12, atol=0)


def _defines_a_norm_parser(path):
    """Functions of a module that parse a norm by hand: they compare an argument with ``"inf"``
    and test ``>= 1`` (the shape of the three parsers this module replaced)."""
    out = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.FunctionDef):
            src = ast.unparse(node)
            if "'inf'" in src and ">= 1" in src and "raise ValueError" in src:
                out.append(node.name)
    return out


def test_no_other_module_parses_a_norm(tmp_path):
    """No module of the library but ``norms`` parses a norm by hand; a planted parser is found."""
    found = {p.relative_to(LIB).as_posix(): f for p in sorted(LIB.rglob("*.py"))
             if (f := _defines_a_norm_parser(p)) and p.name != "norms.py"}
    assert not found, f"norm parsers outside attnsvm.norms: {found}"
    planted = tmp_path / "planted.py"
    planted.write_text("def _parse_p(p):\n    if p == 'inf':\n        return 1e308\n"
                       "    if not p >= 1:\n        raise ValueError('p')\n    return p\n")
    assert _defines_a_norm_parser(planted) == ["_parse_p"]
