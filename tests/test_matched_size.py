"""Third-party files at matched size and the speed floor (issue 44, deliverables 3 and 4).

The pure pieces by hand (the interpolation of a ladder at another file's bits per weight, the size gap,
the speed at a context and concurrency); then the report, the recommender and the walk on the fixture
dataset made by the real producers (tests/fixtures/dataset/make_fixture.py, its `tiny` ladder) with one
third-party file of `families.tiny.prebuilt` written by the same producers beside it; the walk's speed
floor on the fixture's speed points, whose ladder already holds a smaller rung that is slower
(IQ2_XXS-attn8 below Q4_K_M, its attention in Q8_0), and on speeds measured here by the real speed
measure; and the hub example comparing two uploaders' files, by a dry run."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest

from pipeline_util import REPO, make_fixture_module, planned_jobs, snakemake
from quantladder import aggregate, dataset
from quantladder import dataset_view as dv
from quantladder import find as qfind
from quantladder import metrics
from quantladder import recommend as rec
from quantladder.cli import main as cli_main
from quantladder.errors import ConfigError
from quantladder.io import write_json
from quantladder.report import answer

CARD, FAM = "cpu-test", "tiny"
HUB = "Q4_K_S-hub"  # the third-party file
HUB_BPW, HUB_KLD, HUB_TG = 5.9, 0.2, 300.0
BIG_HUB = "Q5_K_S-hub"  # a third-party file of the chat family `big`: 5.5 bits, smaller than Q6_K and slower
BIG_HUB_POINT = ("big", BIG_HUB, "f16", 3000, 64 << 10, 77, 15.0, 300.0, 1.0, 10.1, 0.01, 96.0)


# ------------------------------------------------------------------------------------------ the pure pieces

def test_at_bpw_interpolates_between_the_measured_neighbours():
    ladder = [("Q8_0", 8.5, 0.01), ("Q4_K_M", 4.89, 0.06), ("Q2_K", 2.96, 0.50)]
    at = dv.at_bpw(ladder, 4.0)
    # by hand: 0.50 + (4.0 − 2.96) · (0.06 − 0.50) / (4.89 − 2.96)
    assert at["value"] == pytest.approx(0.50 + 1.04 * -0.44 / 1.93)
    assert at["interpolated"] and at["below"][0] == "Q2_K" and at["above"][0] == "Q4_K_M"
    assert at["text"] == "interpolated at 4.00 bits per weight between Q2_K (2.96) and Q4_K_M (4.89)"
    same = dv.at_bpw(ladder, 4.89)
    assert same["value"] == 0.06 and same["interpolated"] is False and "Q4_K_M at the same size" in same["text"]
    for outside in (2.5, 9.0):  # never extrapolated: absent, with the reason
        out = dv.at_bpw(ladder, outside)
        assert out["value"] is None and "outside the sizes measured here (Q2_K 2.96 … Q8_0 8.50)" in out["reason"]
    assert dv.at_bpw([], 4.0)["reason"] == "no rung made here has this figure"
    assert dv.at_bpw(ladder, None)["reason"] == "the file's bits per weight are not recorded"
    # two rungs at one size: the better of them stands for it when the direction is known, else absent
    twins = ladder + [("Q4_K_M-imat", 4.89, 0.04)]
    assert dv.at_bpw(twins, 4.0)["value"] is None and "share 4.89 bits" in dv.at_bpw(twins, 4.0)["reason"]
    best = dv.at_bpw(twins, 4.0, higher_is_better=False)
    assert best["value"] == pytest.approx(0.50 + 1.04 * (0.04 - 0.50) / 1.93)
    assert best["above"][0] == "Q4_K_M-imat" and "the better of Q4_K_M, Q4_K_M-imat" in best["text"]


def test_size_gap_states_bits_and_bytes_and_never_takes_a_missing_one_as_zero():
    MiB = 1 << 20
    assert dv.size_gap(4.5, 110 * MiB, 6.0, 100 * MiB) == "−1.50 bits per weight, +10.00 MiB (+10.0 %)"
    assert dv.size_gap(6.0, 100 * MiB, 4.5, 110 * MiB, short=True) == "+1.50 bits, −10.00 MiB"
    assert dv.size_gap(None, 100, 4.5, float("nan")) == "bits per weight not recorded, file size not recorded"


def test_speed_at_the_users_context_and_concurrency():
    rows = [metrics.row("tg_tokens_per_s", 40.0, unit="tokens/s", stderr=1.0, n=5, subset="tg128", n_ctx=128),
            metrics.row("tg_tokens_per_s", 31.0, unit="tokens/s", stderr=1.0, n=5, subset="tg4096", n_ctx=4096)]
    at = dv.speed_at(rows, 2048)
    assert at["value"] == 31.0 and at["n_ctx"] == 4096 and at["note"] == "" and at["n_parallel"] == 1
    long = dv.speed_at(rows, 16384)  # beyond what was measured: the longest, an upper bound, said so
    assert long["value"] == 31.0 and "measured at n_ctx 4096, below the 16384 tokens asked: an upper bound" in long["note"]
    four = dv.speed_at(rows, 2048, parallel=4)  # llama-bench's tgN is one sequence: not a speed at 4
    assert four["value"] is None and four["reason"] == "generation speed measured with 1 sequence(s) at a time, not 4"
    assert "did not run" in dv.speed_at([], 2048)["reason"]


def test_the_covering_row_and_the_whole_set_alike_for_a_frame_and_its_records():
    """pick_ctx and whole: one rule for the report's frames and the recommender's records."""
    rows = [metrics.row("compute_buffer_bytes", 1.0, unit="bytes", n_ctx=4096),
            metrics.row("compute_buffer_bytes", 2.0, unit="bytes", n_ctx=1024),
            metrics.row("compute_buffer_bytes", 3.0, unit="bytes", n_ctx=16384),
            metrics.row("compute_buffer_bytes", 4.0, unit="bytes", n_ctx=None)]
    frame = pd.DataFrame(rows)
    for ctx, want in ((1000, 2.0), (2048, 1.0), (4096, 1.0), (32768, 3.0), (None, 3.0)):
        assert dv.pick_ctx(rows, ctx)["value"] == want and dv.pick_ctx(frame, ctx)["value"] == want, ctx
    assert dv.pick_ctx(rows[3:], 2048)["value"] == 4.0 == dv.pick_ctx(frame.iloc[3:], 2048)["value"]
    assert dv.pick_ctx([], 2048) is None and dv.pick_ctx(frame.iloc[:0], 2048) is None
    mixed = [metrics.row("ppl", 5.0, unit="1", n_ctx=512), metrics.row("ppl", 6.0, unit="1", subset="wiki", n_ctx=512),
             metrics.row("tg_tokens_per_s", 30.0, unit="tokens/s", subset="tg128", n_ctx=128)]
    kinds = {m: metrics.whole_kind(m) for m in ("ppl", "tg_tokens_per_s")}
    assert kinds == {"ppl": "null", "tg_tokens_per_s": "only"}
    assert [r["value"] for r in dv.whole(mixed)] == [5.0, 30.0] == list(dv.whole(pd.DataFrame(mixed))["value"])


# ------------------------------------------------------------------------------------------ a third-party file

def _hub_config(mk, base=None, family="tiny", rung=HUB) -> dict:
    cfg = copy.deepcopy(base or mk.LADDER_CONFIG)
    cfg["families"][family]["prebuilt"] = {rung: {"source": {"hf": {
        "repo_id": f"someone/{family}-GGUF", "filename": f"{family}-{rung}.gguf", "revision": "0" * 40}}}}
    return cfg


def _hub_record(mk, n=None, bpw=HUB_BPW, rung=HUB, extra=4_000_000) -> dict:
    """The sidecar scripts/acquire.py writes for a prebuilt file that passed the provenance gate."""
    n = n or mk.tiny_record("F16")["info"]["n_params"]
    return {"sha256": mk._sha("hub", rung), "info": {
        "file_bytes": int(n * bpw / 8) + extra, "n_params": n, "bits_per_weight": bpw,
        "file_type": "Q4_K_S", "tensor_types": {"Q4_K": 1}, "tensor_type_params": {"Q4_K": n}},
        "provenance": {"differences": [], "differs_in": [], "tokens_differ": [], "accepted": []}}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The fixture's ladder with the third-party file's points (memory, speed, KLD) beside it."""
    mk = make_fixture_module()
    tmp = tmp_path_factory.mktemp("hub")
    mk.build(tmp, ladder=True)
    mk.tiny_point_files(tmp / "results", CARD, (HUB, "f16", 22.0, HUB_KLD, 0.01, 88.0, HUB_TG),
                        record=_hub_record(mk), cfg=_hub_config(mk))
    mk.point_files(tmp / "results", CARD, BIG_HUB_POINT, cfg=_hub_config(mk, mk.CONFIG, "big", BIG_HUB),
                   record=_hub_record(mk, mk.N_PARAMS["big"], 5.5, BIG_HUB, 0))
    files = sorted(str(p) for p in (tmp / "results").rglob("metrics.json"))
    dataset.write(aggregate.collect(files), tmp / "points.parquet")
    df = dv.load(tmp / "points.parquet")
    return tmp, df, mk


