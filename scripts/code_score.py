"""Rule score_code: run a code suite's saved replies against their tests, in the sandbox only.

Placed on the scoring host (profiles put the rule on its own partition). With no sandbox backend
the rule stops with install instructions: there is no unsandboxed fallback.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder.benchmarks.code import score_point  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    score_point.run(smk, repo_root=Path(smk.scriptdir).parent)


main(run, snakemake)
