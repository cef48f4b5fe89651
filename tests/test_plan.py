"""`quantladder plan` on a small dataset made by the real producers: per-point metrics.json with rows from
quantladder.metrics.row and the speed measure's row writer, per-item verdicts.jsonl, and the
aggregate that turns them into flip rows and the Parquet dataset."""

import json
import math

import numpy as np
import pytest
import yaml

from quantladder import aggregate, benchmarks, cli, dataset, plan, stats
from quantladder import config as qconfig
from quantladder.metrics import row
from quantladder.io import append_jsonl, write_json
from quantladder.measures import speed

FAMILY = "smollm2-135m-instruct"
CARD = "cpu-test"
# rung: (humaneval losses, gains of 60 items; ruler losses, gains of 30 items; pp, tg tokens/s)
RUNGS = {"F16": (0, 0, 0, 0, 300.0, 40.0), "Q8_0": (1, 1, 0, 1, 400.0, 60.0),
         "Q4_K_M": (6, 1, 2, 0, 450.0, 90.0), "Q2_K": (15, 3, 5, 1, 500.0, 110.0)}
HE_N, RULER_N = 60, 30
# per benchmark and n_ctx: items, prompt tokens, output tokens (all rungs alike), measured seconds at F16
GEN = {"humaneval": {4096: (60, 9000, 30000, 800.0)},
       "ruler": {1024: (15, 15000, 300, 60.0), 2048: (15, 30000, 300, 120.0)}}


def _manifest(rung, kv="f16"):
    return {"point": {"card": CARD, "family": FAMILY, "rung": rung, "kv": kv, "type_k": kv, "type_v": kv,
                      "is_reference": rung == "F16"},
            "model": {"bits_per_weight": {"F16": 16.0, "Q8_0": 8.5, "Q4_K_M": 4.9, "Q2_K": 3.0}[rung]},
            "card": {"name": "test CPU"}, "keys": {"series": "points"}}