def _kld(df, rung):
    g = df[(df.card == CARD) & (df.family == FAM) & (df.rung == rung) & (df.kv == "f16")
           & (df.metric == "kld_mean")]
    return g.iloc[0]


def test_the_dataset_says_where_the_file_comes_from(hub):
    _, df, _ = hub
    fam = df[(df.card == CARD) & (df.family == FAM)]
    assert set(fam[fam.rung == HUB]["provenance"]) == {"third party, as the reference"}
    assert set(fam[fam.rung != HUB]["provenance"]) == {"made here"}
    assert dv.source_of("third party, as the reference") == "uploader" and dv.source_of("made here") == "made here"


def test_the_report_judges_the_file_against_our_ladder_at_its_size(hub):
    _, df, _ = hub
    fam = df[(df.card == CARD) & (df.family == FAM)]
    cols = answer.answer_columns(fam)
    recs = [m for m in answer.matched_size_rows([c for c in cols if c[0] != "memory"])
            if m["figure"].startswith("kld_mean") and m["kv"] == "f16"]
    (m,) = recs
    lo, hi, hi_twin = _kld(df, "IQ2_XXS-attn8"), _kld(df, "Q4_K_M-imat"), _kld(df, "Q4_K_M")
    assert hi.bits_per_weight == hi_twin.bits_per_weight and hi.value < hi_twin.value  # the better twin stands
    want = lo.value + (HUB_BPW - lo.bits_per_weight) * (hi.value - lo.value) / (hi.bits_per_weight - lo.bits_per_weight)
    assert m["ours"] == pytest.approx(want) and m["difference"] == pytest.approx(HUB_KLD - want)
    assert m["how"].startswith(f"interpolated at {HUB_BPW:.2f} bits per weight between IQ2_XXS-attn8")
    assert "the better of Q4_K_M, Q4_K_M-imat" in m["how"]
    gap = dv.size_gap(HUB_BPW, _hub_record(hub[2])["info"]["file_bytes"], lo.bits_per_weight, lo.file_bytes)
    assert m["gaps"][0] == f"{HUB} against IQ2_XXS-attn8: {gap}" and gap.startswith("+0.24 bits per weight")
    # the speed column at matched size: theirs 300 tokens/s against ours read at 5.9 bits
    (s,) = [m for m in answer.matched_size_rows(cols) if m["benchmark"] == "speed" and m["kv"] == "f16"]
    assert s["value"] == pytest.approx(HUB_TG) and s["ours"] is not None and s["difference"] < 0
    html = answer.answer_family(fam, FAM, None)
    assert f'id="table-matched-size-{FAM}"' in html and "ours at its size" in html and "(ours better)" in html
    # a file outside the sizes measured here: absent with the reason, not extrapolated
    small = [("Q2_K", 4.4, 0.93), ("Q4_K_M", 6.18, 0.06)]
    assert "not extrapolated" in dv.at_bpw(small, 3.0)["reason"]


