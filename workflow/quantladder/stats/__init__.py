"""Is the loss real? Paired statistics for a rung against its family's reference (docs/statistics.md).

Pure functions over plain inputs; nothing here reads the dataset or writes files.

Items (task benchmarks), per-item verdicts ``{"item_id", "correct", "subset", "score"}``::

    from quantladder import stats
    pairs = stats.pair_verdicts(reference_verdicts, rung_verdicts)          # common items; dropped counted
    d = stats.paired_delta(pairs)                                           # binary: Tango CI + McNemar exact
    d = stats.paired_delta(pairs, weights=stats.equal_subset_weights(ref), stratify=True)   # BFCL aggregates
    d = stats.compare(reference_verdicts, rung_verdicts, weights="equal_subsets")          # the same, in one call
    # partial credit (every verdict has a score): paired t interval + sign-flip test
    verdicts = stats.ladder({("Q4_K_M", "pass_at_1", None): d, ...}, correction="holm", noise=floor)
    verdicts[key].text, verdicts[key].columns()   # words; the dataset's delta_* / verdict columns

Tokens (perplexity, KLD), plain numpy arrays on identical tokens::

    t = stats.token_delta(nll_rung, nll_reference, chunks=rows_per_chunk)  # ln(PPL ratio), chunk-level CI
    k = stats.token_mean(kld, chunks=rows_per_chunk, positive=True)   # a divergence: widened for its skew
    d = stats.from_tokens(k.at(0.975), unit="nats", higher_is_better=False)   # its paired delta at another level

Power and sample size (shares, not points)::

    stats.items_needed(0.02, discordance=0.1, alpha=0.05 / m, power=0.8)   # (n, "exact" | "connor")
    stats.smallest_detectable_loss(n, discordance, alpha=0.05 / m)

Early stopping::

    t = stats.SequentialPairedTest(alpha=0.05, margin=2.0)
    t.update(ref_wave, rung_wave); t.decide().state   # continue | loss | gain | no_loss_beyond_margin | undecided

A figure that is a paired difference already (perplexity/KLD rows: the pass measured both on the same tokens)::

    v = stats.figure_verdict(stats.figure_delta(0.012, 0.001, 4096, unit="nats", higher_is_better=False))

Is a rung *shown* within a tolerance of its reference (the dataset's delta / delta_ci_* columns)::

    d = stats.noninferiority.decide(delta, ci_low, ci_high, tolerance=1.0, higher_is_better=True, unit="%",
                                    stderr=delta_stderr, n=n)   # non-inferior | inferior | undetermined
    walked = stats.noninferiority.walk([("Q8_0", d8), ("Q6_K", d6), ...])   # fixed sequence, largest rung first
"""

from . import noninferiority
from .multiplicity import METHODS as CORRECTIONS
from .multiplicity import adjust, benjamini_hochberg, holm, planning_alpha
from .paired import (PairedDelta, Pairs, compare, equal_subset_weights, mcnemar_exact, newcombe_interval,
                     pair_verdicts, paired_delta, sign_flip_pvalue, tango_interval)
from .power import (connor_items, connor_power, exact_power, exact_power_for_loss, items_needed, noninferiority_items,
                    noninferiority_power, normal_detectable,
                    smallest_detectable_loss)
from .sequential import SequentialDecision, SequentialPairedTest
from .tokens import TokenMean, block_bootstrap, ppl_ratio, token_delta, token_mean, token_share
from .verdict import (GAIN, LOSS, NONE, FigureDelta, FigureVerdict, NoiseFloor, Verdict, figure_delta, figure_verdict,
                      from_tokens, ladder, noise_floor, verdict)

__all__ = [
    "noninferiority",
    "CORRECTIONS", "adjust", "benjamini_hochberg", "holm", "planning_alpha",
    "PairedDelta", "Pairs", "compare", "equal_subset_weights", "mcnemar_exact", "newcombe_interval", "pair_verdicts",
    "paired_delta", "sign_flip_pvalue", "tango_interval",
    "connor_items", "connor_power", "exact_power", "exact_power_for_loss", "items_needed", "noninferiority_items",
    "noninferiority_power", "normal_detectable",
    "smallest_detectable_loss",
    "SequentialDecision", "SequentialPairedTest",
    "TokenMean", "block_bootstrap", "ppl_ratio", "token_delta", "token_mean", "token_share",
    "GAIN", "LOSS", "NONE", "FigureDelta", "FigureVerdict", "NoiseFloor", "Verdict", "figure_delta", "figure_verdict",
    "from_tokens", "ladder", "noise_floor", "verdict",
]
