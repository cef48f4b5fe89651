"""What every rule script does first: log to the rule's log file, fail with a readable message."""

from __future__ import annotations

import logging
import os
import sys
import traceback

from .errors import QuantladderError

log = logging.getLogger("quantladder")


def start(snakemake) -> logging.Logger:
    """Send this script's stderr and logging to the rule's log (progress stays visible there)."""
    if snakemake.log:
        os.makedirs(os.path.dirname(snakemake.log[0]) or ".", exist_ok=True)
        sys.stderr = open(snakemake.log[0], "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    return log


def main(fn, snakemake) -> None:
    """Run ``fn(snakemake)``; a QuantladderError is reported as one clear line naming the rule."""
    start(snakemake)
    try:
        fn(snakemake)
    except QuantladderError as e:
        msg = f"rule {snakemake.rule}: {e}"
        log.error(msg)
        print(msg, file=sys.__stderr__)
        sys.exit(1)
    except Exception:
        log.error("rule %s failed:\n%s", snakemake.rule, traceback.format_exc())
        raise
