"""The book's command line beyond ``build``: ``-p`` checking, ``list``, ``run``, sweep tables and
``attnsvm.plot.sweep_plot``. Tiny notebooks in a throw-away book (``test_book.minibook``)."""
from __future__ import annotations

import json
import math

import nbformat
import pytest

import attnsvm_book as book
from minibook import REPO, _notebook

NB = REPO / "notebooks" / "ch01_separable.ipynb"


# ----------------------------------------------------------------------------- -p checking


def test_values_are_converted_to_the_type_of_the_default():
    got = book.validate_overrides(NB, [("trials", "3"), ("margin", "1"), ("device", "cpu"),
                                       ("lr_gd", "2e-1")])
    assert got == {"trials": 3, "margin": 1.0, "device": "cpu", "lr_gd": 0.2}
    assert isinstance(got["margin"], float)


@pytest.mark.parametrize("pair, needle", [
    (("bogus", "1"), "has no parameter 'bogus' (its parameters: n, d, margin"),
    (("steps", "abc"), "-p steps abc: expected an int"),
    (("steps", "2.5"), "expected an int"),
    (("steps", "True"), "expected an int"),
    (("margin", "x"), "expected a number"),
])
def test_bad_parameters_are_refused_in_one_line(pair, needle):
    with pytest.raises(book.ParameterError) as err:
        book.validate_overrides(NB, [pair], root=REPO)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert "notebooks/ch01_separable.ipynb" in str(err.value)


def test_lists_bools_and_none(tmp_path):
    path = tmp_path / "p.ipynb"
    _notebook(path, "shapes = [[6, 8], [3, 4]]\nflag = True\nn_train = 10\nname = 'x'\n"
                    "grid = list(range(3))", "pass")
    ok = book.validate_overrides(path, [("shapes", "[[1, 2]]"), ("flag", "false"),
                                        ("n_train", "None"), ("name", "3"), ("grid", "[7]")])
    assert ok == {"shapes": [[1, 2]], "flag": False, "n_train": None, "name": "3",
                  "grid": [7]}
    for pair in (("shapes", "[1, 2]"), ("shapes", "3"), ("flag", "1")):
        with pytest.raises(book.ParameterError):
            book.validate_overrides(path, [pair])
    swept = book.validate_overrides(path, [("shapes", "[[1, 2]],[[3, 4], [5, 6]]"),
                                           ("name", "'a,b',c")], sweep=True)
    assert swept == {"shapes": [[[1, 2]], [[3, 4], [5, 6]]], "name": ["a,b", "c"]}
    assert book.parameter_grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_profile_values_of_the_wrong_type_are_refused_before_anything_runs(minibook):
    import yaml

    prof = yaml.safe_load((minibook / "profiles.yml").read_text())
    prof["paper"]["notebooks"]["notebooks/good.ipynb"] = {"size": "big"}
    (minibook / "profiles.yml").write_text(yaml.safe_dump(prof))
    with pytest.raises(book.ParameterError, match=r"size='big': expected an int \(default 3\)"):
        book.build(minibook, "paper", render_html=False)
    assert not (minibook / "runs.txt").exists()


def test_cli_refuses_bad_parameters_before_running(minibook, capsys):
    for args, needle in ((["-p", "bogus", "1"], "no parameter 'bogus'"),
                         (["-p", "size", "abc"], "-p size abc: expected an int")):
        code = book.main(["run", "notebooks/good.ipynb", *args, "--root", str(minibook)])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and err.count("\n") == 1
    assert not (minibook / "runs.txt").exists() and not (minibook / "_build").exists()


