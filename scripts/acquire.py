"""Rules acquire_source / acquire_prebuilt: fetch a GGUF, verify it, record its hash."""

import json

from quantladder import models
from quantladder.gguf_meta import read_info
from quantladder.io import write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    spec = json.loads(smk.params.source)
    record = models.acquire(spec["source"], smk.output.gguf, sha256=spec.get("sha256"))
    record["info"] = read_info(smk.output.gguf).as_dict()
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
