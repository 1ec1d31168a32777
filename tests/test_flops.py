"""The FLOP meter that the training stage records its work with (README, Performance)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from posenc.flops import FlopMeter

from conftest import model_of


def pass_of(model, n: int) -> None:
    g = torch.Generator().manual_seed(n)
    src, tgt = torch.randint(4, 60, (n, 6), generator=g), torch.randint(4, 60, (n, 5), generator=g)
    F.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten()).backward()


def test_the_flop_meter_counts_what_flop_counter_mode_counts_once_per_shape():
    model = model_of("sinusoidal")
    with FlopCounterMode(display=False) as counter:
        pass_of(model, 3)
    one = counter.get_total_flops()
    meter = FlopMeter()
    for _ in range(3):
        with meter.count((3, 6), (3, 5)):
            pass_of(model, 3)
    assert one > 0 and meter.total == 3 * one
    with meter.count((2, 6), (2, 5)):  # a new shape is counted anew
        pass_of(model, 2)
    assert 3 * one < meter.total < 4 * one
