"""Find my rung (quantladder.find): the request's parsing and its errors, the walk's steps, and verdicts
at the boundary of the accepted loss — with the multiplicity split — on bounds computed by hand."""

from __future__ import annotations

import json
import math

import pytest

from quantladder import config as qconfig
from quantladder import find as qfind
from quantladder import metrics, stats
from quantladder.cli import main as cli_main
from quantladder.errors import ConfigError
from quantladder.io import write_json, write_jsonl
from quantladder.stats import noninferiority as ni

FAM = "smollm2-135m-instruct"
CARD = "cpu-test"
Z = {0.025: 1.959963985, 0.0125: 2.241402728, 0.00625: 2.497705474}  # one-sided normal quantiles (R: qnorm)


@pytest.fixture(scope="module")
def cfg():
    return qconfig.load()


def _spec(cfg, **kw):
    return qfind.spec(cfg, {"family": FAM, "mem": "8GiB", "ctx": "16k", "accept": "kld:manual-es<=0.1", **kw})


# ------------------------------------------------------------------------------------------ the request

def test_spec_defaults(cfg):
    sp = _spec(cfg, accept="kld:manual-es<=0.05, ppl_ratio:prose-en<=1.05, tasks>=-2pt")
    assert sp.reference == "Q8_0" and sp.start == "Q4_K_M" and sp.alpha == 0.025 and sp.kv == "f16"
    assert sp.mem_bytes == 8 << 30 and sp.ctx == 16384
    assert "Q8_0" not in sp.rungs and "F16" not in sp.rungs and "Q2_K" in sp.rungs
    kld, ppl, task = sp.figures
    assert (kld.metric, kld.corpus, kld.tolerance, kld.higher_is_better) == ("kld_mean", "manual-es", 0.05, False)
    assert ppl.metric == "ln_ppl_ratio" and ppl.tolerance == pytest.approx(math.log(1.05))
    assert (task.benchmark, task.metric, task.tolerance, task.higher_is_better) == ("tasks", "all_checks_pass", 2.0, True)
    assert _spec(cfg, reference="F16").reference == "F16"
    assert _spec(cfg).key != _spec(cfg, accept="kld:manual-es<=0.2").key  # a changed bound reruns the walk


@pytest.mark.parametrize("section, message", [
    ({"family": "nope"}, "find.family: 'nope' is not a family"),
    ({"mem": None}, "find.mem: required"),
    ({"mem": "8 parsecs"}, "find.mem: cannot read memory size"),
    ({"ctx": "long"}, "find.ctx: cannot read context length"),
    ({"accept": "kld:wiki-en<=0.1"}, "find.accept: 'kld:wiki-en<=0.1': 'wiki-en' is not a corpus of measures.perplexity"),
    ({"accept": "kld<=0.1"}, "name the corpus"),
    ({"accept": "kld:manual-es>=0.1"}, "an upper one"),
    ({"accept": "kld:manual-es<=0"}, "must be > 0 nats"),
    ({"accept": "ppl_ratio:manual-es<=0.9"}, "must be > 1"),
    ({"accept": "tasks:accuracy>=-2pt"}, "tasks has no paired figure 'accuracy' (its figures: ['all_checks_pass']"),
    ({"accept": "tasks>=2pt"}, "a task loss is a lower bound below zero"),
    ({"accept": "bfcl_v9>=-2"}, "'bfcl_v9' is no task benchmark switched on"),
    ({"accept": "kld:manual-es<=0.1, kld:manual-es<=0.2"}, "a figure is named twice"),
    ({"accept": "loss under two"}, "cannot read 'loss under two'"),
    ({"reference": "Q3_K_S"}, "find.reference: 'Q3_K_S' is not a rung"),
    ({"rungs": ["Q9_K"]}, "find.rungs: ['Q9_K'] not in"),
    ({"rungs": ["Q8_0"]}, "find.rungs: no candidate below the reference Q8_0"),
    ({"alpha": 0.7}, "find.alpha: 0.7 is greater than or equal to the maximum of 0.5 (one-sided level"),
    ({"alpha": "low"}, "find.alpha: 'low' is not of type 'number'"),
    ({"parallel": 0}, "find.parallel: 0 is less than the minimum of 1"),
    ({"start": None}, "find.start: None is not of type 'string'"),
    ({"kv": "q4_0"}, "find.kv: 'q4_0' is not a KV type"),
    ({"colour": "red"}, "find: unknown keys ['colour']"),
])
def test_spec_errors_name_the_key(cfg, section, message):
    base = {"family": FAM, "mem": "8GiB", "ctx": "16k", "accept": "kld:manual-es<=0.1"}
    with pytest.raises(ConfigError) as e:
        qfind.spec(cfg, {**base, **section})
    assert message in str(e.value)


