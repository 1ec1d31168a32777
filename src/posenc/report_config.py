"""params.yaml's `report` section, read by the stages that aggregate runs (report, residuals,
trained_short): apart from posenc.config, so that an edit to it leaves every training and
evaluation stage's code as it was."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from posenc.config import NonNegative, Positive, Range
from posenc.errors import UserError


@dataclass(frozen=True)
class ReportConfig:
    baseline: str                 # the variant the others are tested against
    bootstrap_samples: Annotated[int, Range(100)]  # fewer leave no 95% interval to speak of
    bootstrap_seed: NonNegative
    length_buckets: tuple[Positive, ...]  # upper bounds (source words) of the length buckets

    def __post_init__(self):
        bounds = self.length_buckets
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise UserError(f"length_buckets: {list(bounds)} must rise strictly (each bucket's upper "
                            f"bound above the one before, none twice); write e.g. {sorted(set(bounds))}")
