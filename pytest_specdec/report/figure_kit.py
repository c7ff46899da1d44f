"""What every plot module shares: a report row, where a figure goes, the number check, a figure and its PNG."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, BinaryIO

from ..atomic import write_atomic

Row = dict[str, Any]
# Where a figure goes: a file (written atomically, its Path returned) or a binary stream such as
# io.BytesIO (the stream returned), for report.html's inline images.
Target = str | os.PathLike | BinaryIO

DPI = 110


def _number(value: Any) -> float | None:
    # bool is an int subclass; a stray True must not plot as 1.0.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _config(row: Row) -> str:
    if row.get("config"):
        return str(row["config"])
    method = row.get("method") or "sd"
    return f"{method} k={row['k']}" if row.get("k") is not None else str(method)


def _figure(panels: int, ncols: int, panel: tuple[float, float]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    nrows = math.ceil(panels / ncols)
    # Constrained layout is the tight layout that also makes room for colorbars and suptitles.
    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.remove()
    return fig, axes[:panels]


def _finish_panel(ax, xlabel: str, ylabel: str, title: str) -> None:
    """A panel's labels, light grid, small legend and a title wrapped to its width."""
    import textwrap

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(textwrap.fill(title, 60), fontsize=9)


def _save(fig, path: Target) -> Path | BinaryIO:
    """The figure as PNG: written atomically to a path (returned), or into a binary stream (returned)."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    finally:
        fig.clear()
    if hasattr(path, "write"):
        path.write(buffer.getvalue())
        return path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, buffer.getvalue())