def test_recommend_takes_the_file_as_a_candidate_with_its_source_and_the_speed_floor_binds(hub):
    """big's third-party file (5.5 bits per weight, bfcl 77 %) fits 3400 MiB at 4,096 tokens beside
    Q4_K_M (75 %); it generates 15 tokens/s, slower than Q4_K_M and than the larger Q6_K and Q8_0. A
    floor of 20 tokens/s keeps it out by its measured speed: the answer says the speed binds, by how
    much, and how far apart the two files are in size."""
    _, df, _ = hub
    big = df[(df.card == CARD) & (df.family == "big")]
    cands, _, _, _ = rec.candidates(big, 4096, {"bfcl": 1.0}, CARD)
    by = {c.name: c for c in cands}
    c = by[f"big/{BIG_HUB}/f16"]
    assert c.source == "uploader" and c.provenance == "third party, as the reference"
    assert c.bits_per_weight == 5.5 and c.tg_tokens_per_s == pytest.approx(15.0)
    assert {x.source for x in cands if x.rung != BIG_HUB} == {"made here"}
    assert c.bits_per_weight < by["big/Q6_K/f16"].bits_per_weight and c.tg_tokens_per_s < by["big/Q6_K/f16"].tg_tokens_per_s
    # tg128 is measured at n_ctx 128: at 4096 tokens it is an upper bound, and the candidate says so
    assert any("tg_tokens_per_s measured at n_ctx 128, below the 4096 tokens asked" in x for x in c.caveats)
    free = rec.recommend(big, "3400MiB", 4096, weights={"bfcl": 1.0}, card=CARD)
    assert free["best"]["name"] == f"big/{BIG_HUB}/f16" and free["best"]["source"] == "uploader"
    floor = rec.recommend(big, "3400MiB", 4096, weights={"bfcl": 1.0}, card=CARD, min_tg=20)
    assert floor["best"]["name"] == "big/Q4_K_M/f16"
    binds = {b["constraint"]: b for b in floor["binding"]}
    assert set(binds) == {"memory", "speed"}  # more memory buys a better score too
    assert "over the budget of 3.32 GiB" in binds["memory"]["why"]
    b = binds["speed"]
    assert b["without_it"] == f"big/{BIG_HUB}/f16"
    assert b["why"] == f"big/{BIG_HUB}/f16 generates 15 tokens/s, below the floor of 20 tokens/s"
    q4 = by["big/Q4_K_M/f16"]
    assert b["gap"] == f"big/{BIG_HUB}/f16 against big/Q4_K_M/f16: " + dv.size_gap(5.5, c.file_bytes, q4.bits_per_weight,
                                                                                    q4.file_bytes)
    assert b["gap"].split(": ")[1].startswith("+0.61 bits per weight, +")
    text = rec.format_text(floor)
    assert "binding: speed (without it: big/Q5_K_S-hub/f16" in text and "size gap of big/Q5_K_S-hub/f16" in text
    assert "source: uploader (third party, as the reference)" in rec.format_text(free)
    # at 4 sequences at a time nothing was measured: the floor cannot be met, and the answer says why
    four = rec.recommend(big, "3400MiB", 4096, weights={"bfcl": 1.0}, card=CARD, min_tg=1, parallel=4)
    assert not four["feasible"] and "not 4" in four["message"]
    with pytest.raises(rec.RecommendError, match="must be > 0"):
        rec.recommend(big, "3400MiB", 4096, card=CARD, min_tg=0)


