"""Rule corpus: materialize a perplexity corpus as one UTF-8 text file."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder.corpora import materialize  # noqa: E402
from quantladder.errors import DataError  # noqa: E402
from quantladder.io import atomic_path, sha256_bytes  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    source = json.loads(smk.params.source)
    text = materialize(source)
    if len(text.strip()) == 0:
        raise DataError(f"corpus {smk.wildcards.corpus} is empty")
    digest = sha256_bytes(text.encode("utf-8"))
    if source.get("sha256") and source["sha256"] != digest:
        raise DataError(f"corpus {smk.wildcards.corpus}: sha256 is {digest}, corpora.{smk.wildcards.corpus}.sha256 expects {source['sha256']}")
    with atomic_path(smk.output[0]) as tmp:
        tmp.write_text(text, encoding="utf-8")


main(run, snakemake)
