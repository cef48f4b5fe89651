"""Rules aggregate and curves: the Parquet dataset (long form) and one curve file per family."""

from quantladder import aggregate, dataset
from quantladder.io import atomic_path
from quantladder.scriptutil import log, main, mock_from_argv


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


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
