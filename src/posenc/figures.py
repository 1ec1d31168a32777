"""Figures: matplotlib without a display, each written as a PNG and a vector SVG beside it (for
papers), both byte-stable (no software stamp or date; SVG ids from a fixed salt)."""

from __future__ import annotations

import io
from pathlib import Path

from posenc import files


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "posenc"  # element ids that do not change between runs
    return plt


def save_figure(fig, path: Path) -> None:
    """`path` (.png) and the same figure as .svg beside it."""
    fig.tight_layout()
    for fmt, metadata in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=110, metadata=metadata)
        files.write_bytes(Path(path).with_suffix(f".{fmt}"), buffer.getvalue())
    pyplot().close(fig)