def test_the_recommend_command_line_takes_min_tps_and_parallel(hub, capsys):
    tmp, df, _ = hub
    one = tmp / "cpu-test.parquet"
    df[df.card == CARD].to_parquet(one)
    args = ["recommend", "--dataset", str(one), "--mem", "3400MiB", "--ctx", "4096", "--weight", "bfcl=1"]
    assert cli_main(args) == 0 and f"best:  big/{BIG_HUB}/f16" in capsys.readouterr().out
    assert cli_main(args + ["--min-tps", "20"]) == 0
    out = capsys.readouterr().out
    assert "tg ≥ 20.0 tokens/s" in out and "best:  big/Q4_K_M/f16" in out and "binding: speed" in out
    assert cli_main(args + ["--min-tps", "1", "--parallel", "4"]) == 2 and "not 4" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ the walk

def _walk_files(root: Path, df, cfg: dict, rungs, f16: Path) -> None:
    """What the walk reads, in its own places under ``root``: each candidate's sidecar as the quantize (or
    acquire) rule writes it (the fixture's record of the rung, with the shapes of SmolLM2-135M, whose
    shapes `tiny` has, read from the real file), and each rung's KLD pass file holding the dataset's own
    figure."""
    from quantladder.gguf_meta import read_info

    mk = make_fixture_module()
    shape = {k: v for k, v in read_info(str(f16)).as_dict().items()
             if k not in ("path", "file_bytes", "tensor_bytes", "n_params", "bits_per_weight", "file_type",
                          "tensor_types", "tensor_type_params")}
    for r in (*rungs, "F16"):
        record = copy.deepcopy(_hub_record(mk) if r == HUB else mk.tiny_record(r))
        record["info"].update(shape, path=f"/models/tiny/{r}.gguf",
                              tensor_bytes=record["info"]["file_bytes"] - 4_000_000)  # as the memory rows say
        write_json(root / qfind.sidecar(cfg, FAM, r), record)
    sp = _spec(rungs)
    for r in rungs:
        k = _kld(df, r)
        path = root / qfind.figure_files(sp, cfg, CARD, r)[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"benchmark": "perplexity", "status": "ok", "rows": [
            metrics.row("kld_mean", float(k.value), stderr=float(k.stderr), n=int(k.n), subset=k.subset, n_ctx=512)]})


