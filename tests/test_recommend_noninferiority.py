"""Issue 33: "no loss detectable" is not "no loss". A rung ranks with its reference only where the run
*shows* it within the tolerance; an 8-item run shows nothing, so it ranks by KLD.

The datasets are made by the real producers (tests/fixtures/dataset/make_fixture.py's writer: the
manifest builder, the code benchmark's and the perplexity measure's row writers, the aggregate with
its paired columns) for one family `smol` on card `cpu-test`:

    rung     weights  bits  KLD on pydoc-topics (nats)   HumanEval (8 items / 5,000 items)
    F16      270 MiB  16    (the reference)               4/8    2,500
    Q8_0     145 MiB  8.5   0.005 ± 0.0002                5/8    2,500 (no item differs)
    Q4_K_M   100 MiB  4.89  0.06 ± 0.003                  3/8    2,400 (150 lost, 50 gained)
    Q2_K      70 MiB  3.0   0.5 ± 0.02                    5/8    1,600 (1,000 lost, 100 gained)

Predicted memory at 4096 tokens: weights + 46 KiB/token (184 MiB) + 20 MiB buffers.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from quantladder import aggregate, cli, dataset
from quantladder import dataset_view as dv
from quantladder import recommend as rec
from quantladder.stats import noninferiority as ni

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "dataset"))
import make_fixture as mf  # noqa: E402

MiB, KiB = 1 << 20, 1 << 10
CORPUS = "pydoc-topics"
RUNGS = {  # rung: (weights MiB, bits per weight, kld, kld se, (8-item correct), (5000-item lost, gained))
    "F16": (270, 16.0, 2e-7, 1e-8, 4, (0, 0)),  # the pipeline's reference pass writes its own KLD (≈ 0)
    "Q8_0": (145, 8.5, 0.005, 0.0002, 5, (0, 0)),
    "Q4_K_M": (100, 4.89, 0.06, 0.003, 3, (150, 50)),
    "Q2_K": (70, 3.0, 0.5, 0.02, 5, (1000, 100)),
}
CONFIG = {**mf.CONFIG, "families": {"smol": {"source": {"path": "/models/smol.gguf"}, "reference": "F16",
                                             "rungs": ["Q8_0", "Q4_K_M", "Q2_K"]}},
          "benchmarks": {"humaneval": {"enabled": True}}}


def _verdicts(rung: str, n: int) -> list[dict]:
    """8 items: the rung's first k right (4 for the reference); n items: half right for the
    reference, and the rung loses the first `lost` of those and gains the first `gained` others."""
    _, _, _, _, k8, (lost, gained) = RUNGS[rung]
    out = []
    for i in range(n):
        if n == 8:
            ok = i < k8
        else:
            ref_ok = i < n // 2
            ok = (ref_ok and i >= lost) or (not ref_ok and i - n // 2 < gained)
        out.append({"item_id": f"HumanEval/{i}", "subset": None, "correct": ok,
                    "error_type": None if ok else "fail", "degenerate": False})
    return out


def build(tmp: Path, n_items: int) -> Path:
    root = tmp / "results"
    files = []
    bench = mf.qbench.create("humaneval", CONFIG["benchmarks"]["humaneval"])
    for rung, (w_mib, bpw, kld, kld_se, _, _) in RUNGS.items():
        p = ("smol", rung, "f16")
        record = {"sha256": mf._sha("smol", rung), "info": {
            "file_bytes": w_mib * MiB, "n_params": 135_000_000, "bits_per_weight": bpw, "file_type": rung,
            "tensor_types": {rung: 100}, "tensor_type_params": {rung: 135_000_000}}}
        kw = {"cfg": CONFIG, "record": record}
        mem = {"n_ctx": 4096, "file_bytes": w_mib * MiB, "weights_bytes": w_mib * MiB, "bits_per_weight": bpw,
               "n_ctx_train": 8192, "kv_bytes_predicted": 46 * KiB * 4096, "kv_bytes_allocated": 46 * KiB * 4096,
               "compute_buffer_bytes": 20 * MiB, "predicted_total_bytes": (w_mib + 184 + 20) * MiB,
               "peak_mem_bytes": (w_mib + 210) * MiB, "probe": {"method": "rss", "status": "ok"}}
        files.append(mf._write(root, "cpu-test", p, "memory", mf.memory.metric_rows(mem), **kw))
        spd = {"tg": {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "n_parallel": 1, "repetitions": 5, "mean_tokens_per_s": 300.0, "sd_tokens_per_s": 2.0},
               "pp": {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "n_parallel": 1, "repetitions": 5, "mean_tokens_per_s": 3000.0, "sd_tokens_per_s": 9.0}}
        files.append(mf._write(root, "cpu-test", p, "speed", mf.speed.metric_rows(spd), **kw))
        summ = mf._ppl_summary(20.0 + 10 * (kld or 0.0), kld, kld_se, 100.0 - 40 * (kld or 0.0), base=20.0)
        files.append(mf._write(root, "cpu-test", p, "perplexity", mf.ppl.metric_rows(summ, 512, subset=CORPUS), **kw))
        v = _verdicts(rung, n_items)
        rows = bench.metric_rows(v, []) + mf.scoring.common_rows(v, {})
        files.append(mf._write(root, "cpu-test", p, "humaneval", rows, verdicts=v, **kw))
    out = tmp / "points.parquet"
    dataset.write(aggregate.collect(files), out)
    return out


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    return build(tmp_path_factory.mktemp("ni-8"), 8)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    return build(tmp_path_factory.mktemp("ni-5000"), 5000)


def _ask(path, mem, **kw):
    return rec.recommend(dv.load(path), mem, 4096, card="cpu-test", **kw)


def _figure(path, rung):
    df = dv.load(path)
    return df[(df.rung == rung) & (df.metric == "pass_at_1") & df.subset.isna()].iloc[0]


# ---------------------------------------------------------------- the rule itself

def test_decide_at_the_bound():
    just_in = ni.decide(-0.5, -0.999, 0.1, tolerance=1.0, higher_is_better=True, unit="%", stderr=0.3, n=1000)
    at = ni.decide(-0.5, -1.0, 0.1, tolerance=1.0, higher_is_better=True, unit="%", stderr=0.3, n=1000)
    just_out = ni.decide(-0.5, -1.001, 0.1, tolerance=1.0, higher_is_better=True, unit="%", stderr=0.3, n=1000)
    assert just_in.state == at.state == ni.NONINFERIOR and just_in.items_needed is None
    assert just_out.state == ni.UNDETERMINED
    # its flip rate n·SE² + Δ² = 0.9 %, raised to the 1 % margin: the claim's own power plans 1,040 items, the
    # detection of a 1-point loss (McNemar) 790
    assert just_out.items_needed == ni.qpower.noninferiority_items(0.01, 0.01, alpha=0.05, power=0.8)[0] == 1040
    assert just_out.items_to_detect == ni.qpower.items_needed(0.01, 0.01, alpha=0.05, power=0.8)[0] == 790
    assert ni.decide(-3, -4, -1.5, tolerance=1.0, higher_is_better=True, unit="%").state == ni.INFERIOR
    # lower is better (a KLD): the upper bound is the one that counts
    assert ni.decide(0.005, 0.004, 0.0099, tolerance=0.01, higher_is_better=False, unit="nats").shown
    assert ni.decide(0.005, 0.004, 0.0101, tolerance=0.01, higher_is_better=False, unit="nats").state == ni.UNDETERMINED
    assert ni.decide(0.05, 0.04, 0.06, tolerance=0.01, higher_is_better=False, unit="nats").state == ni.INFERIOR
    assert ni.decide(None, None, None, tolerance=1.0, higher_is_better=True, unit="%") is None
    assert ni.tolerance_for("pass_at_1", "%") == 1.0 and ni.tolerance_for("kld_mean", "nats") == 0.01
    assert ni.tolerance_for("pass_at_1", "%", {"pass_at_1": 2}) == 2.0 and ni.tolerance_for("tokens_per_s", "tokens/s") is None


def test_the_walk_stops_at_the_first_rung_not_shown():
    ok = ni.decide(-0.1, -0.5, 0.3, tolerance=1.0, higher_is_better=True, unit="%")
    wide = ni.decide(-0.1, -3.0, 2.8, tolerance=1.0, higher_is_better=True, unit="%")
    walked = ni.walk([("Q8_0", ok), ("Q6_K", wide), ("Q4_K_M", ok)])
    assert walked[0].shown and walked[1].reached and not walked[1].shown
    assert walked[2].state == ni.NONINFERIOR and not walked[2].reached and not walked[2].shown
    assert "the walk down the ladder stopped at Q6_K" in walked[2].text
    # a rung without a comparison stops it too: nothing is claimed past what was not tested
    assert not ni.walk([("Q8_0", None), ("Q6_K", ok)])[1].shown


def test_items_needed_is_the_power_plan_of_the_claim():
    # binary figure: ψ = n·SE² + Δ² is its flip rate, 5 % here (50 of 1000 items flip, as many each way)
    se = 100 * math.sqrt(0.05 / 1000)
    d = ni.decide(0.0, -1.4, 1.4, tolerance=1.0, higher_is_better=True, unit="%", stderr=se, n=1000)
    assert d.items_needed == ni.qpower.noninferiority_items(0.01, 0.05, alpha=0.05, power=0.8)[0]
    assert ni.qpower.noninferiority_power(d.items_needed, 0.01, 0.05) >= 0.8
    assert f"{d.items_needed:,} items needed to show it within 1 point" in d.text


# ---------------------------------------------------------------- 8 items: undetermined, ranked by KLD

def test_eight_items_cannot_separate_the_rungs(eight):
    q2 = _figure(eight, "Q2_K")
    assert q2["verdict"] == "no loss detectable" and q2["n"] == 8  # the old rule's "no loss"
    r = _ask(eight, "141GiB")
    # every rung fits; Q2_K scores as high as Q8_0 on 8 items and is the smallest, yet its KLD is 100× Q8_0's
    assert r["best"]["name"] == "smol/Q8_0/f16"
    assert r["best"]["ranked_by"] == "KLD" and r["best"]["kld"]["claimed"]
    assert r["best"]["scores"]["humaneval"]["decision"] == ni.UNDETERMINED
    note = next(n for n in r["notes"] if n.startswith("smol: no rung's task figures are determined"))
    assert "undetermined: Δ" in note and "items needed to show it within 1 point" in note
    assert "its rungs rank by mean KLD on pydoc-topics" in note
    why = r["why"]
    assert why.startswith("smol's task scores cannot separate its rungs, so they rank by KLD")
    assert "KLD on pydoc-topics: shown within 0.01 nats of the reference" in why
    assert "preferred over the larger smol/F16/f16" not in why  # Q8_0 measured 5/8 > F16's 4/8
    assert r["message"].endswith(why)


def test_eight_items_never_pick_a_smaller_rung_on_task_scores(eight):
    # Q4_K_M (3/8) and Q2_K (5/8) fit: their task scores cannot separate them, their KLDs can
    mid = _ask(eight, "320MiB")  # Q4_K_M 304 MiB, Q2_K 274 MiB
    assert mid["best"]["name"] == "smol/Q4_K_M/f16"
    assert [c["name"] for c in mid["preferred_over"]] == []  # Q2_K is smaller, not larger
    assert mid["best"]["rank_score"] < 50.0  # below the reference's: its KLD is not shown within 0.01 nats
    q2 = _ask(eight, "290MiB")
    assert q2["best"]["name"] == "smol/Q2_K/f16"  # the only one that fits
    # the cautious pick orders by the KLD's upper bound: the same answer here
    assert _ask(eight, "320MiB", cautious=True)["best"]["name"] == "smol/Q4_K_M/f16"


def test_cli_on_eight_items_answers_undetermined(eight, capsys):
    assert cli.main(["recommend", "--mem", "141GiB", "--ctx", "4096", "--dataset", str(eight), "--card", "cpu-test"]) == 0
    text = capsys.readouterr().out
    assert "best:  smol/Q8_0/f16" in text
    assert "no loss detectable; undetermined" in text
    assert "items needed to show it within 1 point" in text
    assert "why:   smol's task scores cannot separate its rungs" in text


def test_without_kld_the_larger_rung_ranks_first(eight):
    df = dv.load(eight)
    r = rec.recommend(df[df.metric != "kld_mean"], "141GiB", 4096, card="cpu-test")
    assert r["best"]["name"] == "smol/F16/f16" and r["best"]["ranked_by"] == "bits per weight"
    assert rec.recommend(df[df.metric != "kld_mean"], "320MiB", 4096, card="cpu-test")["best"]["rung"] == "Q4_K_M"


# ---------------------------------------------------------------- 5,000 items: shown, both ways

def test_five_thousand_items_show_q8_within_the_tolerance(many):
    q8, q4 = _figure(many, "Q8_0"), _figure(many, "Q4_K_M")
    assert q8["delta"] == 0 and q8["delta_ci_low"] > -1.0
    assert q4["delta"] == pytest.approx(-2.0) and q4["delta_ci_high"] < -1.0
    r = _ask(many, "141GiB")
    best = r["best"]
    assert best["name"] == "smol/Q8_0/f16" and best["ranked_by"] == "task scores"
    assert best["rank_score"] == pytest.approx(50.0) and best["scores"]["humaneval"]["claimed"]
    assert best["claimed"][0]["reference_value"] == pytest.approx(50.0)
    assert r["why"].startswith("humaneval: shown within 1 point of the reference: Δ +0.0 (95 % CI")
    assert f"its bound {q8['delta_ci_low']:+.1f} ≥ -1.0" in r["why"]
    # Q4_K_M's loss is shown beyond the tolerance: it ranks by its measured 48 %, above Q2_K's 32 %
    mid = _ask(many, "320MiB")
    assert mid["best"]["name"] == "smol/Q4_K_M/f16" and mid["best"]["scores"]["humaneval"]["decision"] == ni.INFERIOR
    assert mid["best"]["rank_score"] == pytest.approx(48.0)
    cautious = _ask(many, "320MiB", cautious=True)["best"]
    assert cautious["rank_score"] == pytest.approx(50.0 + q4["delta_ci_low"])


def test_a_rung_just_inside_and_just_outside_the_tolerance(many):
    """Q4_K_M's lower bound L: a tolerance a hair above −L shows it (it ranks with the reference and,
    smallest of those that do, wins); a hair below does not (Q8_0 wins)."""
    low = float(_figure(many, "Q4_K_M")["delta_ci_low"])
    inside = _ask(many, "141GiB", tolerance={"pass_at_1": -low + 0.001})
    assert inside["best"]["name"] == "smol/Q4_K_M/f16" and inside["best"]["scores"]["humaneval"]["claimed"]
    # F16 and Q8_0 score 50 % as measured, Q4_K_M 48 %, yet it ranks with the reference's 50 % and is smaller
    assert [c["name"] for c in inside["preferred_over"]] == ["smol/Q8_0/f16", "smol/F16/f16"]
    assert inside["why"].startswith("preferred over the larger smol/Q8_0/f16 (")
    assert "so it ranks with the reference's score 50.00 % and the smaller memory wins" in inside["why"]
    outside = _ask(many, "141GiB", tolerance={"pass_at_1": -low - 0.001})
    assert outside["best"]["name"] == "smol/Q8_0/f16"
    q4 = next(c for c in outside["runners_up"] if c["rung"] == "Q4_K_M")
    assert q4["scores"]["humaneval"]["decision"] == ni.UNDETERMINED and q4["rank_score"] == pytest.approx(48.0)
