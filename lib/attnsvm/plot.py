"""One figure style for the whole book.

Every figure in the book is made with these helpers so that colours, line styles, fonts and the
summary over trials (median line, interquartile band) are the same everywhere. Optimizers have
fixed colours (:data:`COLORS`), so GD is the same colour in every chapter.
"""
from __future__ import annotations

import base64
import io
import os
import struct

import numpy as np

__all__ = ["COLORS", "LABELS", "RC", "use_style", "figure", "trial_band", "save_or_glue"]

#: fixed colour per method or quantity, shared by every chapter
COLORS = {
    "gd": "#1f77b4", "ngd": "#d62728", "ngd_param": "#e377c2", "polyak": "#2ca02c",
    "adam": "#9467bd", "sign": "#8c564b", "sgd": "#1f77b4", "sngd": "#d62728", "sps": "#2ca02c",
    "prgd": "#bcbd22",
    "W": "#1f77b4", "KQ": "#ff7f0e", "prompt": "#17becf", "theory": "#555555",
}

#: display name of each optimizer of the figures and tables (chapters 9 and 10; the stochastic
#: optimizers of chapter 12)
LABELS = {"gd": "GD", "ngd": "NGD", "polyak": "Polyak", "adam": "Adam",
          "polyak_star": "Polyak $\\mathcal{L}-\\mathcal{L}^\\star$",
          "sgd": "SGD", "sngd": "SNGD", "sps": "SPS"}

#: the book's matplotlib settings. Figures are rendered at 200 dpi and shown in the book at
#: :data:`CSS_PX_PER_INCH` CSS pixels per inch (at most the page width), so a font of ``f``
#: points reads as about ``1.4 f`` pixels on a laptop screen for a figure no wider than the page.
RC = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 200,
    "savefig.dpi": 200,
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
}
#: dots per inch of the PNG that the book and the notebooks show
DPI = 200
#: the widest figure, in inches (wider requests are narrowed; more than two panels are stacked)
MAX_WIDTH = 10.0
#: the width of the book's text column, in inches at :data:`CSS_PX_PER_INCH`
PAGE_WIDTH = 7.5
#: CSS pixels per inch of figure at which figures are displayed (HTML ``width``)
CSS_PX_PER_INCH = 100


def use_style(width: float | None = None):
    """Apply the book's matplotlib settings (:data:`RC`) for the rest of the session.

    ``width`` (inches) scales the fonts of a figure wider than the page
    (:data:`PAGE_WIDTH`): it is shown narrowed to the page, and its text should still read at
    the size of a page-wide figure's.
    """
    import matplotlib  # deferred: matplotlib is heavy to import

    scale = 1.0 if width is None else max(1.0, float(width) / PAGE_WIDTH)
    matplotlib.rcParams.update(RC)
    matplotlib.rcParams.update({k: RC[k] * scale for k in _FONT_KEYS})


_FONT_KEYS = ("font.size", "axes.titlesize", "axes.labelsize", "legend.fontsize",
              "xtick.labelsize", "ytick.labelsize")


def figure(ncols: int = 1, nrows: int = 1, *, width: float | None = None,
           height: float | None = None, **kwargs):
    """A new figure in the book's style: ``fig, axes = figure(ncols=2)``.

    Parameters
    ----------
    ncols, nrows : int
        Panels. A single row of more than two panels is laid out two per row (the last row
        centred), so each panel keeps a legible width; ``axes`` is still a 1-d array of
        ``ncols`` axes in reading order.
    width, height : float, optional
        Inches. ``width`` is capped at :data:`MAX_WIDTH`; ``height`` is per row of panels.
    **kwargs
        Passed to :func:`matplotlib.pyplot.subplots` (not available for a stacked layout).
    """
    import matplotlib.pyplot as plt  # deferred: matplotlib is heavy to import

    if int(ncols) < 1 or int(nrows) < 1:
        raise ValueError(f"ncols and nrows must be >= 1, got ncols={ncols}, nrows={nrows}")
    ncols, nrows = int(ncols), int(nrows)
    stacked = nrows == 1 and ncols > 2
    rows = -(-ncols // 2) if stacked else nrows
    if width is None:
        width = MAX_WIDTH if stacked else 6.4 * min(ncols, 1.5)
    w = min(float(width), MAX_WIDTH)
    h = (height if height is not None else 3.6) * rows
    use_style(w)
    if not stacked:
        fig, axes = plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False,
                                 layout="constrained", **kwargs)
        return fig, (axes[0, 0] if axes.size == 1 else axes.squeeze())
    if kwargs:
        raise ValueError(f"figure(ncols={ncols}) stacks its panels; unsupported arguments "
                         f"{sorted(kwargs)}")
    fig = plt.figure(figsize=(w, h), layout="constrained")
    grid = fig.add_gridspec(rows, 4)
    axes = []
    for k in range(ncols):
        r, c = divmod(k, 2)
        last_alone = r == rows - 1 and ncols % 2 == 1
        axes.append(fig.add_subplot(grid[r, 1:3] if last_alone else grid[r, 2 * c:2 * c + 2]))
    return fig, np.array(axes, dtype=object)