def _spec(rungs, **kw) -> qfind.Spec:
    mk = make_fixture_module()
    fig = qfind.Figure(f"kld:{mk.KLD_CORPUS}<=0.5", "perplexity", "kld_mean", mk.KLD_CORPUS, 0.5, "nats", False)
    return qfind.Spec(FAM, "F16", 1 << 40, "1TiB", 4096, "f16", (fig,), tuple(rungs), rungs[0], 0.025, "step",
                      **{"min_tps": None, "parallel": 1, **kw})


def _walk(root: Path, cfg: dict, sp: qfind.Spec) -> dict:
    infos, speeds, sources = qfind.inputs(sp, cfg, CARD, root)
    state = qfind.start(sp, qfind.candidates(sp, infos, speeds, sources))
    while not state["done"]:
        r = state["next"]
        state = qfind.advance(state, qfind.evidence(sp, cfg, CARD, r, qfind.level_of(state, r), root))
    return qfind.answer(state)


def test_find_with_a_speed_floor_picks_by_measured_speed_where_a_smaller_rung_is_slower(hub, smollm_f16):
    """tiny's ladder: IQ2_XXS-attn8 (5.66 bits) is smaller than Q4_K_M-imat (6.18) and slower (its speed
    point: 380 against 420 tokens/s). Accepting a KLD of 0.5 nats the walk goes down to IQ2_XXS-attn8;
    with a floor between the two speeds it keeps to Q4_K_M-imat, says the floor binds, and still visits
    the faster rungs below (Q2_K, 450 tokens/s)."""
    tmp, df, mk = hub
    cfg = mk.LADDER_CONFIG
    rungs = ("Q4_K_M", "Q4_K_M-imat", "IQ2_XXS-attn8", "Q2_K", "IQ2_XXS")
    _walk_files(tmp, df, cfg, rungs, smollm_f16)
    tg = {r: float(df[(df.family == FAM) & (df.rung == r) & (df.kv == "f16") & (df.metric == "tg_tokens_per_s")
                      ].value.iloc[0]) for r in rungs}
    bpw = {r: float(_kld(df, r).bits_per_weight) for r in rungs}
    assert bpw["IQ2_XXS-attn8"] < bpw["Q4_K_M-imat"] and tg["IQ2_XXS-attn8"] < tg["Q4_K_M-imat"]  # smaller, slower
    free = _walk(tmp, cfg, _spec(rungs))
    assert free["rung"] == "IQ2_XXS-attn8" and "binding" in free
    floor = (tg["IQ2_XXS-attn8"] + tg["Q4_K_M-imat"]) / 2
    ans = _walk(tmp, cfg, _spec(rungs, min_tps=floor))
    assert ans["verdict"] == "acceptable" and ans["rung"] == "Q4_K_M-imat"
    cands = {c["rung"]: c for c in ans["candidates"]}
    assert {r: c["tg_tokens_per_s"] for r, c in cands.items()} == pytest.approx(tg)  # read from the speed points
    assert [r for r, c in cands.items() if not c["eligible"]] == ["IQ2_XXS-attn8"]
    assert cands["IQ2_XXS-attn8"]["excluded_by"] == [f"speed: 380 tokens/s, below the floor of {floor:g}"]
    assert [p["rung"] for p in ans["path"]] == ["Q4_K_M", "Q4_K_M-imat", "Q2_K"]  # past the slow rung, on down
    binds = {b["constraint"]: b for b in ans["binding"]}
    assert set(binds) == {"accepted loss", "speed"} and binds["speed"]["rung"] == "IQ2_XXS-attn8"
    assert binds["speed"]["gap"] == "IQ2_XXS-attn8 against Q4_K_M-imat: " + dv.size_gap(
        bpw["IQ2_XXS-attn8"], cands["IQ2_XXS-attn8"]["file_bytes"], bpw["Q4_K_M-imat"], cands["Q4_K_M-imat"]["file_bytes"])
    assert ans["below"] == "Q2_K" and ans["below_gap"].startswith("Q2_K against Q4_K_M-imat: −1.78 bits per weight")
    text = qfind.format_text({**ans, "family": FAM})
    assert f"at least {floor:g} tokens/s" in text and "binding: speed: IQ2_XXS-attn8 is smaller" in text
    # a floor no candidate meets: none fits, and the speed is what binds
    none = _walk(tmp, cfg, _spec(rungs, min_tps=1000))
    assert none["verdict"] == "none fits" and [b["constraint"] for b in none["binding"]] == ["speed"]