def test_cli_errors_name_the_key(tmp_path, capsys):
    rc = cli_main(["find", "--family", FAM, "--mem", "8GiB", "--ctx", "16k", "--accept", "kld:nowhere<=0.1",
                   "--directory", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "quantladder find:" in err and "find.accept: 'kld:nowhere<=0.1'" in err
    rc = cli_main(["find", "--family", FAM, "--mem", "lots", "--ctx", "16k", "--accept", "kld:manual-es<=0.1",
                   "--directory", str(tmp_path)])
    assert rc == 1 and "find.mem: cannot read memory size 'lots'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: a required option missing
        cli_main(["find", "--family", FAM, "--mem", "8GiB", "--ctx", "16k"])


# ------------------------------------------------------------------------------------------ the walk

def _state(cfg, n=6, start="R2", fits=None, alpha=0.025, strategy="auto"):
    """A walk over rungs R0 (most bits) ... R{n-1}, from sidecar infos made by hand."""
    sp = qfind.Spec(FAM, "REF", 1 << 30, "1GiB", 4096, "f16", (), tuple(f"R{i}" for i in range(n)), start, alpha,
                    strategy, None, 1)
    cands = [{"rung": f"R{i}", "order": i, "bits_per_weight": 8.0 - i, "weights_bytes": 100, "kv_bytes": 10,
              "predicted_bytes": 110, "fits": True if fits is None else fits[i]} for i in range(n)]
    return qfind.start(sp, cands)


def _ev(rung, verdict, alpha):
    return {"rung": rung, "alpha": alpha, "interval_level": 1 - 2 * alpha, "verdict": verdict, "figures": []}


def _run(state, verdicts: dict):
    while not state["done"]:
        r = state["next"]
        state = qfind.advance(state, _ev(r, verdicts[r], qfind.level_of(state, r)))
    return state, qfind.answer(state)


A, N, U = qfind.ACCEPTABLE, qfind.NOT_ACCEPTABLE, qfind.UNDETERMINED


def test_walk_down_stops_at_first_rung_not_shown_and_measures_the_one_below(cfg):
    st = _state(cfg)
    assert st["next"] == "R2" and st["levels"] == {"strategy": "step", "down": 0.0125, "up": 0.0125 / 2, "k_up": 2}
    st, a = _run(st, {"R2": A, "R3": A, "R4": N, "R5": A})  # R5 (non-monotone) is never visited
    assert [p["rung"] for p in a["path"]] == ["R2", "R3", "R4"]
    assert a["verdict"] == A and a["rung"] == "R3" and a["below"] == "R4"
    assert a["below_evidence"]["verdict"] == N and all(p["alpha"] == 0.0125 for p in a["path"])


def test_walk_up_when_start_not_shown(cfg):
    st, a = _run(_state(cfg), {"R2": N, "R1": U, "R0": A})
    assert [(p["rung"], p["alpha"]) for p in a["path"]] == [("R2", 0.0125), ("R1", 0.00625), ("R0", 0.00625)]
    assert a["rung"] == "R0" and a["below"] == "R1" and "undetermined" in a["why"]


def test_walk_undetermined_and_none(cfg):
    _, a = _run(_state(cfg), {"R2": U, "R1": U, "R0": N})
    assert a["verdict"] == U and a["rung"] is None and set(a["undetermined"]) == {"R2", "R1"}
    _, a = _run(_state(cfg), {"R2": N, "R1": N, "R0": N})
    assert a["verdict"] == "none acceptable" and a["rung"] is None
    _, a = _run(_state(cfg, start="R0"), {"R0": A, "R1": A, "R2": A, "R3": A, "R4": A, "R5": A})
    assert a["rung"] == "R5" and a["below"] is None and a["levels"]["down"] == 0.025  # nothing above: all of α
    st = _state(cfg, fits=[False] * 6)
    assert st["done"] and qfind.answer(st)["verdict"] == "none fits"


def _truth(n, first_bad, exceptions=None):
    """Verdicts of R0..R{n-1}: acceptable above ``first_bad``, not from it on (``exceptions`` overrides)."""
    return {f"R{i}": (A if i < first_bad else N) for i in range(n)} | (exceptions or {})


def test_bisect_probes_the_middle_and_answers_the_lowest_shown(cfg):
    """12 candidates, start R2: at most 1 + ceil(log2(9 + 1)) = 5 probes, each at α/5 (Bonferroni over
    the probes the search can make); the answer is the lowest rung shown, its neighbour below measured."""
    st = _state(cfg, n=12, strategy="bisect")
    assert st["levels"] == {"strategy": "bisect", "each": 0.025 / 5, "probes": 5} and st["next"] == "R2"
    _, a = _run(st, _truth(12, 8))
    assert [p["rung"] for p in a["path"]] == ["R2", "R7", "R9", "R8"]
    assert all(p["alpha"] == 0.005 for p in a["path"])
    assert a["rung"] == "R7" and a["below"] == "R8" and a["below_evidence"]["verdict"] == N
    assert "between a probe" in a["assumes"]
    # stepping needs R2 … R8, seven rungs, for the same answer
    _, b = _run(_state(cfg, n=12, strategy="step"), _truth(12, 8))
    assert b["rung"] == "R7" and len(b["path"]) == 7


def test_bisect_upward_undetermined_and_none(cfg):
    _, a = _run(_state(cfg, n=12, strategy="bisect"), _truth(12, 1, {"R1": U}))  # start not shown: search above it
    assert [p["rung"] for p in a["path"]] == ["R2", "R0", "R1"]
    assert a["rung"] == "R0" and a["below"] == "R1" and "undetermined" in a["why"]
    _, a = _run(_state(cfg, n=12, strategy="bisect"), _truth(12, 0))
    assert a["verdict"] == "none acceptable" and [p["rung"] for p in a["path"]] == ["R2", "R0"]
    _, a = _run(_state(cfg, n=12, strategy="bisect"), _truth(12, 0, {"R2": U, "R0": U}))
    assert a["verdict"] == U and set(a["undetermined"]) == {"R2", "R0"}


@pytest.mark.parametrize("n,start", [(8, "R0"), (9, "R4"), (12, "R2"), (16, "R11"), (13, "R12")])
def test_bisect_never_probes_more_than_its_bound_and_finds_every_threshold(cfg, n, start):
    """Under monotone losses bisection answers the last acceptable rung for every threshold, with no
    more probes than the bound its level was split by; a non-monotone ladder never makes it claim a
    rung it did not show."""
    for first_bad in range(n + 1):
        st = _state(cfg, n=n, start=start, strategy="bisect")
        _, a = _run(st, _truth(n, first_bad))
        assert len(a["path"]) <= st["levels"]["probes"], (first_bad, a["path"])
        assert a["rung"] == (f"R{first_bad - 1}" if first_bad else None), first_bad
        if a["rung"]:
            assert {p["rung"]: p["verdict"] for p in a["path"]}[a["rung"]] == A
    # a dip in the middle: every rung it claims was shown acceptable at its level
    _, a = _run(_state(cfg, n=n, start=start, strategy="bisect"), _truth(n, n, {f"R{n // 2}": N}))
    assert a["rung"] is None or {p["rung"]: p["verdict"] for p in a["path"]}[a["rung"]] == A


def test_auto_bisects_long_ladders_only(cfg):
    assert _state(cfg, n=7)["levels"]["strategy"] == "step"
    assert _state(cfg, n=qfind.BISECT_FROM)["levels"]["strategy"] == "bisect"
    assert _state(cfg, n=12, strategy="step")["levels"]["strategy"] == "step"
    with pytest.raises(ConfigError, match="find.strategy"):
        _spec(cfg, strategy="binary")


def test_bisect_level_refuses_what_the_fixed_sequence_would_accept(cfg, tmp_path):
    """KLD 0.08 ± 0.01 against 0.105 nats: shown at the fixed sequence's 1.25 % (bound 0.1024), not at
    bisection's α/5 = 0.5 % (bound 0.08 + 2.5758·0.01 = 0.1058): the Bonferroni share is what is used."""
    _kld_point(tmp_path, "Q4_K_M", 0.08, 0.01)
    sp = _spec(cfg, accept="kld:manual-es<=0.105")
    assert qfind.evidence(sp, cfg, CARD, "Q4_K_M", 0.0125, tmp_path)["verdict"] == A
    st = _state(cfg, n=12, strategy="bisect")
    ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", qfind.level_of(st, "R2"), tmp_path)
    assert ev["verdict"] == U and ev["figures"][0]["bound"] == pytest.approx(0.08 + 2.575829304 * 0.01, abs=1e-8)


def test_start_nearest_fitting_candidate(cfg):
    st = _state(cfg, start="R1", fits=[False, False, True, True, True, True])  # R1 does not fit: nearest in bits
    assert st["order"] == ["R2", "R3", "R4", "R5"] and st["start"] == "R2" and st["levels"]["k_up"] == 0


def test_candidates_ordered_by_measured_bits_and_memory(cfg):
    sp = _spec(cfg, mem="100MiB", ctx=8192)
    info = {"file_bytes": 0, "n_params": 1, "architecture": "llama", "file_type": "x", "n_layer": 30, "n_head": 9,
            "n_head_kv": 3, "n_embd": 576, "head_dim_k": 64, "head_dim_v": 64, "n_ctx_train": 8192, "n_vocab": 1,
            "has_chat_template": True, "tensor_types": {}, "path": "x"}
    bits = {"Q8_0": 8.5, "Q4_K_M": 6.17, "Q4_K_M-imat": 6.17, "Q2_K": 5.14, "IQ4_XS": 5.3, "MXFP4": 5.15,
            "Q2_K-attn8": 5.93, "Q4_K_M-phi-template": 6.16}  # the default's stand-in: a candidate at its own size
    infos = {r: {**info, "bits_per_weight": b, "tensor_bytes": int(b * 1e7)} for r, b in bits.items()}
    c = qfind.candidates(sp, infos)
    assert [x["rung"] for x in c] == ["Q4_K_M", "Q4_K_M-imat", "Q4_K_M-phi-template", "Q2_K-attn8", "IQ4_XS", "MXFP4",
                                      "Q2_K"]
    kv = 30 * 3 * (64 * 2 + 64 * 2) * 8192  # layers x kv heads x (k + v dims x 2 bytes) x context
    assert c[0]["kv_bytes"] == kv and c[0]["predicted_bytes"] == int(6.17e7) + kv
    assert [x["fits"] for x in c] == [x["predicted_bytes"] <= 100 << 20 for x in c]


# ------------------------------------------------------------------------------------------ verdicts at the bound

def _kld_point(root, rung, value, se, n=1020):
    row = metrics.row("kld_mean", value, stderr=se, n=n, subset="manual-es")
    path = root / "results" / CARD / "points" / FAM / rung / "f16" / "perplexity" / "manual-es-n512" / "metrics.json"
    path.parent.mkdir(parents=True)
    write_json(path, {"benchmark": "perplexity", "status": "ok", "rows": [row]})


@pytest.mark.parametrize("alpha", [0.025, 0.0125, 0.00625])
def test_kld_bound_by_hand(cfg, tmp_path, alpha):
    """Bound = KLD + z(α)·SE, by hand; acceptable only at or under the accepted loss."""
    _kld_point(tmp_path, "Q4_K_M", 0.08, 0.01)
    bound = 0.08 + Z[alpha] * 0.01
    for tol, want in ((bound + 1e-6, A), (bound - 1e-6, U), (0.0799, U), (0.05, N)):
        sp = _spec(cfg, accept=f"kld:manual-es<={tol!r}")
        ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", alpha, tmp_path)
        assert ev["verdict"] == want, (alpha, tol, ev)
        assert ev["figures"][0]["bound"] == pytest.approx(bound, abs=1e-8)


def test_split_level_refuses_what_the_unsplit_level_would_accept(cfg, tmp_path):
    """KLD 0.08 ± 0.01 against 0.1 nats: shown at 2.5 % one-sided (bound 0.0996), not at the walk's
    split 1.25 % (bound 0.1024), which applies when the walk may also step up."""
    _kld_point(tmp_path, "Q4_K_M", 0.08, 0.01)
    sp = _spec(cfg, accept="kld:manual-es<=0.1")
    assert qfind.evidence(sp, cfg, CARD, "Q4_K_M", 0.025, tmp_path)["verdict"] == A
    ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", 0.0125, tmp_path)
    assert ev["verdict"] == U and "97.5 % CI" in ev["figures"][0]["text"]
    # planned at the KLD measured: n·((z(1.25 %) + z(80 %))·SE / (T − KLD))², by hand
    assert ev["figures"][0]["items_needed"] == math.ceil(1020 * ((Z[0.0125] + 0.841621234) * 0.01 / 0.02) ** 2)


def test_every_figure_must_be_shown(cfg, tmp_path):
    """The intersection–union test: one figure shown, one not, the rung is not acceptable."""
    _kld_point(tmp_path, "Q4_K_M", 0.08, 0.01)
    row = metrics.row("ln_ppl_ratio", 0.2, stderr=0.01, n=1020, subset="manual-es")
    p = tmp_path / "results" / CARD / "points" / FAM / "Q4_K_M" / "f16" / "perplexity" / "manual-es-n512" / "metrics.json"
    doc = {"benchmark": "perplexity", "status": "ok", "rows": [metrics.row("kld_mean", 0.08, stderr=0.01, n=1020,
                                                                          subset="manual-es"), row]}
    write_json(p, doc)
    sp = _spec(cfg, accept="kld:manual-es<=0.2, ppl_ratio:manual-es<=1.1")
    ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", 0.025, tmp_path)
    assert [f["state"] for f in ev["figures"]] == [ni.NONINFERIOR, ni.INFERIOR] and ev["verdict"] == N


def _task_point(root, rung, correct: list[bool]):
    d = root / "results" / CARD / "points" / FAM / rung / "f16" / "tasks"
    d.mkdir(parents=True)
    verdicts = [{"item_id": f"i{i}", "correct": c, "subset": None, "degenerate": False} for i, c in enumerate(correct)]
    write_jsonl(d / "verdicts.jsonl", verdicts)
    value = 100.0 * sum(correct) / len(correct)
    write_json(d / "metrics.json", {"benchmark": "tasks", "status": "ok",
                                    "rows": [metrics.row("all_checks_pass", value, stderr=1.0, n=len(correct))]})
    return verdicts


def test_task_bound_at_the_boundary(cfg, tmp_path):
    """Points of a task figure: the paired interval's lower bound (Tango's, at the walk's level) against
    the accepted loss; acceptable exactly when −bound ≤ loss."""
    ref = _task_point(tmp_path, "Q8_0", [True] * 30 + [False] * 10)
    rung = _task_point(tmp_path, "Q4_K_M", [True] * 29 + [False] + [False] * 9 + [True])  # one loss, one gain
    for alpha in (0.025, 0.0125):
        lo = stats.compare(ref, rung, level=1 - 2 * alpha).ci_low
        for loss, want in ((-lo + 1e-6, A), (-lo - 1e-6, U)):
            sp = _spec(cfg, accept=f"tasks>=-{loss!r}pt")
            ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", alpha, tmp_path)
            assert ev["verdict"] == want and ev["figures"][0]["bound"] == pytest.approx(lo), (alpha, loss, ev)


@pytest.mark.slow  # the producers' canned dataset takes minutes to make
def test_report_first_screen_shows_the_answer(cfg, tmp_path, fixture_dataset):
    from quantladder import report

    _, a = _run(_state(cfg), {"R2": A, "R3": N})
    write_json(tmp_path / "find.json", a)
    html = report.build(fixture_dataset, tmp_path / "report.html", finds=[tmp_path / "find.json"]).read_text()
    first = html.index('<section class="answer"')
    assert first < html.index("Find my rung: smollm2-135m-instruct") < html.index("Per family and rung")
    assert "<b>Run R2</b>" in html
    assert "the rung below, R3, is shown not to be" in html and "Path walked: R2" in html


def _es(state, *, alpha=0.02, margin=2.0, n=40, estimate=0.0):
    return {"state": state, "n": n, "n_loss": 0, "n_gain": 0, "estimate": estimate, "e_loss": 1.0, "e_gain": 1.0,
            "e_margin": None, "anytime_p": 1.0, "alpha": alpha, "margin": margin, "rule": "test"}


@pytest.mark.parametrize("es, level, want, why", [
    (_es("no_loss_beyond_margin"), 0.0125, A, "anytime-valid at one-sided 0.01"),
    (_es("no_loss_beyond_margin", alpha=0.025), 0.0125, A, "one-sided 0.0125"),  # the claim at the rung's level
    (_es("no_loss_beyond_margin", alpha=0.03), 0.0125, U, "set early_stop.alpha <= 0.025"),
    (_es("no_loss_beyond_margin", alpha=0.05), 0.0125, U, "above this rung's level"),
    (_es("no_loss_beyond_margin", margin=3.0), 0.0125, U, "more than the 2 pt accepted"),
    (_es("gain", margin=None), 0.025, A, "gain"),
    (_es("loss"), 0.025, U, "not whether it exceeds 2 pt"),
    (_es("undecided"), 0.025, U, "run every item"),
])
def test_an_early_stopped_rung_is_judged_by_its_sequential_claim(cfg, tmp_path, es, level, want, why):
    """A point stopped early by the anytime-valid test: its few items' fixed-sample interval is not
    valid, the test's own claim is used, at its per-claim level (alpha / 2) against the rung's; the
    fixed interval on the same verdicts would have said otherwise (all 40 items equal)."""
    _task_point(tmp_path, "Q8_0", [True] * 40)
    _task_point(tmp_path, "Q4_K_M", [True] * 40)
    p = tmp_path / "results" / CARD / "points" / FAM / "Q4_K_M" / "f16" / "tasks" / "metrics.json"
    doc = json.loads(p.read_text())
    sp = _spec(cfg, accept="tasks>=-2pt")
    fixed = qfind.evidence(sp, cfg, CARD, "Q4_K_M", level, tmp_path)["figures"][0]
    assert "sequential" not in fixed  # no early stop: the paired interval
    write_json(p, {**doc, "generation": {"early_stop": es}})
    ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", level, tmp_path)
    fig = ev["figures"][0]
    if want == A and es["state"] == "no_loss_beyond_margin" and level == 0.0125:
        assert fixed["state"] != ni.NONINFERIOR  # 40 ties do not show a 2-point bound at 97.5 %: only the test does
    assert ev["verdict"] == want and fig["sequential"] == es and why in fig["text"], fig


def test_a_walk_stopped_at_a_stale_lock_is_told_the_unlock_it_has(tmp_path, capfd):
    """Issue 41, case 7: Snakemake's lock message advises "the --unlock argument", which `quantladder find`
    did not have, and the README's `snakemake --unlock` fails without --cores. A stale lock (what a
    Snakemake killed by SIGKILL leaves: its output lock naming the walk's answer) stops the walk; the
    command names the lock and `quantladder find --unlock`, which removes it."""
    import yaml

    from pipeline_util import small_config, write_config
    from quantladder import card as qcard

    cfg = small_config()
    path = write_config(tmp_path, cfg)
    target = qfind.ANSWER.format(card=qcard.label(cfg.get("card")), family=FAM)
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text(target + "\n")
    corpus = yaml.safe_load(path.read_text())["measures"]["perplexity"]["corpus"]
    args = ["find", "--family", FAM, "--mem", "8GiB", "--ctx", "2k", "--accept", f"kld:{corpus}<=0.2",
            "--configfile", str(path), "--directory", str(tmp_path), "--cores", "1"]
    assert cli_main(args) != 0
    err = capfd.readouterr().err
    assert "Directory cannot be locked" in err  # Snakemake's own message, advising --unlock
    assert f"quantladder find: {tmp_path.resolve()} is locked" in err
    assert f"`quantladder find --unlock --configfile {path} --directory {tmp_path}`" in err
    assert cli_main(["find", "--unlock", "--configfile", str(path), "--directory", str(tmp_path)]) == 0
    assert "Unlocked working directory" in capfd.readouterr().err and not locks.exists()
    with pytest.raises(SystemExit):  # without --unlock, the walk's request is required as before
        cli_main(["find", "--directory", str(tmp_path)])
    assert "the following arguments are required: --family, --mem, --ctx, --accept" in capfd.readouterr().err


def test_the_readme_unlock_line_runs(tmp_path):
    """`snakemake --unlock` alone stops with "Workflow requires a total number of cores": the README's
    line, run in a working directory with a stale lock, removes it."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    line = re.search(r"`(snakemake --unlock[^`]*)`", (repo / "README.md").read_text()).group(1)
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.output.lock").write_text("results/x\n")
    cmd = [str(Path(sys.executable).with_name("snakemake")), *line.split()[1:], "--snakefile", str(repo / "Snakefile"),
           "--directory", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Unlocked working directory" in r.stdout + r.stderr, (line, r.stderr[-2000:])
    assert not (tmp_path / ".snakemake" / "locks").exists()
