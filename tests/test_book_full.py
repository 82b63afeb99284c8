"""A full quick-profile build of the book, as `make book` does it, into a temporary directory.

This is the slowest test of the suite (it executes every notebook): it proves that the book
builds from the sources with warnings as errors, that every notebook of the table of contents ran
under the quick profile, and that the rendered pages carry the glued numbers.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

import attnsvm_book as book

REPO = Path(__file__).resolve().parents[1]


#: notebooks whose work is CPU-only (SVM solves, no training): they take no ``device``
CPU_ONLY = {"notebooks/ch02_attsvm.ipynb"}


def test_committed_notebooks_have_no_outputs_and_a_parameters_cell():
    """Outputs stripped, one parameters cell, and ``device`` exactly where the notebook trains
    (a device parameter that changes nothing would claim a device, issue 25 item 3)."""
    for nb_path in book.toc_notebooks(REPO):
        nb = nbformat.read(str(REPO / nb_path), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), nb_path
        tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{nb_path} needs exactly one cell tagged 'parameters'"
        params = book.notebook_parameters(REPO / nb_path)
        assert ("device" in params) == (nb_path not in CPU_ONLY), nb_path
        if nb_path in CPU_ONLY:             # and nothing in it asks for one
            assert "device" not in "".join(c.source for c in code), nb_path


@pytest.fixture(scope="module")
def built(full_build):
    """The session's full build (tests/conftest.py), shared with the browser test."""
    return full_build


@pytest.mark.slow
def test_every_notebook_executes_under_the_quick_profile(built):
    out, report = built
    names = [e["notebook"] for e in report["notebooks"]]
    assert names == book.toc_notebooks(REPO)
    assert all(e["status"] == "ok" and e["profile"] == "quick" for e in report["notebooks"])
    on_disk = json.loads((out / "execution-report.json").read_text())
    assert on_disk["notebooks"] == json.loads(json.dumps(report["notebooks"], default=str))


@pytest.mark.slow
def test_every_page_is_rendered(built):
    out, _ = built
    html = out / "html"
    assert (html / "index.html").is_file()
    for doc in book.toc_files(REPO):
        assert (html / f"{doc}.html").is_file(), doc


@pytest.mark.slow
def test_glued_numbers_reach_the_chapters(built):
    out, report = built
    text = (out / "html" / "book" / "ch01_separable.html").read_text()
    assert "glue:text" not in text and "::slope_gd" not in text
    # the value glued in the executed notebook is the one printed in the chapter
    executed = nbformat.read(report["notebooks"][0]["executed_path"], as_version=4)
    glued = {}
    for cell in executed.cells:
        for o in cell.get("outputs", []):
            key = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if key:
                glued[key] = next(v for k, v in o["data"].items() if k.endswith("text/plain"))
    assert "slope_gd" in glued
    assert f"{float(glued['slope_gd']):.3f}" in text


@pytest.mark.slow
def test_execution_report_page_lists_every_notebook(built):
    out, _ = built
    text = (out / "html" / "book" / "execution_report.html").read_text()
    for nb in book.toc_notebooks(REPO):
        assert nb in text
    assert re.search(r"torch", text)


@pytest.mark.slow
def test_a_downloaded_notebook_runs_against_the_downloaded_code(built, tmp_path):
    """What a reader downloads from the site: a notebook page's .ipynb (no machine path in it)
    and the book's code, attnsvm.tar.gz; the notebook runs with papermill against the library
    unpacked from the archive (PYTHONPATH, ahead of any installed copy), as the page says."""
    import os
    import subprocess
    import sys
    import tarfile

    out, _ = built
    html = out / "html"
    (archive,) = html.glob("_downloads/*/attnsvm.tar.gz")
    ipynb = html / "_sources" / "notebooks" / "ch04a_trajectories.ipynb"
    text = ipynb.read_bytes()  # (the archive's files: test_book.py)
    assert str(out.parent).encode() not in text and b"/tmp/" not in text
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    lib = tmp_path / "attnsvm" / "lib"
    assert (lib / "attnsvm" / "__init__.py").is_file()
    papermill = Path(sys.executable).with_name("papermill")
    proc = subprocess.run([str(papermill), str(ipynb), str(tmp_path / "out.ipynb"), "-p", "seed", "1"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(lib)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = json.loads((tmp_path / "out.ipynb").read_text())
    assert nb["metadata"]["papermill"]["exception"] is None
