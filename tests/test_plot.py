"""The book's figure helpers: colours, log axes, layout, and figures a reader's run shows."""
from __future__ import annotations

import base64
import copy

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attnsvm as A  # noqa: E402


def test_trial_band_colours_known_labels_whatever_their_case():
    fig, ax = A.plot.figure()
    t = np.arange(5.0)
    for label, key in [("W", "W"), ("(K,Q)", "KQ"), ("KQ", "KQ"), ("GD", "gd"), ("NGD", "ngd")]:
        line = A.plot.trial_band(ax, t, np.ones((5, 3)), label=label)
        assert matplotlib.colors.same_color(line.get_color(), A.plot.COLORS[key]), label
    with pytest.raises(ValueError, match="one row per step"):
        A.plot.trial_band(ax, t, np.ones((4, 3)))


def test_log_axes_drop_points_they_cannot_show():
    t = np.arange(0.0, 50.0)
    vals = np.exp(-t / 10)[:, None] * np.ones((1, 4))
    vals[0] = 0.0  # e.g. an excess risk of exactly zero at t = 0
    # axis made logarithmic before plotting
    fig, ax = A.plot.figure()
    ax.set(xscale="log", yscale="log")
    line = A.plot.trial_band(ax, t, vals)
    assert np.all(line.get_xdata() > 0) and len(line.get_xdata()) == 49
    # axis made logarithmic after plotting: fixed when the figure is saved
    fig, ax = A.plot.figure()
    line = A.plot.trial_band(ax, t, vals)
    ax.set(xscale="log", yscale="log")
    assert np.any(line.get_xdata() <= 0)
    A.plot._drop_unshowable(fig)
    assert np.all(line.get_xdata() > 0) and np.all(line.get_ydata() > 0)
    band = ax.collections[0]
    assert all(np.all(p.vertices > 0) for p in band.get_paths())


def test_more_than_two_panels_are_stacked_and_fonts_follow_the_width():
    fig, axes = A.plot.figure(ncols=3, width=13, height=3.6)
    assert axes.shape == (3,)
    w, h = fig.get_size_inches()
    assert w <= A.plot.MAX_WIDTH and h == pytest.approx(7.2)
    # two panels on the first row, the third centred under them
    b = [ax.get_position() for ax in axes]
    fig.canvas.draw()
    b = [ax.get_position() for ax in axes]
    assert b[0].y0 == pytest.approx(b[1].y0) and b[2].y1 < b[0].y0
    assert b[2].x0 > b[0].x0 and b[2].x1 < b[1].x1
    assert matplotlib.rcParams["font.size"] > A.plot.RC["font.size"]  # wider than the page
    A.plot.figure()
    assert matplotlib.rcParams["font.size"] == A.plot.RC["font.size"]
    assert matplotlib.rcParams["savefig.dpi"] >= 200
    with pytest.raises(ValueError, match="ncols"):
        A.plot.figure(ncols=0)


