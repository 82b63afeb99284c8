"""Fixtures shared by several test files."""
from __future__ import annotations

import pytest

from minibook import make_minibook


@pytest.fixture(scope="session")
def full_build(tmp_path_factory):
    """One full quick-profile build of the book per test session: ``(build_dir, report)``.

    Shared by ``test_book_full.py`` and ``test_browser.py`` so the book is built once.
    ``ATTNSVM_TEST_BUILD_DIR`` names an existing build (a directory holding ``html/`` and
    ``execution-report.json``) to reuse instead, for working on the browser checks.
    """
    import json
    import os
    from pathlib import Path

    import attnsvm_book as book

    reuse = os.environ.get("ATTNSVM_TEST_BUILD_DIR")
    if reuse:
        out = Path(reuse)
        return out, json.loads((out / "execution-report.json").read_text())
    from filelock import FileLock

    # Under pytest-xdist every worker has its own session: the build goes to the run's shared
    # base directory, under a lock, so the first worker that needs it builds and the others reuse.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "attnsvm-full" / "_build"
    with FileLock(str(shared / "attnsvm-full.lock")):
        done = out / "execution-report.json"
        if done.is_file():
            return out, json.loads(done.read_text())
        out.parent.mkdir(parents=True, exist_ok=True)
        # as `make book` does it: the notebooks as Dask tasks on a local cluster of 2 workers
        report = book.build(Path(__file__).resolve().parents[1], "quick", build_dir=out, log=print,
                            workers=2, progress_bar=False)
    return out, report


@pytest.fixture
def minibook(tmp_path):
    """A tiny book (tests/minibook.py): one good notebook that counts its executions."""
    return make_minibook(tmp_path)