def _color_for(label) -> str | None:
    """:data:`COLORS` entry of a label: exact, then lower case, then letters only ("(K,Q)")."""
    text = str(label)
    letters = "".join(ch for ch in text if ch.isalnum())
    for cand in (text, text.lower(), letters, letters.lower()):
        if cand in COLORS:
            return COLORS[cand]
    return None


def trial_band(ax, steps, values, *, label=None, color=None, quantiles=(0.25, 0.75), floor=None,
               **kwargs):
    """Plot the median over trials of ``values`` (shape (K, B)) with an interquartile band.

    Parameters
    ----------
    ax : matplotlib Axes
    steps : array_like, shape (K,)
    values : array_like, shape (K, B) or (K,)
        One column per trial.
    label, color : optional
        ``color`` defaults to :data:`COLORS` ``[label]`` when the label is a known name
        (``"W"``, ``"KQ"`` or ``"(K,Q)"``, ``"GD"``, ...).
    quantiles : (float, float)
        The band's lower and upper quantiles over trials.
    floor : float > 0, optional
        Values below ``floor`` (e.g. a gap that is exactly 0 in some trial) are drawn at
        ``floor``, so a log axis shows them; a figure that uses it says so in its caption.
        NaN stays NaN.

    Notes
    -----
    On an axis that is already logarithmic, points that the axis cannot show (``steps <= 0``
    on a log x-axis, values ``<= 0`` on a log y-axis) are left out rather than clipped, so no
    vertical drop is drawn; :func:`save_or_glue` does the same for axes made logarithmic later.
    """
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if steps.ndim != 1 or values.shape[0] != steps.shape[0]:
        raise ValueError(f"values must have one row per step: steps has shape {steps.shape}, "
                         f"values has shape {values.shape}")
    if floor is not None:
        if not (isinstance(floor, (int, float)) and floor > 0):
            raise ValueError(f"floor must be a positive number, got {floor!r}")
        values = np.where(np.isnan(values), np.nan, np.maximum(values, floor))
    if color is None and label is not None:
        color = _color_for(label)
    if ax.get_xscale() == "log":
        keep = steps > 0
        steps, values = steps[keep], values[keep]
    med = np.median(values, axis=1)
    if ax.get_yscale() == "log":
        med = np.where(med > 0, med, np.nan)
    (line,) = ax.plot(steps, med, label=label, color=color, **kwargs)
    if values.shape[1] > 1:
        lo, hi = np.quantile(values, quantiles, axis=1)
        if ax.get_yscale() == "log":
            ok = (lo > 0) & (hi > 0)
            lo, hi = np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    return line


def _drop_unshowable(fig) -> None:
    """On log axes, remove the points of lines and bands that the axis would clip.

    Matplotlib clips ``x <= 0`` (or ``y <= 0``) on a log axis to a tiny positive number, which
    draws a vertical (or horizontal) drop to the axis edge; the book drops such points instead.
    """
    from matplotlib.collections import PolyCollection  # deferred: matplotlib is heavy to import
    from matplotlib.lines import Line2D  # deferred: matplotlib is heavy to import

    for ax in fig.axes:
        logx, logy = ax.get_xscale() == "log", ax.get_yscale() == "log"
        if not (logx or logy):
            continue
        for art in ax.get_children():
            if art.get_transform() is not ax.transData:
                continue  # axhline, axvline, ...: in axes coordinates along one direction
            if isinstance(art, Line2D):
                x = np.asarray(art.get_xdata(), dtype=float)
                y = np.asarray(art.get_ydata(), dtype=float)
                if x.shape != y.shape or x.size < 2:
                    continue
                bad = np.zeros(x.shape, bool)
                if logx:
                    bad |= ~(x > 0)
                if logy:
                    bad |= ~(y > 0)
                if bad.any():
                    art.set_data(x[~bad], y[~bad])
            elif isinstance(art, PolyCollection):
                changed = False
                verts = []
                for path in art.get_paths():
                    v = path.vertices
                    ok = np.ones(len(v), bool)
                    if logx:
                        ok &= v[:, 0] > 0
                    if logy:
                        ok &= v[:, 1] > 0
                    if not ok.all():
                        changed = True
                    verts.append(v[ok] if ok.sum() >= 3 else np.zeros((0, 2)))
                if changed:
                    PolyCollection.set_verts(art, verts, closed=False)


