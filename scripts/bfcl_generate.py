"""Rule bfcl_generate: BFCL answers for one point, appended per item; the done marker last.

generations.jsonl sits beside the marker and is not a declared output, on purpose: Snakemake deletes
declared outputs before a job starts, which would throw away the answers a killed job already paid
for. Each record carries the point's spec hash, so a resumed run never mixes settings. The marker
(generations.done.json) is written only at the end: a partial generations file never looks complete.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import points  # noqa: E402
from quantladder.benchmarks.bfcl import data, run as bfcl_run  # noqa: E402
from quantladder.benchmarks.bfcl.data import MULTI_TURN  # noqa: E402
from quantladder.engine import Engine  # noqa: E402
from quantladder.io import read_json, write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    pt = points.from_snakemake(smk, "bfcl")
    s = bfcl_run.settings(smk.config["benchmarks"].get("bfcl"))
    done_path = Path(smk.output.done)
    gen_path = pt.start_generations(done_path)
    if gen_path is None:  # the anchor gate failed on this card: measure nothing
        return
    record = read_json(smk.input.data)
    data.verify(record)
    items = data.load_items(record, s["categories"], s["limit"], s["limits"], s["seed"])
    executor = None
    if any(it["category"] in MULTI_TURN for it in items):
        from quantladder.benchmarks.bfcl.multiturn import SandboxExecutor

        executor = SandboxExecutor(record["root"], backend=s["sandbox_backend"], python=s["sandbox_python"],
                                   wall_s=s["sandbox_wall_s"])
    t0 = time.time()
    with Engine(pt.model_path, pt.engine_settings(n_ctx=s["n_ctx"])) as engine:
        result = bfcl_run.generate(engine, record["root"], items, gen_path, s, executor=executor,
                                   spec=smk.params.spec)
        resolved = engine.resolved
    write_json(done_path, {**result, "complete": not result["out_of_time"], "blocked": False,
                           "spec": smk.params.spec, "items_sha256": data.items_hash(items),
                           "data_sha256": record["sha256"], "engine": resolved, "seconds": time.time() - t0})


main(run, snakemake)
