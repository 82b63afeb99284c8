"""The reader's side of the build: repository links, the theme's pinned pair, numbering.

Fast checks of the build's configuration; the rendered pages themselves are checked in a real
browser by ``test_browser.py`` (slow tier).
"""
from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import yaml

from attnsvm_book import assets

REPO = Path(__file__).resolve().parents[1]


class _App:
    def __init__(self):
        self.roles = {}

    def add_role(self, name, fn, override=False):
        self.roles[name] = fn


def _config(url):
    return types.SimpleNamespace(extlinks={}, html_static_path=[], html_theme_options={
        "repository_url": url, "repository_branch": "main", "use_repository_button": False,
        "use_issues_button": False})


def test_without_a_repository_url_nothing_links_to_a_repository():
    app, config = _App(), _config("")
    assets._on_config_inited(app, config)
    assert "repo" not in config.extlinks
    assert config.html_static_path == [str(assets.STATIC)]  # the book's CSS and script
    assert {"attnsvm.css", "attnsvm.js"} <= {f.name for f in assets.STATIC.iterdir()}
    assert not any(config.html_theme_options[k] for k in assets.REPOSITORY_BUTTONS
                   if k in config.html_theme_options)
    assert not any((config.html_theme_options.get("launch_buttons") or {}).values())
    (node,), msgs = app.roles["repo"]("repo", ":repo:`tests/test_svm.py`", "tests/test_svm.py",
                                      1, None)
    assert node.astext() == "tests/test_svm.py" and node.tagname == "literal" and not msgs


def test_a_repository_url_turns_links_and_buttons_on():
    app, config = _App(), _config("https://github.com/you/attnsvm/")
    assets._on_config_inited(app, config)
    base, caption = config.extlinks["repo"]
    assert base % "tests/x.py" == "https://github.com/you/attnsvm/blob/main/tests/x.py"
    assert config.html_theme_options["use_repository_button"]
    assert config.html_theme_options["use_issues_button"] and not app.roles
    # the notebook pages' launch buttons turn on with it (a service the config names wins)
    assert config.html_theme_options["launch_buttons"] == assets.LAUNCH_SERVICES
    config = _config("https://github.com/you/attnsvm/")
    config.html_theme_options["launch_buttons"] = {"binderhub_url": "https://binder.example"}
    assets._on_config_inited(_App(), config)
    assert config.html_theme_options["launch_buttons"]["binderhub_url"] == "https://binder.example"


@pytest.mark.slow
def test_launch_buttons_open_the_pages_notebook_in_the_named_repository(tmp_path):
    """A book whose _config.yml names a repository renders a notebook page with a Binder and a
    Colab button, each opening that notebook in the repository (its path from the root)."""
    import subprocess
    import sys

    import nbformat

    root = tmp_path / "book"
    (root / "notebooks").mkdir(parents=True)
    (root / "_config.yml").write_text(yaml.safe_dump({
        "title": "mini", "execute": {"execute_notebooks": "off"},
        "repository": {"url": "https://github.com/you/attnsvm", "branch": "main"},
        "sphinx": {"extra_extensions": ["attnsvm_book.assets"]}}))
    (root / "_toc.yml").write_text(yaml.safe_dump({"format": "jb-book", "root": "intro",
                                                   "chapters": [{"file": "notebooks/nb"}]}))
    (root / "intro.md").write_text("# Intro\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A notebook"), nbformat.v4.new_code_cell("1")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(root / "notebooks" / "nb.ipynb"))
    exe = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(exe), "build", str(root), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = (root / "_build" / "html" / "notebooks" / "nb.html").read_text()
    assert "https://mybinder.org/v2/gh/you/attnsvm/main?urlpath=tree/notebooks/nb.ipynb" in html
    assert ("https://colab.research.google.com/github/you/attnsvm/blob/main/notebooks/nb.ipynb"
            in html)
    assert "https://github.com/you/attnsvm" in html  # the repository button


def test_a_placeholder_repository_url_stops_the_build():
    with pytest.raises(RuntimeError, match="placeholder"):
        assets._on_config_inited(_App(), _config("https://github.com/OWNER/attnsvm"))


def test_the_book_names_no_placeholder_repository():
    cfg = yaml.safe_load((REPO / "_config.yml").read_text())
    assert "OWNER" not in (cfg["repository"]["url"] or "")
    # Jupyter Book refuses the buttons without a URL: they are off, the build turns them on
    assert not cfg["html"]["use_repository_button"] and not cfg["html"]["use_issues_button"]


