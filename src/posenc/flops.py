"""The floating-point operations a training run performs, as torch counts them.

The throughput figures (README, Performance) divide these by wall time and the machine's measured
matmul peak. Counting is torch's `FlopCounterMode` (matrix products and attention; elementwise
work counts nothing), so no formula is written by hand.
"""

from __future__ import annotations

import contextlib

from torch.utils.flop_counter import FlopCounterMode


class FlopMeter:
    """Sums the FLOPs of each micro-batch's forward and backward pass. A pass's FLOPs depend on its
    tensor shapes only, so each shape is counted once, the first time it is seen (counting costs
    about a millisecond per operator), and looked up after that."""

    def __init__(self):
        self.total = 0
        self._by_shape: dict[tuple, int] = {}

    @contextlib.contextmanager
    def count(self, *shapes):
        """Around one forward and backward pass whose inputs have these shapes."""
        key = tuple(tuple(s) for s in shapes)
        if key in self._by_shape:
            yield
        else:
            with FlopCounterMode(display=False) as counter:
                yield
            self._by_shape[key] = counter.get_total_flops()
        self.total += self._by_shape[key]
