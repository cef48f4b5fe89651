"""Rule benchmark_source: a task benchmark's data, fetched and pinned once (name, version, sha256)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import benchmarks  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import log, main  # noqa: E402


def run(smk):
    bench = benchmarks.configured(smk.config, smk.wildcards.task)
    out = Path(smk.output[0])
    record = bench.fetch_source(str(out.parent))
    record["key"] = smk.params.key
    write_json(out, record)
    log.info("%s data %s: sha256 %s", bench.name, record.get("version"), record.get("sha256"))


main(run, snakemake)
