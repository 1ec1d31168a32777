"""§3.5 trained short, tested long: the source-length buckets, within the training bound L and
beyond it (`short_training.max_len` and `.buckets`), shared by the stage that scores a short run
(posenc.stages.lengths) and the one that reports them all (posenc.stages.trained_short)."""

from __future__ import annotations

from dataclasses import dataclass

from posenc.config import Positive, Variant
from posenc.errors import UserError


@dataclass(frozen=True)
class ShortTrainingConfig:
    """§3.5's second protocol (posenc.stages.shorten): train on short pairs, test on longer ones."""
    max_len: Positive             # L: training pairs of at most L subwords a side, EOS included
    variants: tuple["Variant", ...]  # the variants trained on them (dvc.yaml's train_short matrix)
    buckets: tuple[Positive, ...]  # upper bounds of the source-length buckets beyond L (the last: to the longest)

    def __post_init__(self):
        bounds = (self.max_len, *self.buckets)
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise UserError(f"buckets: {list(self.buckets)} must rise strictly from above max_len "
                            f"({self.max_len}); e.g. [{self.max_len + 4}, {self.max_len + 9}]")


def bucket_bounds(max_len: int, beyond: tuple[int, ...]) -> list[tuple[int, int | None]]:
    """[(1, L), (L + 1, b1), (b1 + 1, b2), ..., (b_last + 1, None)]: inclusive source lengths."""
    uppers = (max_len, *beyond)
    return [(1, max_len)] + [(a + 1, b) for a, b in zip(uppers, uppers[1:])] + [(uppers[-1] + 1, None)]


def bucket_name(low: int, high: int | None) -> str:
    return f"{low}-{high}" if high is not None else f"{low}+"


def by_bucket(lengths: list[int], bounds: list[tuple[int, int | None]]) -> list[list[int]]:
    """The indices of `lengths` in each bucket of `bounds`."""
    return [[i for i, n in enumerate(lengths) if low <= n and (high is None or n <= high)]
            for low, high in bounds]
