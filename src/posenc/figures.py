"""Figures: matplotlib without a display, each written as a PNG and a vector SVG beside it (for
papers), both byte-stable (no software stamp or date; SVG ids from a fixed salt)."""

from __future__ import annotations

import io
from pathlib import Path

from posenc import files


# One colour per variant, colour-blind safe (Okabe & Ito's eight, grey for `none`), each with its
# own marker and line style, so that a figure also reads in grey print; the residual study's kinds
# take the colours of their namesakes (`sum` is the sinusoidal run). The DVC plot templates
# (.dvc/plots/) use the same colours (tests/test_report.py checks).
STYLE = {
    "sinusoidal": ("#000000", "o", "-"),
    "learned": ("#E69F00", "s", "-"),
    "concat": ("#D55E00", "^", "-"),
    "sinusoidal_narrow": ("#56B4E9", "v", "--"),  # dashed: it can lie on sinusoidal
    "none": ("#999999", "X", ":"),
    "rope": ("#0072B2", "D", "-"),
    "alibi": ("#009E73", "P", "-."),
    "relative": ("#CC79A7", "*", "--"),
    "sum": ("#000000", "o", "-"),
}


def style(name: str) -> dict:
    """matplotlib keywords of `name`'s colour, marker and line style (STYLE)."""
    colour, marker, linestyle = STYLE[name]
    return {"color": colour, "marker": marker, "linestyle": linestyle}


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