def _verdicts(n, losses, gains):
    # reference: the first half right; the rung loses `losses` of those and gains `gains` of the rest
    ref = [k < n // 2 for k in range(n)]
    rung = list(ref)
    for k in range(losses):
        rung[k] = False
    for k in range(gains):
        rung[n // 2 + k] = True
    return ([{"item_id": f"q{k}", "correct": c, "subset": None} for k, c in enumerate(ref)],
            [{"item_id": f"q{k}", "correct": c, "subset": None} for k, c in enumerate(rung)])


def _write_point(root, rung, bench, rows, verdicts=None):
    d = root / CARD / FAMILY / rung / "f16" / bench
    d.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": bench, "status": "ok", "rows": rows, "manifest": _manifest(rung)}
    if verdicts is not None:  # a task point: its generation settings, as the score job writes them
        doc["generation"] = {"n_parallel": 1}
    write_json(d / "metrics.json", doc)
    if verdicts is not None:
        for v in verdicts:
            append_jsonl(d / "verdicts.jsonl", v)
    return str(d / "metrics.json")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    paths = []
    for rung, (hl, hg, rl, rg, pp, tg) in RUNGS.items():
        speed_rows = speed.metric_rows({
            "pp": {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "n_parallel": 1, "repetitions": 3, "mean_tokens_per_s": pp, "sd_tokens_per_s": 1.0},
            "tg": {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "n_parallel": 1, "repetitions": 3, "mean_tokens_per_s": tg, "sd_tokens_per_s": 0.5}})
        paths.append(_write_point(root, rung, "speed", speed_rows))
        for bench, (n, losses, gains) in (("humaneval", (HE_N, hl, hg)), ("ruler", (RULER_N, rl, rg))):
            rows = []
            for n_ctx, (items, pt, ot, sec) in GEN[bench].items():
                rows += [row("generation_items", items, unit="items", n_ctx=n_ctx),
                         row("generation_prompt_tokens", pt, unit="tokens", n_ctx=n_ctx),
                         row("generation_output_tokens", ot, unit="tokens", n_ctx=n_ctx),
                         row("generation_seconds", sec * 40.0 / tg, unit="s", n_ctx=n_ctx)]
            _, rung_v = _verdicts(n, losses, gains)
            paths.append(_write_point(root, rung, bench, rows, rung_v))
    rows = aggregate.collect(paths)
    out = root / CARD / "points.parquet"
    dataset.write(rows, out)
    return out


def test_items_needed_per_rung_from_the_measured_flips(ds):
    res = plan.load_and_plan(ds, detect=2.0)
    assert res["card"] == CARD
    benches = {b["benchmark"]: b for b in res["benchmarks"]}
    assert set(benches) == {"humaneval", "ruler"}
    he = benches["humaneval"]
    # 3 rungs x 2 benchmarks compared on the card: Holm planned at its strictest step, alpha / 6
    assert he["n_comparisons"] == 6 and he["planning_alpha"] == pytest.approx(0.05 / 6)
    by = {r["rung"]: r for r in he["rungs"]}
    assert set(by) == {"Q8_0", "Q4_K_M", "Q2_K"}
    q2 = by["Q2_K"]
    assert (q2["n"], q2["n_loss"], q2["n_gain"]) == (60, 15, 3)
    assert q2["discordance_pct"] == pytest.approx(30.0)
    assert q2["items_needed"] == stats.items_needed(0.02, 0.3, alpha=0.05 / 6, power=0.8)[0]
    assert q2["detectable_now_points"] == pytest.approx(100 * stats.smallest_detectable_loss(60, 0.3, alpha=0.05 / 6))
    assert q2["items_needed_upper"] > q2["items_needed"]  # the flip rate's 95 % upper bound asks more
    # the rung with the most flips decides how many items the benchmark needs
    assert he["items_needed"] == max(r["items_needed"] for r in he["rungs"]) == q2["items_needed"]
    assert he["items_needed_rung"] == "Q2_K" and he["items_now"] == 60
    # a rung with fewer flips needs fewer items
    assert by["Q8_0"]["items_needed"] < by["Q4_K_M"]["items_needed"] < q2["items_needed"]


def test_predicted_generation_time_beside_the_measured(ds):
    res = plan.load_and_plan(ds, detect=2.0)
    costs = {(c["rung"], c["benchmark"]): c for c in res["point_costs"]}
    c = costs[("Q4_K_M", "ruler")]
    # summed over the two lengths: 45000 prompt tokens at 450 tokens/s + 600 generated at 90 tokens/s
    assert c["items"] == 30 and c["prompt_tokens"] == 45000 and c["output_tokens"] == 600
    assert c["predicted_s"] == pytest.approx(45000 / 450 + 600 / 90)
    assert c["actual_s"] == pytest.approx((60 + 120) * 40 / 90)
    assert c["actual_over_predicted"] == pytest.approx(c["actual_s"] / c["predicted_s"])
    assert c["n_parallel"] == 1


def test_whole_plan_of_a_config_prices_every_point_or_says_why_not(ds, tmp_path, repo_root):
    cfg = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    fam = cfg["families"][FAMILY]
    fam["rungs"] = ["Q8_0", "Q6_K", "Q4_K_M", "Q2_K"]
    fam.pop("rung_options", None)
    fam.pop("prebuilt", None)  # the default's stand-in for a third party's file: not what this prices
    other = dict(fam, chat=True)
    cfg["families"] = {FAMILY: fam, "unmeasured-family": other}
    cfg["benchmarks"] = {k: v for k, v in cfg["benchmarks"].items() if k in ("humaneval", "ruler")}
    for b in cfg["benchmarks"].values():
        b["enabled"] = True
    cfg_path = tmp_path / "plan.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    res = plan.load_and_plan(ds, detect=2.0, config_path=cfg_path)
    p = res["plan"]
    entries = {(e["rung"], e["benchmark"], e["series"]): e for e in p["entries"] if e["family"] == FAMILY}
    # a measured point is priced from its own tokens and speed; an unmeasured rung (Q6_K) from the
    # family's slowest measured rung (F16 here), an upper bound
    he_f16 = (9000 / 300 + 30000 / 40) / 60
    assert entries[("F16", "humaneval", "points")]["s_per_item"] == pytest.approx(he_f16)
    assert entries[("Q6_K", "humaneval", "points")]["s_per_item"] == pytest.approx(he_f16)
    assert "slowest measured rung (F16" in entries[("Q6_K", "humaneval", "points")]["priced_from"]
    q2 = entries[("Q2_K", "humaneval", "points")]
    need = next(b for b in res["benchmarks"] if b["benchmark"] == "humaneval")["items_needed"]
    assert q2["items_at_detect"] == need
    assert q2["hours_at_detect"] == pytest.approx((9000 / 500 + 30000 / 110) / 60 * need / 3600)
    assert p["job_hours_configured"] == pytest.approx(sum(e["hours_configured"] for e in p["entries"]))
    # the family never measured on this card: every job listed as not priced, with the reason
    un = [u for u in p["unpriced"] if u["family"] == "unmeasured-family"]
    assert un and all("not measured on this card" in u["reason"] for u in un)
    n_noise = sum(1 for e in p["entries"] + p["unpriced"] if e["series"] == "noise")
    assert p["n_jobs"] == 2 * 5 * 2 + n_noise  # (F16 + 4 rungs) x 2 benchmarks per family, + noise runs


def _thinking_plan(ds, tmp_path, repo_root, **reasoning_keys) -> dict:
    """The whole plan of a config whose family thinks (its format named: ``<think>``) at these settings."""
    cfg = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    fam = cfg["families"][FAMILY]
    fam["rungs"] = ["Q8_0", "Q4_K_M", "Q2_K"]
    for k in ("rung_options", "prebuilt", "task_rungs"):
        fam.pop(k, None)
    if reasoning_keys:
        fam["reasoning_format"] = "think"
        fam["reasoning"] = reasoning_keys
    cfg["families"] = {FAMILY: fam}
    cfg["benchmarks"] = {"humaneval": dict(cfg["benchmarks"]["humaneval"], enabled=True)}
    path = tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = plan.load_and_plan(ds, detect=2.0, config_path=path)
    return {(e["rung"], e["series"]): e for e in res["plan"]["entries"]} | {"_plan": res["plan"], "_text":
                                                                            plan.format_text(res)}


def test_a_thinking_familys_cost_grows_with_its_reasoning_budget(ds, tmp_path, repo_root):
    """Its thinking comes before its answer and adds to it: an item costs its prompt, its measured answer
    tokens and, at most, its budget's thinking tokens; unlimited thinking is bounded by the context."""
    plain = _thinking_plan(ds, tmp_path, repo_root)
    small = _thinking_plan(ds, tmp_path, repo_root, reasoning="on", reasoning_budget=256)
    large = _thinking_plan(ds, tmp_path, repo_root, reasoning="on", reasoning_budget=2048)
    unlimited = _thinking_plan(ds, tmp_path, repo_root, reasoning="on", reasoning_budget=-1)
    off = _thinking_plan(ds, tmp_path, repo_root, reasoning="off")
    # Q2_K's measured humaneval point: 60 items, 9000 prompt tokens at 500/s, 30000 output at 110/s (no
    # thinking measured: all answer)
    q2 = ("Q2_K", "points")
    assert "thinking" not in plain[q2]
    assert plain[q2]["s_per_item"] == pytest.approx((9000 / 500 + 30000 / 110) / 60)
    for budget, res in ((256, small), (2048, large)):
        t = res[q2]["thinking"]
        assert t["thinking_tokens_per_item"] == budget and t["answer_tokens_per_item"] == pytest.approx(500)
        assert res[q2]["s_per_item"] == pytest.approx(9000 / 500 / 60 + (500 + budget) / 110)
        assert f"reasoning budget, {budget} thinking tokens" in t["how"]
    assert plain[q2]["s_per_item"] < small[q2]["s_per_item"] < large[q2]["s_per_item"]
    assert (plain["_plan"]["job_hours_configured"] < small["_plan"]["job_hours_configured"]
            < large["_plan"]["job_hours_configured"])
    # unlimited: the context bounds it (HumanEval's n_ctx less the item's prompt and answer), said so
    t = unlimited[q2]["thinking"]
    n_ctx = benchmarks.configured(qconfig.load(repo_root / "config" / "config.yaml"), "humaneval").max_n_ctx()
    assert t["budget"] == -1 and t["thinking_tokens_per_item"] == pytest.approx(n_ctx - 150 - 500)
    assert "unlimited reasoning budget: bounded by the context" in t["how"]
    assert "unlimited reasoning budget" in unlimited["_text"] and "thinking: " in small["_text"]
    # reasoning off: no thinking priced
    assert off[q2]["thinking"]["thinking_tokens_per_item"] == 0
    assert off[q2]["s_per_item"] == pytest.approx(plain[q2]["s_per_item"])


def test_cli_plan_text_and_json(ds, capsys):
    assert cli.main(["plan", "--detect", "2", "--dataset", str(ds)]) == 0
    out = capsys.readouterr().out
    assert "detect a loss of 2 points at 80 % power" in out
    assert "humaneval" in out and "the Q2_K rung decides" in out
    assert "measured/predicted" in out and "Whole plan" in out
    assert cli.main(["plan", "--detect", "5", "--power", "0.9", "--dataset", str(ds), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["detect_points"] == 5.0 and res["power"] == 0.9
    he = next(b for b in res["benchmarks"] if b["benchmark"] == "humaneval")
    q2 = next(r for r in he["rungs"] if r["rung"] == "Q2_K")
    assert q2["items_needed"] == stats.items_needed(0.05, 0.3, alpha=0.05 / 6, power=0.9)[0]
    assert math.isfinite(res["plan"]["job_hours_at_detect"])


def test_cli_plan_errors_name_the_problem(ds, tmp_path, capsys):
    assert cli.main(["plan", "--detect", "0", "--dataset", str(ds)]) == 1
    assert "--detect" in capsys.readouterr().err
    assert cli.main(["plan", "--detect", "2", "--dataset", str(tmp_path / "none.parquet")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["plan", "--detect", "2", "--dataset", str(ds), "--card", "other"]) == 1
    assert "card 'other' is not in the dataset" in capsys.readouterr().err


def test_sample_sizes_follow_the_discordance():
    """More flips need more items to see the same loss (the McNemar variance grows with ψ)."""
    ns = [stats.items_needed(0.02, psi)[0] for psi in (0.02, 0.05, 0.1, 0.3)]
    assert ns == sorted(ns) and len(set(ns)) == 4
    assert np.all(np.diff(ns) > 0)
