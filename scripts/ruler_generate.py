"""Rule ruler_generate: RULER answers for one point, appended per item; the done marker last.

generations.jsonl sits beside the marker and is not a declared output, on purpose: Snakemake
deletes declared outputs before a job starts, which would throw away the answers a killed job
already paid for. The marker (generations.done.json) is written only at the end, so a partial
generations file never looks complete.
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import HARNESS_VERSION, points  # noqa: E402
from quantladder.benchmarks import ruler  # noqa: E402
from quantladder.benchmarks.ruler import run as ruler_run  # noqa: E402
from quantladder.io import hash_obj, read_json, read_jsonl, write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    log = logging.getLogger("quantladder.ruler")
    pt = points.from_snakemake(smk, "ruler")
    s = ruler.resolve_settings(smk.config["benchmarks"].get("ruler"))
    meta = read_json(smk.input.meta)
    gen_path = pt.start_generations(smk.output.done, items_sha256=meta["sha256"])
    if gen_path is None:  # the anchor gate failed on this card: measure nothing
        return
    items = read_jsonl(smk.input.item_file)
    # Resume only from answers to these very items, by this very file, with these KV types and
    # engine settings (a changed time budget alone keeps the answers already paid for).
    run_key = hash_obj({"items": meta["sha256"], "model": pt.model_record.get("sha256"), "kv": pt.kv,
                        "gpu_layers": smk.config.get("gpu_layers", 0), "flash_attn": smk.config.get("flash_attn"),
                        "harness": HARNESS_VERSION, "ruler": ruler.RULER_VERSION})[:16]
    result = ruler_run.generate(items, pt.model_path, pt.engine_settings, gen_path, log=log,
                                time_budget_s=s.get("time_budget_s"), run_key=run_key)
    gens = read_jsonl(gen_path)
    result.update({"blocked": False, "run_key": run_key, "items_sha256": meta["sha256"], "kv": pt.kv, "type_k": pt.type_k,
                   "type_v": pt.type_v, "n_generations": len(gens)})
    log.info("ruler %s/%s/%s: %d of %d items answered", pt.family, pt.rung, pt.kv, result["done"], result["total"])
    write_json(smk.output.done, result)


main(run, snakemake)
