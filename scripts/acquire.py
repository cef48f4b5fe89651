"""Rules acquire_source / acquire_prebuilt: fetch a GGUF, verify it, record its hash; a prebuilt
(third-party) file is also checked against the family's reference before anything measures it."""

import json
import os

from quantladder import models, provenance
from quantladder.errors import QuantladderError
from quantladder.io import read_json, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    spec = json.loads(smk.params.source)
    record = models.acquire(spec["source"], smk.output.gguf, sha256=spec.get("sha256"))  # with its GGUF's info
    if smk.rule == "acquire_prebuilt":
        spec = {k: v for k, v in spec.items() if k != "chat_template"}  # own | reference: below, after the check
    if spec.get("chat_template"):  # families.<f>.chat_template: the source's copy with that template
        w = smk.wildcards
        text, rec = models.chat_template_text(spec["chat_template"], f"families.{w.family}.chat_template")
        models.write_chat_template(smk.output.gguf, smk.output.gguf, text)
        record = {**record, "chat_template": rec, "sha256_source": record["sha256"],
                  "sha256": models.sha256_file(smk.output.gguf)}
        record["info"] = {**models.read_info(smk.output.gguf).as_dict(), "path": str(smk.output.gguf)}
    if smk.rule == "acquire_prebuilt":
        w = smk.wildcards
        where = f"families.{w.family}.prebuilt.{w.rung}"
        pre = json.loads(smk.params.source)
        try:  # headers only: a fraction of a second
            template = None
            if pre.get("chat_template", "own") == "reference":  # the reference's template in the rung's copy
                text, template = provenance.reference_template(smk.input.reference, smk.output.gguf, where=where)
                if template["own_differs"]:
                    models.write_chat_template(smk.output.gguf, smk.output.gguf, text)
                    record = {**record, "sha256_source": record["sha256"],
                              "sha256": models.sha256_file(smk.output.gguf)}
                    record["info"] = {**models.read_info(smk.output.gguf).as_dict(), "path": str(smk.output.gguf)}
            p = provenance.check(provenance.compare(smk.input.reference, smk.output.gguf), spec.get("accept") or [],
                                 where=where, path=str(smk.output.gguf))
        except QuantladderError:
            os.unlink(smk.output.gguf)  # a blocked file is not left where the ladder would measure it
            raise
        ref = read_json(smk.input.reference_info)
        record["provenance"] = {"reference": {"path": str(smk.input.reference), "sha256": ref.get("sha256")}, **p,
                                "chat_template": template or {"from": "own"}}
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