def _pins(name):
    pins = {}
    for line in (REPO / name).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _result(nb="notebooks/ch09_rates.ipynb", params=None, profile="quick"):
    from attnsvm_book import NotebookResult

    return NotebookResult(nb, profile, params or {}, "/x/" + nb, 12.5, False, "cpu", "ok",
                          worker="tcp://127.0.0.1:35649 (vm)")


def test_execution_report_has_status_up_front_and_no_worker_address():
    from attnsvm_book.build import report_markdown

    r = _result(params={"steps": 3000, "device": "cuda"})
    md = report_markdown({"generated": "now", "packages": {"numpy": "2"},
                          "notebooks": [dataclasses_asdict(r)]})
    header = md.splitlines()[0]
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[:2] == ["Notebook", "Status"] and "Worker" not in cols and "Parameters" not in cols
    assert "127.0.0.1" not in md and "tcp://" not in md
    # the parameters are in a table of their own, and the notebook links to its page
    assert "`steps=3000`, `device='cuda'`" in md
    assert "[ch09_rates](../notebooks/ch09_rates.ipynb)" in md
    assert "| `notebooks/ch09_rates.ipynb` | `steps=3000`" in md  # the path, as text, once


def dataclasses_asdict(r):
    import dataclasses

    return dataclasses.asdict(r)


def test_every_notebook_page_names_its_profile_under_its_title():
    from attnsvm_book.build import PROFILE_LINE_TAG, with_profile_line

    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = 1",
         "outputs": []},
        {"cell_type": "markdown", "metadata": {}, "source": "# Title\n\nText."},
        {"cell_type": "markdown", "metadata": {}, "source": "More."}]}
    profiles = {"quick": {"description": "CPU, minutes"}, "paper": {"description": "GPU"}}
    out = with_profile_line(nb, _result(), profiles)
    kinds = [c["metadata"].get("tags", []) for c in out["cells"]]
    assert kinds.index([PROFILE_LINE_TAG]) == 2  # right after the title's cell
    line = out["cells"][2]["source"]
    assert "`quick` profile (CPU, minutes)" in line and "own parameter defaults" in line
    assert "`paper`" in line and "execution_report.md" in line
    again = with_profile_line(out, _result(params={"n": 5}, profile="paper"), profiles)
    tagged = [c for c in again["cells"] if PROFILE_LINE_TAG in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and "`paper` profile (GPU), executed with `n=5`" in tagged[0]["source"]
    assert len(again["cells"]) == 4 and nb["cells"][1]["source"] == "# Title\n\nText."


def test_the_api_reference_has_one_page_per_module():
    import attnsvm
    from attnsvm_book.apidoc import API_MARKER, api_pages

    index_text = (REPO / "book" / "api.md").read_text()
    assert API_MARKER in index_text
    pages, index = api_pages("api", index_text)
    assert len(pages) == len(attnsvm._SUBMODULES) and API_MARKER not in index
    for k, sub in enumerate(attnsvm._SUBMODULES, start=1):
        name = f"{k:02d}_{sub}.md"
        assert f"```{{attnsvm-api}} attnsvm.{sub}\n" in pages[name]
        assert f"(api/{name})" in index
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    back = [c for part in toc["parts"] for c in part["chapters"] if c["file"] == "book/api"]
    assert back and back[0]["sections"] == [{"glob": "book/api/*"}]


def test_the_theme_pair_is_pinned_together():
    """requirements.txt and constraints.txt pin the same matching pair, and it is installed."""
    from importlib import metadata

    req, con = _pins("requirements.txt"), _pins("constraints.txt")
    for name in ("sphinx-book-theme", "pydata-sphinx-theme"):
        assert req[name] == con[name], name
        assert metadata.version(name) == req[name], f"{name}: run make venv"
    needs = [r for r in metadata.requires("sphinx-book-theme")
             if r.replace("_", "-").lower().startswith("pydata-sphinx-theme")]
    assert needs == [f"pydata-sphinx-theme=={req['pydata-sphinx-theme']}"], needs


def test_solver_warning_that_the_status_carries_is_not_printed():
    """cvxpy's "Solution may be inaccurate" (the status says so) is filtered where the SVMs are
    solved, so no notebook page prints it with a path of the build machine; other warnings
    still pass."""
    import warnings

    from attnsvm.svm._common import solve_quietly

    class Problem:
        def __init__(self, message):
            self.message = message

        def solve(self, solver, **opts):
            warnings.warn(self.message, UserWarning, stacklevel=2)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        solve_quietly(Problem("Solution may be inaccurate. Try another solver, ..."))
        solve_quietly(Problem("something else"))
    assert [str(w.message) for w in seen] == ["something else"]
