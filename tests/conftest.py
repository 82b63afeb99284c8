"""Fixtures shared by several test files."""
from __future__ import annotations

import pytest


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

    from attnsvm import book

    reuse = os.environ.get("ATTNSVM_TEST_BUILD_DIR")
    if reuse:
        out = Path(reuse)
        return out, json.loads((out / "execution-report.json").read_text())
    out = tmp_path_factory.mktemp("full") / "_build"
    report = book.build(Path(__file__).resolve().parents[1], "quick", build_dir=out, log=print)
    return out, report
