"""The build's units: profile resolution, cache key, execution, caching and failure reporting.

These tests build a small throw-away book in a temporary directory (two or three tiny
notebooks), so they run in seconds; the full book is built in ``test_book_full.py``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

import attnsvm_book as book

from minibook import REPO, _add_notebook, _notebook, _runs  # noqa: F401  (the tiny book of these tests)


# ----------------------------------------------------------------------------- profiles


def test_repository_profiles_cover_every_notebook_of_the_toc():
    for profile in book.load_profiles(REPO):
        table = book.resolve_profile(REPO, profile)
        assert set(table) == set(book.toc_notebooks(REPO))
    assert book.toc_notebooks(REPO), "the book has no notebook in _toc.yml"


@pytest.mark.slow
def test_profile_parameters_reach_the_notebook(minibook):
    book.build(minibook, "paper", render_html=False, log=lambda m: None)
    assert _runs(minibook) == ["30"]
    book.build(minibook, "quick", render_html=False, log=lambda m: None)
    assert _runs(minibook) == ["30", "3"]


def test_unknown_profile_is_a_clear_error_before_anything_runs(minibook):
    with pytest.raises(book.BuildError, match="unknown profile 'nope'.*paper.*quick"):
        book.build(minibook, "nope", render_html=False)
    assert not (minibook / "_build" / "executed").exists()


def test_unknown_notebook_is_a_clear_error(minibook):
    with pytest.raises(book.BuildError, match="unknown notebook 'missing'"):
        book.build(minibook, "quick", only="missing", render_html=False)
    assert _runs(minibook) == []


def test_undefined_parameter_is_a_clear_error_before_anything_runs(minibook):
    prof = yaml.safe_load((minibook / "profiles.yml").read_text())
    prof["quick"]["notebooks"]["notebooks/good.ipynb"] = {"sise": 4}
    (minibook / "profiles.yml").write_text(yaml.safe_dump(prof))
    with pytest.raises(book.BuildError, match=r"good\.ipynb parameters \['sise'\]"):
        book.build(minibook, "quick", render_html=False)
    assert _runs(minibook) == []


def test_profile_must_list_every_toc_notebook(minibook):
    _add_notebook(minibook, "other", "a = 1", "b = a + 1")
    prof = yaml.safe_load((minibook / "profiles.yml").read_text())
    del prof["quick"]["notebooks"]["notebooks/other.ipynb"]
    (minibook / "profiles.yml").write_text(yaml.safe_dump(prof))
    with pytest.raises(book.BuildError, match=r"no entry for notebooks \['notebooks/other.ipynb'\]"):
        book.resolve_profile(minibook, "quick")


def test_notebook_without_parameters_cell_is_rejected(minibook):
    nb = nbformat.read(str(minibook / "notebooks" / "good.ipynb"), as_version=4)
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, str(minibook / "notebooks" / "good.ipynb"))
    with pytest.raises(book.BuildError, match="no cell tagged 'parameters'"):
        book.resolve_profile(minibook, "quick")


# ----------------------------------------------------------------------------- cache


def test_cache_key_tracks_source_parameters_library_environment_and_device(minibook):
    nb = "notebooks/good.ipynb"
    base = book.cache_key(minibook, nb, {}, "cpu")
    assert book.cache_key(minibook, nb, {}, "cpu") == base
    assert book.cache_key(minibook, nb, {"size": 4}, "cpu") != base
    assert book.cache_key(minibook, nb, {}, "cuda") != base
    (minibook / "lib" / "attnsvm" / "mod.py").write_text("X = 2\n")
    lib_changed = book.cache_key(minibook, nb, {}, "cpu")
    assert lib_changed != base
    (minibook / "constraints.txt").write_text("numpy==2\n")
    env_changed = book.cache_key(minibook, nb, {}, "cpu")
    assert env_changed != lib_changed
    # outputs and execution counts are not part of the source
    path = minibook / nb
    nbj = json.loads(path.read_text())
    nbj["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi"}]
    nbj["cells"][1]["execution_count"] = 7
    path.write_text(json.dumps(nbj))
    assert book.cache_key(minibook, nb, {}, "cpu") == env_changed
    nbj["cells"][1]["source"] = "pass"
    path.write_text(json.dumps(nbj))
    assert book.cache_key(minibook, nb, {}, "cpu") != env_changed


@pytest.mark.slow
def test_rebuild_with_nothing_changed_executes_nothing(minibook):
    lines = []
    r1 = book.build(minibook, "quick", render_html=False, log=lines.append)
    r2 = book.build(minibook, "quick", render_html=False, log=lines.append)
    assert _runs(minibook) == ["3"]
    assert [n["cached"] for n in r1["notebooks"]] == [False]
    assert [n["cached"] for n in r2["notebooks"]] == [True]
    assert "cached" in lines[-1]
    # --force re-executes; a source change re-executes
    book.build(minibook, "quick", force=True, render_html=False, log=lines.append)
    assert _runs(minibook) == ["3", "3"]
    (minibook / "lib" / "attnsvm" / "mod.py").write_text("X = 3\n")
    book.build(minibook, "quick", render_html=False, log=lines.append)
    assert _runs(minibook) == ["3", "3", "3"]


def test_report_has_one_entry_per_notebook_with_the_documented_fields(minibook):
    book.build(minibook, "quick", render_html=False, log=lambda m: None)
    report = json.loads((minibook / "_build" / "execution-report.json").read_text())
    (entry,) = report["notebooks"]
    for field in ("notebook", "profile", "parameters", "executed_path", "seconds", "cached",
                  "device", "status"):
        assert field in entry
    assert entry["notebook"] == "notebooks/good.ipynb"
    assert entry["status"] == "ok" and entry["device"] == "cpu" and entry["profile"] == "quick"
    assert Path(entry["executed_path"]).is_file()
    assert "torch" in report["packages"]


# ----------------------------------------------------------------------------- failures


@pytest.mark.slow
def test_failing_notebook_fails_the_build_naming_it_and_caches_nothing(minibook):
    _add_notebook(minibook, "broken", "k = 0", "x = 1\ny = x / k")
    with pytest.raises(book.NotebookFailed) as err:
        book.build(minibook, "quick", log=lambda m: None)
    msg = str(err.value)
    assert "notebooks/broken.ipynb" in msg and "cell 1" in msg and "ZeroDivisionError" in msg
    assert "nothing was rendered" in msg
    assert not (minibook / "_build" / "cache" / "quick" / "notebooks" / "broken.ipynb.json").exists()
    assert not (minibook / "_build" / "executed" / "quick" / "notebooks" / "broken.ipynb").exists()
    assert (minibook / "_build" / "failed" / "quick" / "notebooks" / "broken.ipynb").is_file()
    assert not (minibook / "_build" / "html").exists()
    report = json.loads((minibook / "_build" / "execution-report.json").read_text())
    status = {e["notebook"]: e["status"] for e in report["notebooks"]}
    assert status == {"notebooks/good.ipynb": "ok", "notebooks/broken.ipynb": "failed"}
    # the next build executes it again (nothing was cached), and fails again
    with pytest.raises(book.NotebookFailed):
        book.build(minibook, "quick", render_html=False, log=lambda m: None)


def test_cli_exits_nonzero_naming_the_notebook(minibook, capsys):
    _add_notebook(minibook, "broken", "k = 0", "raise RuntimeError('boom')")
    code = book.main(["build", "--root", str(minibook), "--no-render", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "notebooks/broken.ipynb" in err and "RuntimeError: boom" in err


def test_interrupted_execution_leaves_no_cache_and_no_partial_file(minibook, monkeypatch):
    import papermill

    def interrupted(inp, out, **kw):
        Path(out).write_text("{partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    with pytest.raises(KeyboardInterrupt):
        book.build(minibook, "quick", render_html=False, log=lambda m: None)
    executed = minibook / "_build" / "executed" / "quick" / "notebooks"
    assert not (executed / "good.ipynb").exists()
    assert not list(executed.glob(".tmp-*"))
    assert not (minibook / "_build" / "cache" / "quick" / "notebooks" / "good.ipynb.json").exists()


@pytest.mark.slow
def test_only_executes_one_notebook_and_fails_to_render_when_others_are_not_cached(minibook,
                                                                                    capsys):
    _add_notebook(minibook, "other", "a = 1", "b = a + 1")
    with pytest.raises(book.BuildError, match=r"cannot render: 1 notebook.*good\.ipynb"):
        book.build(minibook, "quick", only="other", log=lambda m: None)
    report = json.loads((minibook / "_build" / "execution-report.json").read_text())
    status = {e["notebook"]: e["status"] for e in report["notebooks"]}
    assert status == {"notebooks/good.ipynb": "skipped", "notebooks/other.ipynb": "ok"}
    assert _runs(minibook) == []
    assert not (minibook / "_build" / "html").exists()
    # the executed notebook was cached: with --no-render the same call succeeds, from the cache
    report = book.build(minibook, "quick", only="other", render_html=False, log=lambda m: None)
    assert [e["cached"] for e in report["notebooks"]] == [False, True]
    # the command line exits non-zero with one line saying why
    code = book.main(["build", "--root", str(minibook), "--only", "other", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: cannot render") and err.count("\n") == 1


def test_resolve_device():
    assert book.resolve_device("cpu") == "cpu"
    assert book.resolve_device("auto") in ("cpu", "cuda")


def test_partial_toc_builds_only_its_notebooks(minibook):
    _add_notebook(minibook, "other", "a = 1", "b = a + 1")
    part = minibook / "part_toc.yml"
    part.write_text(yaml.safe_dump({"format": "jb-book", "root": "book/intro",
                                    "chapters": [{"file": "notebooks/other"}]}))
    report = book.build(minibook, "quick", toc=part, render_html=False, log=lambda m: None)
    assert [e["notebook"] for e in report["notebooks"]] == ["notebooks/other.ipynb"]
    assert _runs(minibook) == []
    # the full table of contents still insists on complete profiles
    with pytest.raises(book.BuildError, match="not in _toc.yml"):
        book.resolve_profile(minibook, "quick", ["notebooks/good.ipynb"])


def test_parameters_cell_is_parsed_whatever_its_comments(tmp_path):
    path = tmp_path / "p.ipynb"
    _notebook(path, "a = 1    # note (6 = all)\nb: int = 2\nc, d = 3, 4\nname = 'x=y'", "pass")
    params = book.notebook_parameters(path)
    assert params == {"a": "1", "b": "2", "name": "'x=y'"}
    _notebook(path, "a = (", "pass")
    with pytest.raises(book.BuildError, match="not valid Python"):
        book.notebook_parameters(path)


def test_staging_writes_the_report_page(minibook):
    report = book.build(minibook, "quick", render_html=False, log=lambda m: None)
    results = [book.NotebookResult(**e) for e in report["notebooks"]]
    stage_dir = minibook / "_build" / "stage"
    book.stage(minibook, results, report, stage_dir)
    staged = yaml.safe_load((stage_dir / "_config.yml").read_text())
    assert staged == yaml.safe_load((minibook / "_config.yml").read_text())
    page = (stage_dir / "book" / "execution_report.md").read_text()
    assert "notebooks/good.ipynb" in page and book.REPORT_MARKER not in page


def test_mathjax_comes_from_the_pinned_offline_extension():
    """MathJax is sphinx-mathjax-offline's copy (a relative path, no network); the browser tests
    (test_browser.py) check that every page typesets with it."""
    import importlib

    ext = importlib.import_module("sphinx-mathjax-offline")
    dist = Path(ext.__file__).parent / "static" / "mathjax"
    assert (dist / "tex-chtml.js").is_file()
    # the TeX extensions MathJax loads lazily (boldsymbol for the book's macros) and the fonts
    assert (dist / "input" / "tex" / "extensions" / "boldsymbol.js").is_file()
    assert any((dist / "output" / "chtml" / "fonts").rglob("*.woff"))

    class App:
        class config:
            pass

        def connect(self, *a):
            pass

    app = App()
    ext.setup(app)
    assert app.config.mathjax_path == "mathjax/tex-chtml.js"  # relative to _static
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "_config.yml").read_text())
    assert "sphinx-mathjax-offline" in config["sphinx"]["extra_extensions"]
    assert "mathjax_path" not in config["sphinx"]["config"]  # nothing overrides it
    # Jupyter Book 1.x sets mathjax_path only when _config.yml asks for MathJax 2
    from jupyter_book.config import get_final_config

    final, _ = get_final_config(user_yaml=config, cli_config={"latex_individualpages": False},
                                sourcedir=Path(__file__).resolve().parents[1])
    assert "mathjax_path" not in final


def test_strip_removes_outputs_and_keeps_sources(minibook):
    book.build(minibook, "quick", render_html=False, log=lambda m: None)
    executed = minibook / "_build" / "executed" / "quick" / "notebooks" / "good.ipynb"
    copy = minibook / "copy.ipynb"
    shutil.copy(executed, copy)
    assert book.strip_outputs(copy) is True
    nb = nbformat.read(str(copy), as_version=4)
    assert all(not c.outputs and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    src = nbformat.read(str(executed), as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in src.cells]
    assert book.strip_outputs(copy) is False
    assert book.main(["strip", str(copy)]) == 0
