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

from .passes import (OVERLAP_FLAG_PCT, OVERLAP_NGRAM, TRAINED, Protocol, family_passes, n_chunks, pass_config,
                     pass_name, pass_settings, passes, protocol)

# The parts that need numpy, imported on first use: rules/common.smk imports this package to plan
# the passes while Snakemake builds its DAG, and planning needs no numpy.
_LAZY = {name: module for module, names in {
    "store": ("LOG_PROB_FLOOR", "MAGIC", "ReferenceReader", "ReferenceWriter", "check_room", "checkpoint_path",
              "store_bytes"),
    "runner": ("calibration_tokens", "join_passes", "log_softmax_rows", "measure_pass", "reference_pass", "run"),
    "stats": ("PERCENTILES", "metric_rows", "overlap_rows", "summarize"),
}.items() for name in names}

__all__ = ["OVERLAP_FLAG_PCT", "OVERLAP_NGRAM", "TRAINED", "Protocol", "family_passes", "n_chunks", "pass_config",
           "pass_name", "pass_settings", "passes", "protocol", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)

