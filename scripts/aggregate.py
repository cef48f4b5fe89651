"""Rules aggregate and curves: the Parquet dataset (long form) and one curve file per family."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import aggregate, dataset  # noqa: E402
from quantladder.io import atomic_path  # noqa: E402
from quantladder.scriptutil import log, main  # noqa: E402


def run(smk):
    rows = aggregate.collect(list(smk.input.metrics))
    if smk.rule == "curves":
        df = aggregate.curve_table(rows, smk.wildcards.family)
        with atomic_path(smk.output[0]) as tmp:
            df.to_parquet(tmp, index=False)
        log.info("curve %s: %d rows", smk.wildcards.family, len(df))
    else:
        dataset.write(rows, smk.output[0])
        log.info("dataset: %d rows from %d metrics files", len(rows), len(smk.input.metrics))


main(run, snakemake)