def test_the_walk_puts_a_third_party_file_beside_our_ladder_at_its_size(hub, smollm_f16):
    tmp, df, mk = hub
    cfg = _hub_config(mk)
    rungs = ("Q4_K_M", "Q4_K_M-imat", HUB, "IQ2_XXS-attn8", "Q2_K", "IQ2_XXS")
    _walk_files(tmp, df, cfg, rungs, smollm_f16)
    ans = _walk(tmp, cfg, _spec(rungs))
    cands = {c["rung"]: c for c in ans["candidates"]}
    assert cands[HUB]["source"] == "uploader someone (third party, as the reference)"
    assert {c["source"] for r, c in cands.items() if r != HUB} == {"made here"}
    (m,) = ans["matched_size"]
    lo, hi = _kld(df, "IQ2_XXS-attn8"), _kld(df, "Q4_K_M-imat")
    want = lo.value + (HUB_BPW - lo.bits_per_weight) * (hi.value - lo.value) / (hi.bits_per_weight - lo.bits_per_weight)
    assert m["rung"] == HUB and m["delta"] == pytest.approx(HUB_KLD) and m["ours"] == pytest.approx(want)
    assert m["how"].startswith("interpolated at 5.90 bits per weight between IQ2_XXS-attn8")
    assert [g.split(":")[0] for g in m["gaps"]] == [f"{HUB} against IQ2_XXS-attn8", f"{HUB} against Q4_K_M-imat"]
    assert "matched size: Q4_K_S-hub (uploader someone" in qfind.format_text({**ans, "family": FAM})
    # stopped above our neighbour below: the walk did not measure it, so ours at its size is absent, said why
    short = _walk(tmp, cfg, _spec(rungs[:3]))
    (m,) = short["matched_size"]
    assert m["ours"] is None and "outside the sizes measured here" in m["reason"] and "only the rungs it visits" in m["reason"]