def test_save_or_glue_shows_a_png_that_the_book_pastes_once(monkeypatch):
    """One output: image/png for Jupyter and papermill, a glue record for the book."""
    from myst_nb.ext.glue import extract_glue_data_cell
    from nbformat.v4 import new_code_cell, new_output

    shown = []

    class Shell:  # stands for the Jupyter kernel
        pass

    import IPython
    import IPython.display

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw, metadata: shown.append((data, metadata)))
    fig, ax = A.plot.figure()
    ax.plot([1, 2], [1, 2])
    assert A.plot.save_or_glue(fig, "fig_key") is None
    (glue_data, glue_meta), (data, metadata) = shown
    png = base64.b64decode(data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert glue_data["application/papermill.record/image/png"] == data["image/png"]
    assert metadata["image/png"]["width"] == pytest.approx(
        int.from_bytes(png[16:20], "big") / A.plot.DPI * A.plot.CSS_PX_PER_INCH, abs=1)
    # what myst-nb does with them: the figure is glued under the key with its display width,
    # and neither output is displayed by the book (the {glue:figure} shows it once)
    cell = new_code_cell("A.plot.save_or_glue(fig, 'fig_key')")
    cell.outputs = [new_output("display_data", data=copy.deepcopy(d), metadata=copy.deepcopy(m))
                    for d, m in shown]
    glued = dict(extract_glue_data_cell(cell))
    assert glued["fig_key"]["data"]["image/png"] == data["image/png"]
    assert glued["fig_key"]["metadata"]["image/png"] == metadata["image/png"]
    assert cell.outputs == []
    with pytest.raises(ValueError, match="key"):
        A.plot.save_or_glue(fig, "")


@pytest.mark.slow
def test_executed_notebooks_show_their_figures_as_png_outputs(full_build):
    """What a reader's papermill run (and the .ipynb download) holds: image/png outputs."""
    import nbformat

    _, report = full_build
    for entry in report["notebooks"]:
        nb = nbformat.read(entry["executed_path"], as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        name = lambda o: o.get("metadata", {}).get("scrapbook", {}).get("name", "")  # noqa: E731
        glued = {name(o) for o in outputs
                 if "application/papermill.record/image/png" in o.get("data", {})}
        shown = {name(o).removesuffix(".shown") for o in outputs
                 if "image/png" in o.get("data", {})}
        assert glued <= shown, (entry["notebook"], sorted(glued - shown))


def test_trial_band_floor_shows_exact_zeros_on_a_log_axis():
    """floor: a series that is exactly 0 in some trials is drawn at the floor, and a log axis set
    after plotting renders (without it, matplotlib has no positive value to scale)."""
    import matplotlib
    matplotlib.use("Agg")
    fig, ax = A.plot.figure()
    vals = np.zeros((5, 3))
    vals[:, 0] = np.nan
    line = A.plot.trial_band(ax, np.arange(1, 6), vals, floor=1e-16)
    np.testing.assert_array_equal(line.get_ydata(), np.full(5, np.nan))   # median with a NaN trial
    line = A.plot.trial_band(ax, np.arange(1, 6), vals[:, 1:], floor=1e-16)
    np.testing.assert_array_equal(line.get_ydata(), np.full(5, 1e-16))
    ax.set(xscale="log", yscale="log")
    fig.canvas.draw()
    with pytest.raises(ValueError, match="floor"):
        A.plot.trial_band(ax, np.arange(1, 6), vals, floor=0.0)


def _clean_figure():
    fig, ax = A.plot.figure()
    t = np.arange(1.0, 100.0)
    ax.plot(t, t, label="GD")
    ax.plot(t, 2 * t, label="NGD")
    ax.plot(t, 3 * t, label="GD, norm", color=A.plot.COLORS["gd"], ls="--")
    ax.set(xscale="log", yscale="log", xlabel="step $t$", ylabel="loss")
    ax.legend()
    return fig, ax


def test_check_figure_passes_a_legible_figure():
    fig, _ = _clean_figure()
    assert A.plot.check_figure(fig) == []
    # a three-panel figure narrowed to the page keeps legible legends (fonts scale with width)
    fig, axes = A.plot.figure(ncols=3, width=13, height=3.6)
    for ax in axes:
        ax.plot([1, 2], [1, 2], label="GD")
        ax.legend()
    assert A.plot.check_figure(fig) == []
    with pytest.raises(ValueError, match="min_legend_pt"):
        A.plot.check_figure(fig, min_legend_pt=0)


def test_check_figure_finds_a_small_legend():
    """7.5 pt is caught (the rule is 8 pt); a 9 pt legend in a figure shown at 0.8 of its width
    is 7.2 pt as shown and caught too."""
    fig, ax = _clean_figure()
    ax.legend(fontsize=7.5)
    (p, *more) = A.plot.check_figure(fig)
    assert "7.5 pt as shown" in p and len(more) == 2
    fig, ax = A.plot.figure(width=A.plot.PAGE_WIDTH / 0.8)
    ax.plot([1, 2], [1, 2], label="GD")
    ax.legend(fontsize=9 / A.plot._shown_scale(fig, fig.canvas.get_renderer()) * 0.8 - 0.1)
    assert any("legend entry 'GD'" in q for q in A.plot.check_figure(fig))


def test_check_figure_finds_overlapping_labels():
    fig, ax = _clean_figure()
    ax.set_xscale("linear")
    ax.set_xticks(np.linspace(1, 99, 30))  # 30 labels of '12.34' on a 6.4-inch axis
    found = A.plot.check_figure(fig)
    assert found and all("tick label" in p and "overlaps" in p for p in found)
    fig, ax = _clean_figure()  # a text placed on the x-axis label
    ax.text(0.5, -0.13, "printed over", transform=ax.transAxes, ha="center")
    assert any("x label overlaps" in p or "overlaps axes 0 x label" in p
               for p in A.plot.check_figure(fig))
    # tick labels outside the view interval are not drawn, so they cannot overlap anything
    fig, ax = _clean_figure()
    ax.set_xticks([1e-3, 1e-3 * 1.01, 10])
    ax.set_xlim(1, 100)
    assert A.plot.check_figure(fig) == []


def test_check_figure_finds_lines_drawn_alike():
    fig, ax = _clean_figure()
    ax.plot([1, 2], [3, 4], label="PRGD", color=A.plot.COLORS["gd"])  # GD's colour, solid
    (p,) = A.plot.check_figure(fig)
    assert "['GD', 'PRGD'] are drawn alike" in p
    # a custom dash pattern is told apart from "--" (matplotlib names both "--")
    fig, ax = A.plot.figure()
    ax.plot([1, 2], [1, 2], ls="--", color="k", label="dashed")
    ax.plot([1, 2], [1, 3], ls=(0, (1, 2)), color="k", label="dotted")
    assert A.plot.check_figure(fig) == []
    ax.plot([1, 2], [2, 3], ls=(0, (1, 2)), color="k", label="dotted too")
    (p,) = A.plot.check_figure(fig)
    assert "['dotted', 'dotted too'] are drawn alike" in p


def test_save_or_glue_records_the_check(monkeypatch):
    import IPython
    import IPython.display

    shown = []
    (bad, ax), (good, _) = _clean_figure(), _clean_figure()  # before the stand-in kernel
    ax.legend(fontsize=5)
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw, metadata: shown.append(metadata))
    A.plot.save_or_glue(bad, "bad")
    assert len(shown[0][A.plot.CHECK_KEY]) == 3
    assert shown[0][A.plot.TEXT_KEY] == 5  # the legend's 5 pt, the smallest text
    A.plot.save_or_glue(good, "good")
    assert shown[2][A.plot.CHECK_KEY] == []


@pytest.mark.slow
def test_every_glued_figure_passes_the_figure_check(full_build):
    """Every figure of the quick build, as checked by save_or_glue when the notebook drew it:
    legends of at least 8 pt as shown, no text over text, labelled lines told apart."""
    import nbformat

    _, report = full_build
    checked, problems = 0, []
    for entry in report["notebooks"]:
        nb = nbformat.read(entry["executed_path"], as_version=4)
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                if "application/papermill.record/image/png" not in out.get("data", {}):
                    continue
                meta = out.get("metadata", {})
                name = meta.get("scrapbook", {}).get("name")
                assert A.plot.CHECK_KEY in meta, (entry["notebook"], name, "not checked")
                checked += 1
                problems += [f"{entry['notebook']} {name}: {p}" for p in meta[A.plot.CHECK_KEY]]
    assert checked >= 38, checked
    assert not problems, "\n".join(problems)


def test_log_axes_keep_reference_lines_in_axes_coordinates():
    """axhline spans x in axes coordinates (0 to 1): on a log x-axis its x = 0 is not a data
    point to drop (dropping it erased the line, e.g. sign descent's level in figure 33)."""
    fig, ax = A.plot.figure()
    ax.plot([1, 10, 100], [1, 2, 3])
    ax.set_xscale("log")
    line = ax.axhline(1.5, ls=":")
    A.plot._drop_unshowable(fig)
    assert len(line.get_xdata()) == 2
