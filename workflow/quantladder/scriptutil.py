"""What every rule script does first: log to the rule's log file, fail with a readable message."""

from __future__ import annotations

import logging
import os
import sys
import traceback

from .errors import QuantladderError

log = logging.getLogger("quantladder")
_saved_stderr_fd: int | None = None


def console(msg: str) -> None:
    """A line for the person watching Snakemake (the real stderr), besides the log."""
    if _saved_stderr_fd is not None:
        os.write(_saved_stderr_fd, (msg + "\n").encode())
    else:
        print(msg, file=sys.__stderr__)


def start(snakemake) -> logging.Logger:
    """Send this script's stderr and logging to the rule's log (progress stays visible there)."""
    if snakemake.log:
        os.makedirs(os.path.dirname(snakemake.log[0]) or ".", exist_ok=True)
        logf = open(snakemake.log[0], "w", buffering=1)
        # llama.cpp writes to file descriptor 2 directly: point it at the log as well.
        sys.__stderr__.flush()
        global _saved_stderr_fd
        _saved_stderr_fd = os.dup(2)
        os.dup2(logf.fileno(), 2)
        sys.stderr = logf
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
        console(msg)
        sys.exit(getattr(e, "exit_code", 1))  # a budget stop exits 75: "try again", resumable
    except Exception:
        log.error("rule %s failed:\n%s", snakemake.rule, traceback.format_exc())
        raise