def test_find_speed_floor_settings_are_checked():
    from quantladder import config as qconfig

    cfg = qconfig.load()
    base = {"family": "smollm2-135m-instruct", "mem": "8GiB", "ctx": "16k", "accept": "kld:manual-es<=0.1"}
    assert qfind.spec(cfg, {**base, "min_tps": 25, "parallel": 2}).min_tps == 25.0
    assert qfind.spec(cfg, base).key == qfind.spec(cfg, {**base, "parallel": 1}).key  # no floor: the old key
    assert qfind.spec(cfg, base).key != qfind.spec(cfg, {**base, "min_tps": 25}).key
    for section, message in [({"min_tps": 0}, "find.min_tps: 0 is less than or equal to the minimum of 0 .speed floor"),
                             ({"min_tps": "fast"}, "find.min_tps: 'fast' is not of type 'number', 'null'"),
                             ({"parallel": 0}, "find.parallel: 0 is less than the minimum of 1 .sequences generated")]:
        with pytest.raises(ConfigError, match=message):
            qfind.spec(cfg, {**base, **section})
    sp = qfind.spec(cfg, {**base, "min_tps": 25})
    files = qfind.step0_files(sp, cfg, "cpu")
    assert [f for f in files if f.endswith("/speed/metrics.json")] == [
        f"results/cpu/points/smollm2-135m-instruct/{r}/f16/speed/metrics.json" for r in sp.rungs]


