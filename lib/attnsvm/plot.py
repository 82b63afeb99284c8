"""One figure style for the whole book.

Every figure in the book is made with these helpers so that colours, line styles, fonts and the
summary over trials (median line, interquartile band) are the same everywhere. Optimizers have
fixed colours (:data:`COLORS`), so GD is the same colour in every chapter.
"""
from __future__ import annotations

import numpy as np

__all__ = ["COLORS", "RC", "use_style", "figure", "trial_band", "save_or_glue"]

#: fixed colour per method or quantity, shared by every chapter
COLORS = {
    "gd": "#1f77b4", "ngd": "#d62728", "ngd_param": "#e377c2", "polyak": "#2ca02c",
    "adam": "#9467bd", "sign": "#8c564b", "sgd": "#1f77b4", "sngd": "#d62728", "sps": "#2ca02c",
    "W": "#1f77b4", "KQ": "#ff7f0e", "prompt": "#17becf", "theory": "#555555",
}

#: the book's matplotlib settings
RC = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
}


def use_style():
    """Apply the book's matplotlib settings (:data:`RC`) for the rest of the session."""
    import matplotlib

    matplotlib.rcParams.update(RC)


def figure(ncols: int = 1, nrows: int = 1, *, width: float | None = None,
           height: float | None = None, **kwargs):
    """A new figure in the book's style: ``fig, axes = figure(ncols=2)``."""
    import matplotlib.pyplot as plt

    use_style()
    w = width if width is not None else min(6.4 * ncols, 13.0)
    h = height if height is not None else 3.6 * nrows
    fig, axes = plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False,
                             layout="constrained", **kwargs)
    return fig, (axes[0, 0] if axes.size == 1 else axes.squeeze())


def trial_band(ax, steps, values, *, label=None, color=None, quantiles=(0.25, 0.75), **kwargs):
    """Plot the median over trials of ``values`` (shape (K, B)) with an interquartile band.

    Parameters
    ----------
    ax : matplotlib Axes
    steps : array_like, shape (K,)
    values : array_like, shape (K, B) or (K,)
        One column per trial.
    label, color : optional
        ``color`` defaults to :data:`COLORS` ``[label]`` when the label is a known name.
    quantiles : (float, float)
        The band's lower and upper quantiles over trials.
    """
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if values.shape[0] != steps.shape[0]:
        raise ValueError(f"values must have one row per step: steps has {steps.shape[0]}, "
                         f"values has shape {values.shape}")
    if color is None and label is not None:
        color = COLORS.get(str(label), COLORS.get(str(label).lower()))
    med = np.median(values, axis=1)
    (line,) = ax.plot(steps, med, label=label, color=color, **kwargs)
    if values.shape[1] > 1:
        lo, hi = np.quantile(values, quantiles, axis=1)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    return line


def save_or_glue(fig, key: str):
    """Glue ``fig`` under ``key`` for the book (myst-nb) and close it.

    Returns ``None``, so that a cell ending with this call does not display the figure twice.
    """
    import matplotlib.pyplot as plt

    try:
        from myst_nb import glue
    except ImportError:  # pragma: no cover - myst-nb is a requirement of the book
        return None
    glue(key, fig, display=False)
    plt.close(fig)
    return None


def _sweep_rows(table):
    """The rows of a sweep table given as a list of dicts, a CSV/Parquet path, a dict of
    columns or a pandas DataFrame."""
    import os

    if isinstance(table, (str, os.PathLike)):
        from .book.sweep import read_table

        return read_table(table)
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
    table : list of dict, path, dict of columns or pandas DataFrame
        The table of ``python -m attnsvm.book sweep`` (:func:`attnsvm.book.sweep`), or its CSV
        or Parquet file.
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
