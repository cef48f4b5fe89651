"""Rule recommend: the best (family, rung, KV type) for a memory budget and a context, as JSON.

An infeasible request is an answer too: the JSON says `feasible: false` and why.
"""

import json
import sys

from quantladder import dataset_view as dv
from quantladder import recommend as rec
from quantladder.io import write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    df = dv.load(smk.input.points)
    result = rec.recommend(
        df, smk.wildcards.mem, smk.wildcards.ctx, card=smk.wildcards.card,
        kv=json.loads(smk.params.kv_types), min_tg=json.loads(smk.params.min_tg),
        weights=json.loads(smk.params.weights) or None, tolerance=json.loads(smk.params.tolerance) or None,
        cautious=json.loads(smk.params.cautious), corpora=json.loads(smk.params.corpora),
        parallel=json.loads(smk.params.parallel),
        accept=json.loads(getattr(smk.params, "accept", "null")),
    )
    result["dataset"] = str(smk.input.points)
    print(rec.format_text(result), file=sys.stderr)  # the rule's log
    write_json(smk.output[0], result)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
