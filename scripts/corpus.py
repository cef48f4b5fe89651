"""Rule corpus: materialize a corpus as one UTF-8 text file (a chat corpus: one JSON conversation
per line), with a record of where it came from and its sha256 beside it."""

import json

from quantladder.corpora import build
from quantladder.errors import DataError
from quantladder.io import atomic_path, sha256_bytes, write_json
from quantladder.scriptutil import log, main, mock_from_argv


def run(smk):
    name = smk.wildcards.corpus
    source = json.loads(smk.params.source)
    corpus = build(source)
    if len(corpus.text.strip()) == 0:
        raise DataError(f"corpus {name} is empty")
    data = corpus.text.encode("utf-8")
    digest = sha256_bytes(data)
    if source.get("sha256") and source["sha256"] != digest:
        raise DataError(f"corpus {name}: sha256 is {digest}, corpora.{name}.sha256 expects {source['sha256']}")
    with atomic_path(smk.output.text) as tmp:
        tmp.write_bytes(data)
    write_json(smk.output.info, {"name": name, "sha256": digest, "bytes": len(data), "chars": len(corpus.text),
                                 "kind": corpus.kind, "source": source, **corpus.record})
    log.info("corpus %s: %d characters, sha256 %s", name, len(corpus.text), digest)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
