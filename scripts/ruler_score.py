"""Rule ruler_score: RULER scores from saved generations only (no model is run here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import points  # noqa: E402
from quantladder.benchmarks import ruler  # noqa: E402
from quantladder.benchmarks.ruler import run as ruler_run  # noqa: E402
from quantladder.benchmarks.ruler import score as ruler_score  # noqa: E402
from quantladder.gguf_meta import GGUFInfo  # noqa: E402
from quantladder.io import atomic_path, canonical_json, read_json, read_jsonl  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    pt = points.from_snakemake(smk, "ruler")
    s = ruler.resolve_settings(smk.config["benchmarks"].get("ruler"))
    meta = read_json(smk.input.meta)
    done = read_json(smk.input.done)
    data = {k: meta.get(k) for k in ("name", "version", "sha256", "tasks", "lengths", "lengths_dropped",
                                     "lengths_note", "samples", "seed", "essay_source", "word_source", "qa")}
    data["kv_cache"] = {"kv": pt.kv, "type_k": pt.type_k, "type_v": pt.type_v}
    if done.get("blocked"):
        pt.write_metrics(smk.output.metrics, [], data=data)
        with atomic_path(smk.output.verdicts) as tmp:
            tmp.write_text("")
        return
    items = read_jsonl(smk.input.item_file)
    gens = [g for g in read_jsonl(Path(smk.input.done).with_name("generations.jsonl"))
            if g.get("run_key") == done.get("run_key")]
    verdicts = ruler_run.verdicts(items, gens)
    rows, summary = ruler_score.aggregate(verdicts, threshold=s["threshold"])
    info = pt.model_record.get("info")
    kv_info = GGUFInfo(**info) if info else None
    rows += ruler_run.memory_rows(gens, kv_info, pt.type_k, pt.type_v, meta["lengths"])
    rows += ruler_run.timing_rows(gens)
    with atomic_path(smk.output.verdicts) as tmp:
        tmp.write_text("".join(canonical_json(v) + "\n" for v in verdicts))
    incomplete = not done.get("complete")
    pt.write_metrics(smk.output.metrics, rows, data=data, engine={str(k): v for k, v in done.get("engine", {}).items()},
                     incomplete=incomplete, status="incomplete" if incomplete else None,
                     status_reason=(f"{done.get('done')} of {done.get('total')} items answered "
                                    "(benchmarks.ruler.time_budget_s ran out)") if incomplete else None,
                     extra={"summary": summary})


main(run, snakemake)
