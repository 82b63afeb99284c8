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
