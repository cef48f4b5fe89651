"""Rule recommend: the best (family, rung, KV type) for a memory budget and a context, as JSON.

An infeasible request is an answer too: the JSON says `feasible: false` and why.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import dataset_view as dv  # noqa: E402
from quantladder import recommend as rec  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    df = dv.load(smk.input.points)
    result = rec.recommend(
        df, smk.wildcards.mem, smk.wildcards.ctx, card=smk.wildcards.card,
        kv=json.loads(smk.params.kv_types), min_tg=json.loads(smk.params.min_tg),
        weights=json.loads(smk.params.weights) or None, tolerance=json.loads(smk.params.tolerance) or None,
        cautious=json.loads(smk.params.cautious), corpora=json.loads(smk.params.corpora),
    )
    result["dataset"] = str(smk.input.points)
    print(rec.format_text(result), file=sys.stderr)  # the rule's log
    write_json(smk.output[0], result)


main(run, snakemake)
