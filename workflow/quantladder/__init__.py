"""quantladder: what an open LLM loses and gains at every rung of the quantization ladder."""

from pathlib import Path

__version__ = "0.1.0"

# Bumped whenever a change in the package changes what a measured figure means.
# It enters every manifest (and so every point's params), because Snakemake does not
# track the modules that a rule's script imports.
HARNESS_VERSION = "0.1.0"

# The checkout the package runs from (it is installed editable): config/ and its files live there.
REPO_ROOT = Path(__file__).resolve().parents[2]
