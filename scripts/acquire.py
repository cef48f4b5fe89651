"""Rules acquire_source / acquire_prebuilt: fetch a GGUF, verify it, record its hash; a prebuilt
(third-party) file is also checked against the family's reference before anything measures it."""

import json
import os

from quantladder import models, provenance
from quantladder.errors import QuantladderError
from quantladder.io import read_json, write_json
from quantladder.scriptutil import main, mock_from_argv


def _with_template(record: dict, gguf: str, text: str) -> dict:
    """The acquired copy rewritten with chat template ``text``: its record's hash and info are the copy's,
    the file's own hash kept as ``sha256_source``."""
    models.write_chat_template(gguf, gguf, text)
    record = {**record, "sha256_source": record["sha256"], "sha256": models.sha256_file(gguf)}
    record["info"] = {**models.read_info(gguf).as_dict(), "path": str(gguf)}
    return record


def run(smk):
    spec = json.loads(smk.params.source)
    w = smk.wildcards
    gguf = smk.output.gguf
    where = f"families.{w.family}" + ("" if smk.rule == "acquire_source" else f".prebuilt.{w.rung}")
    if spec.get("derive"):  # a stand-in for a third party's file: a made rung's copy with one change
        record = models.derive(spec["derive"], smk.input.derived, gguf, where)
    else:
        record = models.acquire(spec["source"], gguf, sha256=spec.get("sha256"))  # with its GGUF's info
    if smk.rule == "acquire_source":
        if spec.get("chat_template"):  # families.<f>.chat_template: the source's copy with that template
            text, rec = models.chat_template_text(spec["chat_template"], f"families.{w.family}.chat_template")
            record = _with_template({**record, "chat_template": rec}, gguf, text)
        write_json(smk.output.info, record)
        return
    try:  # headers only: a fraction of a second
        template = {"from": "own"}
        # the reference's template in the rung's copy; the rule's params leave out chat_template at its
        # default (own: get_prebuilt_spec), so an absent one is own
        if spec.get("chat_template") == "reference":
            text, template = provenance.reference_template(smk.input.reference, gguf, where=where)
            if template["own_differs"]:
                record = _with_template(record, gguf, text)
        p = provenance.check(provenance.compare(smk.input.reference, gguf), spec.get("accept") or [],
                             where=where, path=str(gguf))
    except QuantladderError:
        os.unlink(gguf)  # a blocked file is not left where the ladder would measure it
        raise
    ref = read_json(smk.input.reference_info)
    record["provenance"] = {"reference": {"path": str(smk.input.reference), "sha256": ref.get("sha256")}, **p,
                            "chat_template": template}
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