#: the smallest legend font, in points as the figure is shown in the book (a figure wider than
#: :data:`PAGE_WIDTH` is shown narrowed to the page, and its fonts with it)
MIN_LEGEND_PT = 8.0
#: the metadata key under which :func:`save_or_glue` records :func:`check_figure`'s findings
CHECK_KEY = "attnsvm_figure_check"
#: the metadata key under which :func:`save_or_glue` records the smallest text of the figure
#: (points, in the saved PNG of ``DPI`` dots per inch): the book's browser test turns it into
#: CSS pixels as the figure is shown on a phone
TEXT_KEY = "attnsvm_min_text_pt"


def _shown_scale(fig, renderer) -> float:
    """The factor by which the book narrows ``fig`` (saved with ``bbox_inches="tight"``)."""
    width_in = fig.get_tightbbox(renderer).width
    return min(1.0, PAGE_WIDTH / width_in) if width_in > 0 else 1.0


def _in_view(axis, text, which: int) -> bool:
    """Whether a tick label sits at a tick inside its axis' view interval (matplotlib keeps the
    labels of ticks outside it, and does not draw them)."""
    lo, hi = sorted(axis.get_view_interval())
    v = text.get_position()[which]
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    return lo - tol <= v <= hi + tol


def _label_texts(fig):
    """``[(description, Text)]``: every tick label, axis label, title, axes text and legend
    entry of ``fig`` that is drawn and non-empty."""
    out = []

    def add(what, t):
        if t is not None and t.get_visible() and t.get_text().strip():
            out.append((what, t))

    for k, ax in enumerate(fig.axes):
        name = f"axes {k}"
        for axis, which, letter in ((ax.xaxis, 0, "x"), (ax.yaxis, 1, "y")):
            if not axis.get_visible():
                continue
            for minor in (False, True):
                for tick in axis.get_minor_ticks() if minor else axis.get_major_ticks():
                    for lab in (tick.label1, tick.label2):
                        if lab.get_visible() and tick.get_visible() and _in_view(axis, lab, which):
                            add(f"{name} {letter} tick label {lab.get_text()!r}", lab)
            add(f"{name} {letter} label", axis.label)
        for loc, title in (("", ax.title), ("left ", ax._left_title), ("right ", ax._right_title)):
            add(f"{name} {loc}title", title)
        for t in ax.texts:
            add(f"{name} text {t.get_text()!r}", t)
    for t in fig.texts:
        add(f"figure text {t.get_text()!r}", t)
    if getattr(fig, "_suptitle", None) is not None:
        add("suptitle", fig._suptitle)
    return out


def _legends(fig):
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return [leg for leg in legends if leg is not None and leg.get_visible()]


def _line_style(line):
    """What tells a labelled line apart: its colour (RGBA), dash pattern and marker."""
    from matplotlib.colors import to_rgba  # deferred: matplotlib is heavy to import

    # get_linestyle() names every custom dash pattern "--": compare the pattern itself
    offset, dashes = getattr(line, "_unscaled_dash_pattern", (0, None))
    ls = (line.get_linestyle(), None if dashes is None else tuple(float(d) for d in dashes))
    marker = line.get_marker()
    return (tuple(round(c, 3) for c in to_rgba(line.get_color())), ls,
            None if marker in (None, "None", "", " ") else str(marker))


