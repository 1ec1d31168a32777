"""Is a variant's BLEU different from the baseline's? Two tests, over two sources of chance.

`seed_bootstrap` is the primary test: a two-level (hierarchical) bootstrap of the difference of
mean corpus BLEU over training seeds. Each resample draws the seeds of each system with
replacement (their training runs), then the test sentences with replacement, the same sentences
for every run (the systems are paired on sentences); each drawn run's corpus BLEU is recomputed
on those sentences from sacreBLEU's own sufficient statistics, and the difference of the two
systems' means over their drawn seeds is one bootstrap value. Resampling both stages is the
bootstrap for two-stage (nested) data of Davison & Hinkley (1997, §3.8); in MT it answers
Clark et al. (2011), who showed that a test over the sentences of one run per system ignores
optimizer instability and asked for at least three replicates. The 95% interval is the
percentile interval of the bootstrap values; the p-value is the two-sided achieved significance
level of that interval (twice the smaller share of bootstrap values on either side of 0), so
p < 0.05 exactly when the interval excludes 0. With three seeds the seed level is resampled
from three values only: the interval reflects the spread those three show, and cannot show
rarer, larger seed effects. The same test over several variants and test sets is a family of
tests: `holm` adjusts their p-values (Holm 1979).

`paired_bootstrap` is sacreBLEU's paired bootstrap resampling (Koehn 2004) over the sentences of
one run per system: it says how sure one can be about these two runs, not about the variants.
"""

from __future__ import annotations

import math
import os

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


def sentence_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """sacreBLEU's BLEU statistics per sentence (n, 10): hypothesis and reference length, then
    matched and total n-grams for n = 1..4. Their column sums give the corpus BLEU."""
    return np.array(BLEU()._extract_corpus_statistics(hypotheses, [references]), dtype=np.int64)


def corpus_bleu(stats: np.ndarray) -> float:
    """Corpus BLEU from summed statistics, as sacreBLEU computes it (13a, exp smoothing)."""
    s = [int(x) for x in stats]
    return BLEU.compute_bleu(s[2:6], s[6:10], s[0], s[1], smooth_method="exp").score


def seed_bootstrap(baseline: list[np.ndarray], other: list[np.ndarray], samples: int,
                   seed: int) -> dict:
    """Two-level bootstrap of mean BLEU(other seeds) - mean BLEU(baseline seeds).

    `baseline` and `other` hold one `sentence_statistics` array per training seed, all on the
    same sentences. Returns the observed difference, the 95% percentile interval and the p-value.
    """
    return _two_level([(s,) for s in baseline], [(s,) for s in other], corpus_bleu, samples, seed)


def kept_share(within: np.ndarray, beyond: np.ndarray) -> float:
    """§3.5 trained short: the share of its BLEU within the training lengths that a run keeps
    beyond them, BLEU(beyond) / BLEU(within), from summed statistics; NaN where BLEU within is 0."""
    inside = corpus_bleu(within)
    return corpus_bleu(beyond) / inside if inside > 0 else float("nan")


def kept_share_bootstrap(baseline: list[tuple[np.ndarray, np.ndarray]],
                         other: list[tuple[np.ndarray, np.ndarray]], samples: int, seed: int) -> dict:
    """Two-level bootstrap of mean kept share (`kept_share`) of the other seeds minus the
    baseline's: each run is (its statistics within L, beyond L), the two sets of sentences
    resampled independently, the same sentences for every run. A resample whose BLEU within L is
    0 for a drawn run has no share and is left out (`samples` says how many were used)."""
    return _two_level(baseline, other, kept_share, samples, seed)


def _two_level(baseline: list[tuple[np.ndarray, ...]], other: list[tuple[np.ndarray, ...]], statistic,
               samples: int, seed: int) -> dict:
    """The two-level bootstrap (module docstring) of mean statistic(other) - mean statistic(baseline),
    where a run is a tuple of `sentence_statistics` arrays, one per set of sentences, and
    `statistic` takes their (resampled) column sums."""
    sizes = [a.shape[0] for a in baseline[0]]

    def value(run, weights) -> float:
        return statistic(*(w @ a for w, a in zip(weights, run)))

    everything = [np.ones(n, dtype=np.int64) for n in sizes]
    observed = (np.mean([value(r, everything) for r in other]) - np.mean([value(r, everything) for r in baseline]))
    rng = np.random.default_rng(seed)
    deltas = np.empty(samples)
    for b in range(samples):
        pick_base = rng.integers(len(baseline), size=len(baseline))
        pick_other = rng.integers(len(other), size=len(other))
        weights = [np.bincount(rng.integers(n, size=n), minlength=n) for n in sizes]  # the resampled sentences
        base = np.mean([value(baseline[i], weights) for i in pick_base])
        deltas[b] = np.mean([value(other[i], weights) for i in pick_other]) - base
    deltas = deltas[~np.isnan(deltas)]
    if not math.isfinite(observed) or deltas.size == 0:
        return {"delta": None, "ci": None, "p": None, "samples": int(deltas.size)}
    low, high = np.percentile(deltas, [2.5, 97.5])
    # Two-sided, from the resamples on the smaller side of zero, counted as (k + 1) / (B + 1)
    # (Davison & Hinkley 1997, eq. 4.11): never 0, so with no resample across zero it is the floor
    # 2 / (B + 1) that B resamples can show, and Holm's adjustment multiplies that bound, not 0.
    crossing = min(int(np.sum(deltas <= 0)), int(np.sum(deltas >= 0)))
    p = min(1.0, 2 * (crossing + 1) / (deltas.size + 1))
    digits = 2 if statistic is corpus_bleu else 4  # BLEU points; shares of BLEU
    return {"delta": round(float(observed), digits), "ci": [round(float(low), digits), round(float(high), digits)],
            "p": round(p, 4), "samples": int(deltas.size)}


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (same keys): it controls the chance
    of any false rejection in the family, for tests in any dependence."""
    order = sorted(p_values, key=p_values.get)
    adjusted, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p_values[key]))
        adjusted[key] = round(running, 4)
    return adjusted


def paired_bootstrap(baseline: tuple[str, list[str]], others: list[tuple[str, list[str]]],
                     references: list[str], samples: int, seed: int) -> dict:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of each system against the baseline:
    {name: {"bleu", "mean", "ci" (95% half-width), "p"}}."""
    # sacreBLEU takes its resampling seed from the environment only.
    os.environ["SACREBLEU_SEED"] = str(seed)
    test = PairedTest([baseline, *others], metrics={"BLEU": BLEU(references=[references])},
                      references=None, test_type="bs", n_samples=samples)
    _, scores = test()
    out = {}
    for name, result in zip(scores["System"], scores["BLEU"]):
        out[name] = {"bleu": round(float(result.score), 2), "mean": round(float(result.mean), 2),
                     "ci": round(float(result.ci), 2),
                     "p": None if result.p_value is None else round(float(result.p_value), 4)}
    return out
