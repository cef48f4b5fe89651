"""The rows a GPU writes reach the report and the recommender, under the names they read.

No GPU is attached to the machines the suite runs on: the NVML readings are fakes (tests/nvml_fakes.py,
the only place a fake is acceptable). Everything else is real: the energy producer (sampler thread,
integration, idle subtraction) around real single-token decodes, the memory producer loading the
real model while the fake card reports this process's memory, the manifest builder, the aggregate,
the report in Chromium-free HTML form and the recommender.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nvml_fakes import TraceReader
from quantladder import aggregate, dataset, recommend, report
from quantladder import dataset_view as dv
from quantladder.engine import RawContext
from quantladder.gguf_meta import read_info
from quantladder.measures import energy, memory, speed

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "dataset"))
import make_fixture  # noqa: E402


def _energy_rows(model) -> list[dict]:
    reader = TraceReader(idle_w=60.0, busy_w=260.0)
    idle = {"idle_power_w": 60.0, "idle_power_sem_w": 0.5, "n_samples": 50}
    rng = np.random.default_rng(0)
    with RawContext(str(model), n_ctx=96, n_batch=64, n_threads=2) as ctx:
        def work(mark):
            reader.set_busy(True)
            speed.bench_prompt(ctx, 64, 64, rng)
            mark()
            speed.bench_gen(ctx, 16, 64, rng)
            time.sleep(0.2)  # long enough for the sampler to see the busy phase
            reader.set_busy(False)
        res = energy.measure_generation(work, n_gen_tokens=16, n_prompt_tokens=64, idle_cache_path=None,
                                        reader=reader, interval_s=0.02, idle=idle)
    res.pop("trace", None)
    res.pop("value", None)
    return energy.metric_rows(res, n_ctx=80)


def _memory_rows(model, peak_bytes) -> list[dict]:
    reader = TraceReader()
    reader.proc_mem = peak_bytes  # what NVML would list for this process on the card
    r = memory.measure(str(model), read_info(model), n_ctx=512, gpu=True, reader=reader)
    assert r["probe"]["method"] == "nvml_process" and r["peak_mem_bytes"] == peak_bytes
    return memory.metric_rows(r)


@pytest.mark.slow
def test_energy_and_vram_rows_reach_the_report_and_the_recommender(tmp_path, smollm_q8, smollm_q2k):
    root = tmp_path / "results"
    files = []
    for model, p in ((smollm_q8, make_fixture.POINTS[1]), (smollm_q2k, make_fixture.POINTS[2])):
        files.append(make_fixture._write(root, "gpu-test", p, "energy", _energy_rows(model)))
        files.append(make_fixture._write(root, "gpu-test", p, "memory", _memory_rows(model, p[3] << 20)))
        bench = make_fixture.qbench.create("bfcl", make_fixture.CONFIG["benchmarks"]["bfcl"])
        v = make_fixture._bfcl_verdicts(p[5])
        files.append(make_fixture._write(root, "gpu-test", p, "bfcl", bench.metric_rows(v, []), verdicts=v))
    out = tmp_path / "points.parquet"
    dataset.write(aggregate.collect(files), out)
    df = dv.load(out)
    j = df[(df["metric"] == "joules_per_generated_token")]
    assert len(j) == 2 and (j["value"] > 0).all() and (j["stderr"] > 0).all() and (j["status"] == "ok").all()
    mem = df[df["metric"] == "peak_mem_bytes"]
    assert set(mem["subset"]) == {"nvml_process"}

    html = report.build(out, tmp_path / "r.html", card="gpu-test").read_text()
    assert 'data-kind="pareto"' in html and 'data-cost="joules_per_generated_token"' in html
    assert 'data-cost="peak_mem_bytes"' in html

    r = recommend.recommend(df, "8GiB", 512, weights={"bfcl": 1}, card="gpu-test")
    # no reference point in this dataset: the higher BFCL headline wins (Q6_K 80 % over Q8_0 79 %)
    assert r["feasible"] and r["best"]["rung"] == "Q6_K"
    assert r["best"]["scores"]["bfcl"]["value"] == pytest.approx(80.0)
