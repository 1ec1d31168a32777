"""Figures over seeds as tables: the mean ± std of a column, Markdown and CSV, p-values as text.
Shared by the reports (posenc.stages.report and the studies' reports beside it)."""

from __future__ import annotations

import csv
import io
import statistics


def decimals(mean: float) -> int:
    """How many decimals a mean (and its std) is kept and shown to: 2 above 10, else 3."""
    return 2 if abs(mean) > 10 else 3


def summarize(values: list[float]) -> dict:
    """{"mean", "std" (None for one value), "n"} of one column over seeds."""
    mean = statistics.fmean(values)
    return {"mean": round(mean, decimals(mean)), "std": round(statistics.stdev(values), 3)
            if len(values) > 1 else None, "n": len(values)}


def cell(s: dict | None) -> str:
    """`mean ± std`, both to the mean's decimals."""
    if s is None:
        return ""
    d = decimals(s["mean"])
    return f"{s['mean']:.{d}f}" + (f" ± {s['std']:.{d}f}" if s.get("std") is not None else "")


def count(n: int, noun: str) -> str:
    """"1 seed", "3 seeds": a number and its noun, agreeing."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def span(values: list[float], spec: str) -> str:
    """"lowest-highest" of the values, each formatted by `spec`."""
    return f"{min(values):{spec}}-{max(values):{spec}}"


def markdown_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def floor(samples: int) -> float:
    """The smallest two-sided p-value that `samples` bootstrap resamples can show (none of them
    across zero): 2 / (B + 1), as posenc.significance counts it."""
    return 2 / (samples + 1)


def p_text(p: float, samples: int) -> str:
    """A bootstrap p-value, "≤ 0.002 (B = 1,000)" where it is the floor of the resampling: a
    smaller p would need more resamples (report.bootstrap_samples)."""
    return f"≤ {p:g} (B = {samples:,})" if p <= round(floor(samples), 4) else f"{p:g}"


def p_is(p: float, samples: int, name: str = "p") -> str:
    """"p = 0.12", or "p ≤ 0.002 (B = 1,000)" where no resample fell on the other side."""
    text = p_text(p, samples)
    return f"{name} {text}" if text.startswith("≤") else f"{name} = {text}"


def to_csv(rows: list[dict], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


VERDICTS = ("significant after Holm's adjustment",
            "its interval excludes 0, but not after Holm's adjustment",
            "within noise (the interval includes 0)")


def how_it_reads(results: list[dict]) -> str:
    """How one comparison reads over the test sets, in the summaries' short words: "significant
    after Holm's adjustment on 2 of 3, within noise on 1 of 3"."""
    kinds = [VERDICTS.index(verdict(r)) for r in results]
    return ", ".join(f"{short} on {kinds.count(i)} of {len(results)}" for i, short in enumerate(
        ("significant after Holm's adjustment", "unadjusted interval excludes 0", "within noise")) if i in kinds)


def verdict(s: dict) -> str:
    """How one seed-aware comparison reads (VERDICTS): Holm-adjusted significant, nominal, or
    within noise."""
    if s["p_holm"] < 0.05:
        return VERDICTS[0]
    return VERDICTS[1] if s["ci"][0] > 0 or s["ci"][1] < 0 else VERDICTS[2]
