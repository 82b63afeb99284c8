"""Execute one notebook of the book, strict, with given parameters (the seed and paper-size tests).

The build's own executor (papermill, kernel ``python3``, the notebook's folder as the working
directory, ``ATTNSVM_STRICT_CLAIMS=1``): a false claim raises
:class:`attnsvm.claims.ClaimError` in the kernel, and the test fails with the build's message
naming the cell, the claim and its numbers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from attnsvm_book._core import _describe_failure, _execute_one

REPO = Path(__file__).resolve().parents[1]


def run_strict(notebook: str, params: dict, tmp_path: Path, tag: str) -> Path:
    """Run ``notebook`` with ``params`` into ``tmp_path``; fail the test on any error."""
    out = tmp_path / f"{Path(notebook).stem}_{tag}.ipynb"
    failed = tmp_path / f"{Path(notebook).stem}_{tag}.failed.ipynb"
    try:
        _execute_one(REPO, notebook, params, out, failed, "python3", strict_claims=True)
    except Exception as exc:  # the message names the cell, the claim and its numbers
        pytest.fail(_describe_failure(notebook, exc), pytrace=False)
    assert out.is_file()
    return out