def check_figure(fig, *, min_legend_pt: float = MIN_LEGEND_PT) -> list[str]:
    """The legibility problems of a figure, as sentences (an empty list: none found).

    Three rules, checked after drawing the figure (so that matplotlib's text positions and
    bounding boxes are the ones saved):

    1. **Legends are legible**: every legend entry's font is at least ``min_legend_pt`` points as
       the figure is shown in the book, that is its size times ``min(1, PAGE_WIDTH / w)`` for a
       figure ``w`` inches wide once saved (:data:`PAGE_WIDTH`: wider figures are narrowed).
    2. **No text printed over other text**: the bounding boxes of the drawn tick labels, axis
       labels, titles, axes texts and legend entries of the whole figure do not overlap (by more
       than half a point in both directions, so that touching boxes pass).
    3. **Labelled lines can be told apart**: within one axes, two lines with different legend
       labels differ in colour, dash pattern or marker (e.g. GD and PRGD in the same colour and
       both solid fail; one method's two quantities, solid and dashed, pass).

    Parameters
    ----------
    fig : matplotlib Figure
    min_legend_pt : float
        The smallest legend font allowed, in points as shown.

    Returns
    -------
    list of str
        One sentence per problem, naming the axes and the text or lines concerned.
    """
    from matplotlib.lines import Line2D  # deferred: matplotlib is heavy to import

    if not (isinstance(min_legend_pt, (int, float)) and min_legend_pt > 0):
        raise ValueError(f"min_legend_pt must be a positive number, got {min_legend_pt!r}")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    scale = _shown_scale(fig, renderer)
    problems = []
    # 1. legend fonts
    for leg in _legends(fig):
        for t in leg.get_texts():
            shown = t.get_fontsize() * scale
            if t.get_text().strip() and shown < min_legend_pt - 1e-9:
                problems.append(f"legend entry {t.get_text()!r} is {shown:.1f} pt as shown "
                                f"({t.get_fontsize():g} pt in a figure narrowed by {scale:.2f}); "
                                f"at least {min_legend_pt:g} pt")
    # 2. overlapping text
    texts = _label_texts(fig)
    for k, leg in enumerate(_legends(fig)):
        texts += [(f"legend {k} entry {t.get_text()!r}", t) for t in leg.get_texts()
                  if t.get_text().strip()]
    pad = 0.5 * fig.dpi / 72  # half a point, in display pixels
    boxes = [(what, t.get_window_extent(renderer)) for what, t in texts]
    for i in range(len(boxes)):
        wi, bi = boxes[i]
        for j in range(i + 1, len(boxes)):
            wj, bj = boxes[j]
            dx = min(bi.x1, bj.x1) - max(bi.x0, bj.x0)
            dy = min(bi.y1, bj.y1) - max(bi.y0, bj.y0)
            if dx > pad and dy > pad:
                problems.append(f"{wi} overlaps {wj}")
    # 3. labelled lines of one axes that look the same
    for k, ax in enumerate(fig.axes):
        seen = {}
        for line in ax.get_lines():
            label = line.get_label()
            if not isinstance(line, Line2D) or not label or label.startswith("_"):
                continue
            seen.setdefault(_line_style(line), set()).add(label)
        for style, labels in seen.items():
            if len(labels) > 1:
                problems.append(f"axes {k}: lines {sorted(labels)} are drawn alike "
                                f"(colour {style[0]}, line style {style[1]!r}, marker {style[2]})")
    return problems


__all__.append("check_figure")


def _png(fig) -> bytes:

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight",
                metadata={"Software": None})
    return buf.getvalue()


def save_or_glue(fig, key: str):
    """Glue ``fig`` under ``key`` for the book, show it as an ordinary PNG output, close it.

    Two display outputs: myst-nb's glue record (``application/papermill.record/image/png``,
    pasted into the book by ``{glue:figure}``), and the same PNG as ``image/png``, which
    Jupyter, VS Code, GitHub and a reader's ``papermill`` run show. The second carries glue
    metadata under the unused name ``<key>.shown``, so that myst-nb treats it as a record that
    is never pasted and the book's page shows the figure once (under its caption). The output
    metadata gives the PNG a display width of :data:`CSS_PX_PER_INCH` pixels per inch of figure,
    and the glue record's metadata holds the findings of :func:`check_figure` under
    :data:`CHECK_KEY` (a list of sentences, empty when the figure passes; the book's tests read
    them from every executed notebook) and the size of its smallest text (tick labels, axis
    labels, titles, texts, legend entries; points) under :data:`TEXT_KEY`.
    Outside a Jupyter kernel the figure is just closed.

    Returns ``None``, so that a cell ending with this call does not display the figure twice.
    """
    import matplotlib.pyplot as plt  # deferred: matplotlib is heavy to import

    if not isinstance(key, str) or not key:
        raise ValueError(f"key must be a non-empty string, got {key!r}")
    try:
        from IPython import get_ipython  # deferred: IPython is optional (notebooks only)
        from IPython.display import display  # deferred: IPython is optional (notebooks only)
    except ImportError:  # pragma: no cover - IPython comes with the book's requirements
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        plt.close(fig)
        return None
    _drop_unshowable(fig)
    problems = check_figure(fig)
    sizes = [t.get_fontsize() for _, t in _label_texts(fig)]
    sizes += [t.get_fontsize() for leg in _legends(fig) for t in leg.get_texts()
              if t.get_text().strip()]
    min_pt = float(min(sizes)) if sizes else None
    png = _png(fig)
    plt.close(fig)
    width_px, height_px = struct.unpack(">II", png[16:24])  # the PNG header (IHDR)
    b64 = base64.b64encode(png).decode("ascii")
    prefix = "application/papermill.record/"  # myst_nb.ext.glue.GLUE_PREFIX
    text = f"<Figure {key} ({width_px}x{height_px} px)>"
    css = {"width": round(width_px / DPI * CSS_PX_PER_INCH)}
    display({prefix + "image/png": b64, prefix + "text/plain": text}, raw=True,
            metadata={prefix + "image/png": css, "image/png": css, CHECK_KEY: problems,
                      TEXT_KEY: min_pt, "scrapbook": {"name": key, "mime_prefix": prefix}})
    display({"image/png": b64, "text/plain": text}, raw=True,
            metadata={"image/png": css,
                      "scrapbook": {"name": f"{key}.shown", "mime_prefix": prefix}})
    return None


