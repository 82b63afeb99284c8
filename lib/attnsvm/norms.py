r"""The library's norms, in one place: parsing a norm's name, the matrix norms and their duals, the
entrywise vector norms and the norm of a regularization path's ball.

* :func:`parse_norm`: a norm given by the user, checked: a real exponent :math:`p \ge 1`,
  :math:`\infty` (``math.inf`` or ``"inf"``), or a matrix norm's name (``"fro"``, ``"nuc"``,
  ``"spectral"``) where the caller allows it; anything else is a ``ValueError`` naming the argument;
* :func:`matrix_norm`: the norm of parameters per trial (entrywise :math:`\ell_p`, spectral,
  nuclear), numpy or torch;
* :func:`dual_norm`: :math:`\|g\|_* = \max_{\|d\|\le 1}\langle g, d\rangle`, the matrix norm in the
  dual exponent :math:`q = p/(p-1)` (nuclear for spectral, :func:`dual_exponent`);
* :func:`vector_norm`: the entrywise :math:`\ell_p` norm along one axis.

The step rules (:mod:`attnsvm.optim`), the max-margin problems (:mod:`attnsvm.svm`), the
regularization path and the bounds import these; this module imports none of them.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ._checks import as_float_array

__all__ = ["parse_norm", "matrix_norm", "dual_exponent", "dual_norm", "vector_norm"]


def parse_norm(norm, *, matrix=("spectral",), name="norm"):
    r"""``norm`` checked: a real ``p >= 1`` as ``float``, :math:`\infty` (``math.inf`` or
    ``"inf"``) as ``math.inf``, or one of the matrix norms named in ``matrix`` (a subset of
    ``("fro", "nuc", "spectral")``) as that string; else a ``ValueError`` naming ``name``.

    The step rules take ``matrix=("spectral",)`` (the default), the Att-SVMs
    ``("fro", "nuc", "spectral")``, the vector norms ``()``.
    """
    if isinstance(norm, str):
        if norm == "inf":
            return math.inf
        if norm in matrix:
            return norm
    elif not isinstance(norm, bool) and isinstance(norm, numbers.Real) and float(norm) >= 1:
        return float(norm)
    names = "".join(f", {m!r}" for m in matrix)
    raise ValueError(f"{name} must be a real number >= 1, inf{names}, got {norm!r}")


def matrix_norm(W, norm, batch_ndim=None):
    r"""The norm of parameters, per trial: the one definition of the library's matrix norms
    (:func:`dual_norm`, the Att-SVMs' norms of :mod:`attnsvm.svm`, the regularization path's constraint).

    Parameters
    ----------
    W : ndarray or torch.Tensor (..., d1, d2), or any shape with ``batch_ndim``; the result is
        of the same kind (numpy arrays are computed with ``numpy.linalg``, tensors with
        ``torch.linalg``)
    norm : a real ``p >= 1``, ``inf`` / ``"inf"`` or ``"fro"`` (``p = 2``): the entrywise
        :math:`\ell_p` norm over the axes after the batch axes; ``"spectral"`` (largest
        singular value) or ``"nuc"`` (sum of the singular values): matrices only
    batch_ndim : int, optional
        Leading axes that index trials (default: all but the last two).

    Returns
    -------
    ndarray or torch.Tensor, shape ``W.shape[:batch_ndim]``
    """
    is_tensor = torch.is_tensor(W)
    if not is_tensor:
        W = as_float_array("W", W, min_ndim=2 if batch_ndim is None else 0)
    batch_ndim = W.ndim - 2 if batch_ndim is None else batch_ndim
    if isinstance(norm, str) and norm in ("spectral", "nuc"):
        if W.ndim - batch_ndim != 2:
            raise ValueError(f"norm={norm!r} needs matrices, got W of shape {tuple(W.shape)} "
                             f"with batch_ndim={batch_ndim}")
        order = 2 if norm == "spectral" else "nuc"
        return (torch.linalg.matrix_norm(W, ord=order) if is_tensor
                else np.linalg.norm(W, ord=order, axis=(-2, -1)))
    p = 2.0 if isinstance(norm, str) and norm == "fro" else parse_norm(norm)
    if is_tensor:
        return torch.linalg.vector_norm(W, ord=p, dim=tuple(range(batch_ndim, W.ndim)))
    return np.linalg.norm(W.reshape(W.shape[:batch_ndim] + (-1,)), ord=p, axis=-1)


def dual_exponent(norm):
    r"""The dual of a norm: the exponent :math:`q = p/(p-1)` of the entrywise :math:`\ell_p` norm
    (:math:`1 \leftrightarrow \infty`; ``"fro"`` is :math:`p = 2`), ``"nuc"`` for ``"spectral"``."""
    norm = 2.0 if isinstance(norm, str) and norm == "fro" else parse_norm(norm)
    if norm == "spectral":
        return "nuc"
    return math.inf if norm == 1 else (1.0 if norm == math.inf else norm / (norm - 1))


def dual_norm(g, norm, batch_ndim=1):
    r"""Dual norm :math:`\|g\|_* = \max_{\|d\|\le1}\langle g,d\rangle` per trial (torch):
    :func:`matrix_norm` in the dual exponent (:func:`dual_exponent`: :math:`q = p/(p-1)`, nuclear
    for spectral)."""
    return matrix_norm(g, dual_exponent(norm), batch_ndim)


def vector_norm(w, p, *, axis=-1):
    r"""Entrywise :math:`\ell_p` norm over ``axis`` (``p`` in :math:`[1, \infty]`)."""
    p = parse_norm(p, matrix=(), name="p")
    return np.linalg.norm(np.asarray(w, dtype=float), ord=p, axis=axis)
