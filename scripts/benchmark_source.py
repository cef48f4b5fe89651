"""Rule benchmark_source: a task benchmark's data, fetched and pinned once (name, version, sha256)."""

from pathlib import Path

from quantladder import benchmarks
from quantladder.io import write_json
from quantladder.scriptutil import log, main, mock_from_argv


def run(smk):
    bench = benchmarks.configured(smk.config, smk.wildcards.task)
    out = Path(smk.output[0])
    record = bench.fetch_source(str(out.parent))
    record["key"] = smk.params.key
    write_json(out, record)
    log.info("%s data %s: sha256 %s", bench.name, record.get("version"), record.get("sha256"))


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
