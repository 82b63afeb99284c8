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


def test_mathjax_4_ships_with_the_book():
    """MathJax 4 is the book's own copy (static/mathjax, a relative path, no network), with the
    TeX extensions it loads lazily (boldsymbol for the book's macros) and its fonts where
    _config.yml's loader path points; display formulas break into lines. The browser tests
    (test_browser.py) check that every page typesets with it."""
    from attnsvm_book import assets

    dist = assets.STATIC / "mathjax"
    head = (dist / "tex-chtml.js").read_text()[:200000]
    assert 'version="4.' in head.replace("'", '"') or "4.1." in head, "not MathJax 4"
    assert (dist / "input" / "tex" / "extensions" / "boldsymbol.js").is_file()
    fonts = dist / "fonts" / "mathjax-newcm-font" / "chtml"
    assert any((fonts / "woff2").glob("*.woff2")) and any((fonts / "dynamic").glob("*.js"))
    size = sum(f.stat().st_size for f in dist.rglob("*") if f.is_file())
    assert size < 6e6, f"the shipped MathJax grew to {size / 1e6:.1f} MB"

    class Config:
        html_static_path: list = []
        html_theme_options: dict = {}
        mathjax_path = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"

    class App:
        def add_role(self, *a, **k):
            pass

    config = Config()
    assets._on_config_inited(App(), config)
    assert config.mathjax_path == "mathjax/tex-chtml.js"  # relative to _static: the copy
    assert str(assets.STATIC) in config.html_static_path
    book_config = yaml.safe_load((Path(__file__).resolve().parents[1] / "_config.yml").read_text())
    assert "sphinx-mathjax-offline" not in book_config["sphinx"]["extra_extensions"]
    mj = book_config["sphinx"]["config"]["mathjax3_config"]
    assert mj["output"]["displayOverflow"] == "linebreak"
    assert mj["loader"]["paths"]["fonts"] == "[mathjax]/fonts"
    # Jupyter Book 1.x sets mathjax_path only when _config.yml asks for MathJax 2
    from jupyter_book.config import get_final_config

    final, _ = get_final_config(user_yaml=book_config, cli_config={"latex_individualpages": False},
                                sourcedir=Path(__file__).resolve().parents[1])
    assert "mathjax_path" not in final


def test_each_page_gets_one_copy_of_each_script():
    """sphinx-thebe's inline configuration (``const THEBE_JS_URL``) reached every page twice (a
    SyntaxError on load); an inline script added with file name None and again with "" counts
    as the same script, and is kept once."""
    from sphinx.builders.html._assets import _JavaScript

    from attnsvm_book import assets

    body = 'const THEBE_JS_URL = "x"'
    files = [_JavaScript("_static/a.js"), _JavaScript(None, body=body),
             _JavaScript("", body=body), _JavaScript("_static/a.js"),
             _JavaScript("", body="let y = 1")]
    context = {"script_files": files}
    assets._one_copy_of_each_script(None, "p", "page.html", context, None)
    assert [(j.filename or "", j.attributes.get("body")) for j in context["script_files"]] == [
        ("_static/a.js", None), ("", body), ("", "let y = 1")]


def test_staged_notebooks_carry_no_machine_path_and_offer_the_code(minibook):
    """A reader downloads the staged notebook: papermill's absolute input and output paths (the
    build machine's) are gone from its metadata, and the line under its title offers the
    book's code (the staged archive) with the two commands that run it."""
    import tarfile

    from attnsvm_book.build import PROFILE_LINE_TAG, SOURCE_ARCHIVE

    report = book.build(minibook, "quick", render_html=False, log=lambda m: None)
    results = [book.NotebookResult(**e) for e in report["notebooks"]]
    executed = json.loads(Path(results[0].executed_path).read_text())
    assert str(minibook) in json.dumps(executed["metadata"])  # papermill wrote them: can fail
    stage_dir = minibook / "_build" / "stage"
    book.stage(minibook, results, report, stage_dir)
    staged = json.loads((stage_dir / "notebooks" / "good.ipynb").read_text())
    assert str(minibook) not in json.dumps(staged["metadata"])
    assert "input_path" not in staged["metadata"]["papermill"]
    line = next(c for c in staged["cells"] if PROFILE_LINE_TAG in c["metadata"].get("tags", []))
    text = "".join(line["source"])
    assert f"{{download}}`attnsvm.tar.gz <../{SOURCE_ARCHIVE}>`" in text
    assert 'pip install "./attnsvm.tar.gz[book]"' in text and "papermill good.ipynb" in text
    archive = stage_dir / SOURCE_ARCHIVE
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert {"attnsvm/lib/attnsvm/mod.py", "attnsvm/notebooks/good.ipynb",
            "attnsvm/profiles.yml"} <= set(names)
    assert not [n for n in names if "/_build/" in n or "__pycache__" in n]
    first = archive.read_bytes()
    book.stage(minibook, results, report, stage_dir)
    assert archive.read_bytes() == first  # the same sources, the same bytes


def test_source_archive_of_the_book_installs_and_names_no_machine_path(tmp_path):
    """The archive of this repository holds what ``pip install`` and the notebooks need, no
    build output or virtual environment, and no text file in it names the build machine's
    checkout."""
    import tarfile

    from attnsvm_book.build import source_archive

    archive = source_archive(REPO, tmp_path / "attnsvm.tar.gz")
    assert archive.stat().st_size < 20e6
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {"attnsvm/pyproject.toml", "attnsvm/lib/attnsvm/__init__.py",
                "attnsvm/notebooks/ch01_separable.ipynb", "attnsvm/requirements.txt",
                "attnsvm/lib/attnsvm_book/static/mathjax/tex-chtml.js"} <= set(members)
        assert not [n for n in members if n.split("/")[1] in ("_build", ".venv", ".git")]
        leaks = [n for n, m in members.items() if n.endswith((".py", ".ipynb", ".md", ".yml"))
                 and str(REPO) in tar.extractfile(m).read().decode("utf-8", "replace")]
    assert not leaks, leaks


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
