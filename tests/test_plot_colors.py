"""plot.trial_band picks the fixed colour of a known label, whatever its case."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnsvm import plot  # noqa: E402


@pytest.mark.parametrize("label,key", [("W", "W"), ("KQ", "KQ"), ("gd", "gd"), ("NGD", "ngd")])
def test_trial_band_uses_the_fixed_colour(label, key):
    fig, ax = plot.figure()
    line = plot.trial_band(ax, np.arange(3), np.ones((3, 2)), label=label)
    assert mcolors.to_hex(line.get_color()) == plot.COLORS[key]
    matplotlib.pyplot.close(fig)
