"""Rule bfcl_data: obtain BFCL v4's files (questions, possible answers, multi-turn docs and backends,
prompt templates) without bfcl-eval's dependencies, and record their version and sha256s."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder.benchmarks.bfcl import data  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    source = json.loads(smk.params.source)
    record = data.materialize(source, smk.output.root, smk.output.record,
                              download_dir=Path(smk.output.root).parent / "wheel")
    print(f"bfcl data {record['version']}: {len(record['files'])} files, sha256 {record['sha256']}", file=sys.stderr)


main(run, snakemake)
