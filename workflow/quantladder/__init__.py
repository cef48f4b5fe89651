"""quantladder: what an open LLM loses and gains at every rung of the quantization ladder."""

import os
from pathlib import Path

# ggml's CPU threads are OpenMP's in this build (libgomp): at the barrier after every graph node they
# spin before they sleep, so on a host with other work on it a descheduled thread leaves the others
# spinning through their time slices. A generate job at 2 threads on 2 shared cores ran 15x slower
# than at 1 (issue 41); with OMP_WAIT_POLICY=PASSIVE (a waiting thread sleeps at once) it runs as fast
# as at 1 thread, replies byte-identical (benchmarks/contention.py, docs/generation.md "Threads").
# libgomp reads it when llama.cpp's library loads, so it is set before anything imports llama_cpp;
# llama.cpp's own tools run by a job inherit it (their parity is measured under the same policy); a
# value the user set wins, and the manifest's engine settings record which one ran.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

# Bumped whenever a change in the package changes what a measured figure means.
# It enters every manifest (and so every point's params), because Snakemake does not
# track the modules that a rule's script imports.
HARNESS_VERSION = "0.1.0"

# The checkout the package runs from (it is installed editable): config/ and its files live there.
REPO_ROOT = Path(__file__).resolve().parents[2]
