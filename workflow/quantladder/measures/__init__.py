"""Per-point measures: perplexity + KLD, speed, memory, energy."""