def _sweep_rows(table):
    """The rows of a sweep table given as a list of dicts, a dict of columns or a pandas
    DataFrame (the library never imports the build: a table file is read by
    ``attnsvm_book.read_table``)."""
    if isinstance(table, (str, os.PathLike)):
        raise TypeError(f"table must be the rows of a sweep, not a path ({table!s}): read the file "
                        "with attnsvm_book.read_table(path) and pass its rows")
    if hasattr(table, "to_dict") and not isinstance(table, dict):  # a pandas DataFrame
        return table.to_dict("records")
    if isinstance(table, dict):
        cols = list(table)
        n = len(table[cols[0]]) if cols else 0
        return [{c: table[c][i] for c in cols} for i in range(n)]
    return list(table)


def sweep_plot(table, x: str, y: str, *, by: str | None = None, ax=None, logx: bool = False,
               logy: bool = False, marker: str = "o", **kwargs):
    """One call: a glued value ``y`` of a sweep against a swept parameter ``x``.

    Parameters
    ----------
    table : list of dict, dict of columns or pandas DataFrame
        The table of ``python -m attnsvm_book sweep`` (what :func:`attnsvm_book.sweep` returns,
        or its CSV/Parquet file read by ``attnsvm_book.read_table``).
    x, y : str
        Column names: a swept parameter and a glued value.
    by : str, optional
        Another swept parameter: one line per value of it. Without it, every ``x`` must appear
        once among the successful points (else pass ``by``).
    ax : matplotlib Axes, optional
        Draw there; default a new :func:`figure`.
    logx, logy : bool
        Logarithmic axes.

    Returns
    -------
    (fig, ax)
        Failed points (``status`` not ``ok``) and points without a value of ``y`` are left out
        and counted in the title, never dropped silently.
    """
    rows = _sweep_rows(table)
    if not rows:
        raise ValueError("table must have at least one row")
    columns = set().union(*rows)
    for name, col in (("x", x), ("y", y), ("by", by)):
        if col is not None and col not in columns:
            raise ValueError(f"{name}={col!r} is not a column of the table; columns: "
                             f"{sorted(columns)}")

    def usable(r):
        v = r.get(y)
        ok = r.get("status", "ok") == "ok"
        return ok and v is not None and not (isinstance(v, float) and np.isnan(v))

    kept = [r for r in rows if usable(r)]
    left_out = len(rows) - len(kept)
    groups = {}
    for r in kept:
        groups.setdefault(None if by is None else r.get(by), []).append(r)
    if ax is None:
        fig, ax = figure()
    else:
        fig = ax.figure
    for value, members in groups.items():
        xs = [float(r[x]) for r in members]
        if len(set(xs)) != len(xs):
            raise ValueError(f"several points share a value of x={x!r}"
                             + ("" if by is None else f" within {by}={value!r}")
                             + "; pass by= another swept parameter")
        order = np.argsort(xs)
        ax.plot(np.asarray(xs)[order], np.asarray([float(r[y]) for r in members])[order],
                marker=marker, label=None if by is None else f"{by}={value}", **kwargs)
    ax.set(xlabel=x, ylabel=y)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if by is not None:
        ax.legend()
    if left_out:
        ax.set_title(f"{left_out} failed or empty point(s) not shown", fontsize="small")
    return fig, ax


__all__.append("sweep_plot")
