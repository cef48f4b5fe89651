"""Rules acquire_source / acquire_prebuilt: fetch a GGUF, verify it, record its hash."""

import json

from quantladder import models
from quantladder.io import write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    spec = json.loads(smk.params.source)
    record = models.acquire(spec["source"], smk.output.gguf, sha256=spec.get("sha256"))  # with its GGUF's info
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
