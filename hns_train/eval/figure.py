"""The PNG figures of the eval views (`compare`, `population_view`): a column of panels that
share their x axis, drawn off-screen by matplotlib and written atomically (a killed view never
leaves half a picture where the last whole one was).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hns_train.atomic_file import atomic_write

DPI = 100  # matplotlib's inches to the PNG's pixels


def panels(width: int, height: int, rows: int) -> tuple[Any, Any]:
    """A figure of exactly `width` x `height` pixels holding `rows` panels one above another."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def side_legend(ax: Any) -> None:
    """The panel's legend right of it, where it hides no data."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def save_png(fig: Any, out: str | Path) -> Path:
    """Write the figure to `out` atomically and return its path."""
    return atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"), ".png")
