"""Perplexity and KL divergence with llama-perplexity's protocol.

Protocol (llama.cpp tools/perplexity/perplexity.cpp, `perplexity()` and `kl_divergence()`):
  * the whole text is tokenized once, with BOS when the vocab adds one, special tokens not parsed;
  * it is cut into chunks of n_ctx tokens (needs >= 2 chunks); n_batch // n_ctx chunks are decoded
    together, each as its own sequence at positions 0..n_ctx-1;
  * the first token of each chunk is replaced by BOS when the vocab adds one;
  * only the second half is scored: logits at positions first = n_ctx/2 .. n_ctx-2 predict the
    tokens first+1 .. n_ctx-1 (n_ctx - 1 - first tokens per chunk);
  * PPL = exp(mean NLL), ± PPL · sqrt(var(NLL) / (N-1)).
KLD mode: the reference run stores, per scored position, its log-probabilities as uint16 over
[max(min, max-16), max] with a per-row scale and offset; a rung is compared on identical tokens,
with KL summed over the reference's entries above -16 nats, as llama.cpp does.

Long documents (n_ctx > n_batch, e.g. a model's trained 32K context): a chunk is decoded in n_batch
pieces, as llama-perplexity does, but each piece's output rows are scored (and stored, or compared
with the stored reference rows) as soon as it is decoded. llama-perplexity instead gathers every
scored row of the chunk before scoring (n_ctx/2 x n_vocab float32, plus n_ctx x n_vocab uint16 when
it writes its KL base): 16 + 16 GiB for a 262k vocabulary at 32K. Here memory is bounded by one
piece (n_batch rows x n_vocab) whatever the context; the reference store is read and written a
piece at a time (pread/pwrite, not a memory map, so the store's pages never count as the pass's
resident memory). Figures are identical either way: every row is computed by the same operations.

The package: `passes` plans the passes (what the workflow needs while it builds its DAG), `store`
keeps the reference log-probs and a pass's checkpoint, `runner` runs a pass and its rule jobs (not
named `run`: that is the pass itself, `perplexity.run`), `stats` makes its figures and rows.
"""

import importlib

from .passes import (TRAINED, Protocol, family_passes, n_chunks, pass_config,
                     pass_name, pass_settings, passes, protocol)

# The parts that need numpy, imported on first use: rules/common.smk imports this package to plan
# the passes while Snakemake builds its DAG, and planning needs no numpy.
_LAZY = {name: module for module, names in {
    "store": ("LOG_PROB_FLOOR", "MAGIC", "ReferenceReader", "ReferenceWriter", "check_room", "checkpoint_path",
              "store_bytes"),
    "runner": ("calibration_tokens", "join_passes", "log_softmax_rows", "measure_pass", "reference_pass", "run"),
    "stats": ("PERCENTILES", "metric_rows", "overlap_rows", "summarize"),
}.items() for name in names}

__all__ = ["TRAINED", "Protocol", "family_passes", "n_chunks", "pass_config",
           "pass_name", "pass_settings", "passes", "protocol", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


# -- What the workflow reads of this measure (quantladder.measures.Measure) and its figures.

from ...metrics import Metric, declare as declare_figures  # noqa: E402
from .. import GPU, LOCAL, Measure, RuleCost, declare  # noqa: E402

NAME = "perplexity"
MEASURE = declare(Measure(
    NAME, "perplexity and KL divergence from the reference rung on the configured corpora (llama-perplexity's protocol)",
    rules={
        # the reference rung's log-probs, once per (card, family, corpus, context)
        "reference_logits": RuleCost(GPU, runtime=(20, 4), guess_s=15),
        # one pass: a point on one corpus at one context
        "perplexity": RuleCost(GPU, runtime=(20, 4), guess_s=15),
        # the point's passes joined into one metrics file, on the submitting host
        "perplexity_point": RuleCost(LOCAL, guess_s=1),
    },
    # its gate runs on the headline corpus at the measure's context: the list of evaluation corpora, the
    # long-document passes and the overlap figure are the points' business (adding a corpus re-runs neither
    # the gate nor other passes)
    gate_ignores=("kld", "corpora", "long", "overlap"),
    anchor="perplexity has no published anchor reachable offline (it depends on the exact file, corpus and n_ctx); "
           "parity with llama-perplexity is checked by benchmarks/ppl_parity.py instead",
    tool_gate="llama-perplexity"))

_PCT = (("max", "maximum"), ("p99_9", "99.9th percentile"), ("p99", "99th percentile"),
        ("p95", "95th percentile"), ("p90", "90th percentile"), ("median", "median"),
        ("p10", "10th percentile"), ("p5", "5th percentile"), ("p1", "1st percentile"),
        ("p0_1", "0.1th percentile"), ("min", "minimum"))

declare_figures(
    Metric("ppl", "1", "perplexity on the corpus (llama-perplexity's protocol: second half of each n_ctx chunk)",
           (NAME,), higher_is_better=False, stderr="se", headline_for=(NAME,)),
    Metric("ppl_base", "1", "the reference rung's perplexity on the same tokens (from its stored log-probs)",
           (NAME,), higher_is_better=False, stderr="se"),
    Metric("ppl_ratio", "1", "PPL(rung) / PPL(reference) on the same tokens", (NAME,), higher_is_better=False,
           stderr="se"),
    Metric("ln_ppl_ratio", "nats", "mean per-token ln p_ref − ln p_rung: the paired per-token NLL difference",
           (NAME,), higher_is_better=False, stderr="se", paired="tokens"),
    Metric("ppl_diff", "1", "PPL(rung) − PPL(reference) on the same tokens", (NAME,), higher_is_better=False,
           stderr="se"),
    Metric("cor_ln_ppl", "1", "correlation of the per-token log-probs of rung and reference", (NAME,),
           higher_is_better=True),
    Metric("kld_mean", "nats", "mean KL divergence from the reference rung's token distribution (full vocabulary)",
           (NAME,), higher_is_better=False, stderr="se", headline_for=(NAME,), paired="tokens"),
    *(Metric(f"kld_{k}", "nats", f"{d} of the per-token KL divergence", (NAME,), higher_is_better=False,
             headline_for=(NAME,) if k == "p99_9" else ()) for k, d in _PCT),
    Metric("delta_p_mean", "%", "mean change of the probability of the correct token vs the reference", (NAME,),
           higher_is_better=True, stderr="se"),
    Metric("delta_p_rms", "%", "root mean square of that change", (NAME,), higher_is_better=False, stderr="se"),
    *(Metric(f"delta_p_{k}", "%", f"{d} of the change of the correct token's probability", (NAME,))
      for k, d in _PCT),
    Metric("same_top_token", "%", "share of tokens whose most likely next token equals the reference's", (NAME,),
           higher_is_better=True, stderr="se", headline_for=(NAME,), score_for=(NAME,), paired="tokens"),
    # A pass whose text the rung's importance matrix was computed from (issue 16, docs/corpora.md).
    Metric("calibration_overlap", "%",
           "share of the pass's evaluation token n-grams (n = measures.perplexity.overlap.ngram, 13) that occur in "
           "the calibration text of the rung's importance matrix (subset: the evaluation corpus)", (NAME,),
           higher_is_better=False, whole="none", group="calibration"),
    Metric("calibration_overlap_flag", "1",
           "1 when calibration_overlap reaches measures.perplexity.overlap.flag_pct: the pass scores text the "
           "rung was calibrated on, and its KLD flatters the rung; 0 otherwise", (NAME,), higher_is_better=False,
           whole="none", group="calibration"),
)
