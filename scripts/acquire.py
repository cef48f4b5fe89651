"""Rules acquire_source / acquire_prebuilt: fetch a GGUF, verify it, record its hash."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import models  # noqa: E402
from quantladder.gguf_meta import read_info  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    spec = json.loads(smk.params.source)
    record = models.acquire(spec["source"], smk.output.gguf, sha256=spec.get("sha256"))
    record["info"] = read_info(smk.output.gguf).as_dict()
    write_json(smk.output.info, record)


main(run, snakemake)