def test_list_shows_defaults_and_marks_profile_values(minibook, capsys):
    assert book.main(["list", "--root", str(minibook), "--profile", "paper"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "notebooks/good.ipynb:"
    assert any("size" in line and "30" in line and "[profile paper; default 3]" in line
               for line in out)
    assert any("device" in line and "'cpu'" in line and "profile" not in line for line in out)


# ----------------------------------------------------------------------------- run


@pytest.mark.slow
def test_run_executes_and_renders_one_page_with_math_and_figures(minibook, capsys):
    path = minibook / "notebooks" / "fig.ipynb"
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("k = 2\ndevice = 'cpu'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# A figure\n\nMath: $\\alpha^2 = 4$."), params,
                nbformat.v4.new_code_cell(
                    "import matplotlib.pyplot as plt\n"
                    "from myst_nb import glue\nfig, ax = plt.subplots()\n"
                    "ax.plot(range(k))\nglue('fig_k', fig, display=False)\n"
                    "glue('k_sq', k * k, display=False)"),
                nbformat.v4.new_markdown_cell("```{glue:figure} fig_k\n:name: fig-k\n\n"
                                              "Line with $k=${glue:text}`k_sq`.\n```")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(path))
    code = book.main(["run", "notebooks/fig.ipynb", "-p", "k", "5", "--root", str(minibook)])
    out = capsys.readouterr().out
    assert code == 0, out
    executed = [line.split(": ", 1)[1] for line in out.splitlines()
                if line.startswith("executed notebook: ")]
    html = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("HTML page: ")]
    assert len(executed) == 1 and len(html) == 1
    assert book.glued_scalars(executed[0]) == {"k_sq": 25}
    page = open(html[0]).read()
    assert "<img" in page and "\\alpha^2" in page and "25" in page
    assert "mathjax" in page.lower()


def test_run_reports_a_failing_cell(minibook, capsys):
    _notebook(minibook / "notebooks" / "bad.ipynb", "k = 1", "raise RuntimeError('boom')")
    code = book.main(["run", "notebooks/bad.ipynb", "--root", str(minibook), "--no-render"])
    err = capsys.readouterr().err
    assert code == 1 and "notebooks/bad.ipynb: cell 1" in err and "RuntimeError: boom" in err


# ----------------------------------------------------------------------------- tables and plots


def test_glued_scalars_reads_numbers_strings_and_numpy_scalars(tmp_path):
    def rec(name, text, extra=None):
        data = {"application/papermill.record/text/plain": text, **(extra or {})}
        return {"output_type": "display_data", "data": data, "metadata": {
            "scrapbook": {"name": name, "mime_prefix": "application/papermill.record/"}}}

    cell = {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1,
            "outputs": [rec("a", "3"), rec("b", "np.float64(0.25)"), rec("c", "'x'"),
                        rec("d", "array([1, 2])"), rec("e", "nan"), rec("f", "np.True_"),
                        rec("g", "<Figure>", {"application/papermill.record/image/png": "..."}),
                        {"output_type": "stream", "name": "stdout", "text": "hi"}]}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    got = book.glued_scalars(path)
    assert set(got) == {"a", "b", "c", "e", "f"}
    assert got["a"] == 3 and got["b"] == 0.25 and got["c"] == "x" and got["f"] is True
    assert math.isnan(got["e"])


def test_sweep_plot_draws_one_line_per_group_and_counts_failures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from attnsvm.plot import sweep_plot

    rows = [{"steps": s, "lr": lr, "err": 1.0 / s + lr, "status": "ok"}
            for s in (100, 200, 400) for lr in (0.1, 1.0)]
    rows.append({"steps": 800, "lr": 0.1, "err": None, "status": "failed"})
    book.write_table(rows, tmp_path / "t.csv", log=lambda m: None)
    for table in (rows, book.read_table(tmp_path / "t.csv")):
        fig, ax = sweep_plot(table, "steps", "err", by="lr", logx=True)
        lines = ax.get_lines()
        assert len(lines) == 2
        xs, ys = lines[0].get_data()
        assert list(xs) == [100, 200, 400]
        assert ys == pytest.approx([1 / 100 + 0.1, 1 / 200 + 0.1, 1 / 400 + 0.1])
        assert "1 failed" in ax.get_title() and ax.get_xscale() == "log"
    with pytest.raises(TypeError, match="read_table"):          # the library never imports the build
        sweep_plot(tmp_path / "t.csv", "steps", "err", by="lr")
    with pytest.raises(ValueError, match="pass by="):
        sweep_plot(rows, "steps", "err")
    with pytest.raises(ValueError, match="y='nope' is not a column"):
        sweep_plot(rows, "steps", "nope")
