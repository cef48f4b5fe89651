"""Rule generate_code: a code suite's replies for one point (GPU host). Nothing model-written runs here.

generations.jsonl sits beside the declared marker and is not itself an output, on purpose: Snakemake
deletes declared outputs of a failed job, which would throw away the replies a killed job already
paid for. Each record carries the point's spec hash (a changed config never mixes in old replies),
and generations.done.json is written last, so a partial jsonl is never taken as complete.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import budget as qbudget  # noqa: E402
from quantladder import points  # noqa: E402
from quantladder.benchmarks.code import data, generate  # noqa: E402
from quantladder.engine import Engine  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    suite = smk.wildcards.suite
    section = smk.config["benchmarks"][suite]
    pt = points.from_snakemake(smk, suite)
    done_path = Path(smk.output.done)
    gen_path = pt.start_generations(done_path)
    if gen_path is None:  # the anchor gate failed on this card: generate nothing
        return
    items = data.load_suite(suite, section)
    bud = qbudget.from_snakemake(smk)
    t0 = time.time()
    with Engine(pt.model_path, pt.engine_settings(n_ctx=int(section.get("n_ctx", 4096)))) as engine:
        counts = generate.generate_items(engine, items, gen_path, spec=smk.params.spec,
                                         max_new_tokens=int(section.get("max_new_tokens", 1280)), budget=bud)
        resolved = engine.resolved
    write_json(done_path, {**counts, "complete": True, "blocked": False, "suite": suite, "spec": smk.params.spec,
                           "item_ids": [it.item_id for it in items], "engine": resolved,
                           "seconds": round(time.time() - t0, 3)})


main(run, snakemake)
