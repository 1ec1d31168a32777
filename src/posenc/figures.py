"""PNG figures: matplotlib without a display, and byte-stable files (no software stamp)."""

from __future__ import annotations

import io
from pathlib import Path

from posenc import files


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    files.write_bytes(path, buffer.getvalue())