def test_find_speed_floor_on_speeds_measured_here(smollm_q8, smollm_q4km, smollm_q2k, tmp_path):
    """The real speed measure (llama-bench's tg protocol, 32 tokens × 3, from an empty cache and after 512
    tokens in it: llama-bench -d 512) on three real rungs of SmolLM2, its rows written by its own row
    writer: a user's context reads the depth that covers it (or the deepest, an upper bound, said so),
    the walk's candidates carry those figures, and a floor between two of them keeps exactly the rungs
    measured at or above it, whatever their sizes."""
    from quantladder.gguf_meta import read_info
    from quantladder.measures import speed

    files = {"Q8_0": smollm_q8, "Q4_K_M": smollm_q4km, "Q2_K": smollm_q2k}
    rows = {r: speed.metric_rows(speed.measure(str(p), n_prompt=0, n_gen=32, repetitions=3, n_threads=2,
                                               depths=[512], parallel=[2]))
            for r, p in files.items()}
    for r in files:
        assert [(x["metric"], x["subset"], x["n_ctx"], x.get("n_parallel")) for x in rows[r]] == [
            ("tg_tokens_per_s", "tg32", 32, None), ("tg_tokens_per_s_at_depth", "tg32@d512", 544, None),
            ("tg_tokens_per_s_parallel", "tg32@d0x2", 32, 2), ("tg_tokens_per_s_parallel", "tg32@d512x2", 544, 2)]
        # two users sharing the card: each one's speed at their context, not one sequence's
        two = dv.speed_at(rows[r], 300, parallel=2)
        assert two["value"] == rows[r][3]["value"] and two["n_parallel"] == 2 and two["subset"] == "tg32@d512x2"
        assert dv.speed_at(rows[r], 32, parallel=2)["value"] == rows[r][2]["value"]
        assert "not 4" in dv.speed_at(rows[r], 32, parallel=4)["reason"]
    sp = qfind.Spec("smollm2", "F16", 1 << 40, "1TiB", 2048, "f16", (), tuple(files), "Q8_0", 0.025, "step",
                    min_tps=1.0, parallel=1)
    infos = {r: read_info(str(p)).__dict__ for r, p in files.items()}
    infos["F16"] = {**infos["Q8_0"], "bits_per_weight": 16.0}
    for r in files:  # a context within the depth: that row, nothing said; the empty cache's: its own
        assert dv.speed_at(rows[r], 300) == {**dv.speed_at(rows[r], 300), "value": rows[r][1]["value"], "note": ""}
        assert dv.speed_at(rows[r], 32)["value"] == rows[r][0]["value"]
    speeds = {r: dv.speed_at(rows[r], sp.ctx) for r in files}
    measured = {r: rows[r][1]["value"] for r in files}  # at 2048: the deepest measured, an upper bound
    assert all(s["value"] == measured[r] and s["subset"] == "tg32@d512" and "measured at n_ctx 544, below the 2048 "
               "tokens asked" in s["note"] for r, s in speeds.items())
    order = sorted(measured, key=measured.get)
    floor = (measured[order[0]] + measured[order[1]]) / 2
    cands = qfind.candidates(qfind.Spec(**{**sp.__dict__, "min_tps": floor}), infos, speeds)
    assert {c["rung"] for c in cands if c["eligible"]} == {r for r in files if measured[r] >= floor} == set(order[1:])
    assert math.isclose(next(c for c in cands if c["rung"] == order[0])["tg_tokens_per_s"], measured[order[0]])


# ------------------------------------------------------------------------------------------ the hub example

def test_the_hub_example_compares_two_uploaders_files_at_matched_size(tmp_path):
    """config/examples/hub-two-uploaders.yaml over the default, dry run: both uploaders' files are fetched
    and checked (acquire_prebuilt), measured like the ladder's own rungs, and the walk with a speed floor
    plans every candidate's speed point (both files among them) before its first step."""
    example = REPO / "config" / "examples" / "hub-two-uploaders.yaml"
    r = snakemake(tmp_path, "-n", "--configfile", str(example))
    jobs = planned_jobs(r.stdout + r.stderr)
    fam = "qwen2.5-7b-instruct"
    hub = {"Q4_K_M-bartowski", "Q4_K_M-unsloth"}
    assert {wc["rung"] for rule, wc in jobs if rule == "acquire_prebuilt"} == hub
    assert hub <= {wc["rung"] for rule, wc in jobs if rule == "speed" and wc.get("family") == fam}
    assert hub <= {wc["rung"] for rule, wc in jobs if rule == "perplexity" and wc.get("family") == fam}
    assert {rule for rule, _ in jobs} >= {"recommend", "report"}
    import re

    step0 = re.search(r"checkpoint find_step:\n    input: (.*)\n", r.stdout + r.stderr).group(1).split(", ")
    for rung in hub:  # the walk's first step reads both files' sidecars and speed points
        assert f"resources/models/{fam}/prebuilt/{rung}.gguf.json" in step0
        assert any(f.endswith(f"/points/{fam}/{rung}/f16/speed/metrics.json") for f in step0)
    assert not {wc.get("family") for _, wc in jobs} - {None, fam}  # the embedded families are off
