"""Per-item files have one reader and one writer (quantladder.io.JsonlFile), and a point is never
complete with fewer verdicts than planned items.

Broken the way a full disk or a kill breaks them: a torn last line is cut back before the next
append (never merged with it), a corrupt middle line is an error naming file:line, an empty
generations file is incomplete (never scored as complete), a full disk mid-append loses nothing
already written, and a killed writer's temporary file is removed by the next writer.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quantladder import benchmarks, scoring
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.base import Env
from quantladder import io
from quantladder.errors import DataError
from quantladder.io import CorruptLineError, JsonlFile, atomic_path, read_jsonl

REPO = Path(__file__).resolve().parents[1]


def test_a_torn_tail_is_cut_back_before_the_next_append(tmp_path, caplog):
    f = JsonlFile(tmp_path / "g.jsonl")
    f.append({"item_id": "a"})
    f.append({"item_id": "b"})
    with open(f.path, "ab") as fh:
        fh.write(b'{"item_id": "c", "te')  # a full disk or a kill mid-append
    assert [r["item_id"] for r in f.read()] == ["a", "b"]  # reading leaves it alone
    with caplog.at_level("WARNING"):
        recs = f.repair()
    assert [r["item_id"] for r in recs] == ["a", "b"] and "torn last line" in caplog.text
    f.append({"item_id": "c"})
    assert [r["item_id"] for r in read_jsonl(f.path)] == ["a", "b", "c"]  # not merged into one bad line


def test_a_corrupt_middle_line_is_an_error_naming_file_and_line(tmp_path):
    p = tmp_path / "generations.jsonl"
    p.write_text('{"item_id": "a"}\n{"item_id": "b", oops}\n{"item_id": "c"}\n')
    with pytest.raises(CorruptLineError, match=r"generations\.jsonl:2: not a JSON record.*delete the file"):
        read_jsonl(p)
    p.write_text('{"item_id": "a"}\n[1, 2]\n')
    with pytest.raises(CorruptLineError, match=r":2: a JSON list, not a record"):
        JsonlFile(p).repair()


@pytest.mark.parametrize("kind, name, restores", [
    (io.ITEMS, "items.jsonl", r"delete \S+/items\.jsonl and \S+/items\.json, then run `snakemake --cores all` "
                              r"again.*rule "
                              r"benchmark_items makes the items again"),
    (io.GENERATIONS, "generations.jsonl", r"delete \S+/generations\.jsonl, then run `snakemake --cores all` "
                                          r"again.*rule generate "
                                          r"writes it again from the replies kept in \S+/\.generations\.store\.jsonl"),
    (io.VERDICTS, "verdicts.jsonl", r"delete \S+/verdicts\.jsonl, then run `snakemake --cores all` "
                                    r"again.*rule score writes it "
                                    r"again from the verdicts kept in \S+/\.verdicts\.store\.jsonl"),
    (io.GENERATION_STORE, ".generations.store.jsonl", r"delete that line.*the items it held are generated again"),
    (io.VERDICT_STORE, ".verdicts.store.jsonl", r"delete that line.*the items it held are scored again"),
])
def test_the_corrupt_line_advice_says_what_restores_each_kind_of_file(tmp_path, kind, name, restores):
    """Deleting a line of a declared output does not restore it (its count and sha256 are recorded):
    the advice for those is to make the file again, with the command; a store's line can go."""
    p = tmp_path / name
    good = {k: "x" for k in kind.required}
    p.write_text(f"{json.dumps(good)}\n{{oops\n")
    with pytest.raises(CorruptLineError, match=rf"{re.escape(name)}:2: not a JSON record.*{restores}"):
        JsonlFile(p, kind).read()
    p.write_text(f"{json.dumps(good)}\n{{}}\n")  # an object without the kind's keys: named, never a KeyError later
    with pytest.raises(CorruptLineError, match=rf"{re.escape(name)}:2: a {kind.name} record without .*{restores}"):
        JsonlFile(p, kind).read()


@pytest.mark.parametrize("kind, name, meta", [(io.ITEMS, "items.jsonl", "items.json"),
                                              (io.GENERATIONS, "generations.jsonl", "generations.json"),
                                              (io.VERDICTS, "verdicts.jsonl", "metrics.json")])
def test_a_line_deleted_from_a_declared_file_is_an_error_naming_both_files(tmp_path, kind, name, meta):
    """The real writers' record beside the file (count and sha256): a file one line short is refused,
    naming the file, its record and what restores it."""
    from quantladder import generation
    from quantladder.benchmarks.base import read_items

    p = tmp_path / name
    records = [{**{k: f"{k}{i}" for k in kind.required}, "n": i} for i in range(4)]
    if kind is io.GENERATIONS:
        generation.write_outputs(generation.Result(records, {"generated": 4}), p, tmp_path / meta)
    else:
        JsonlFile(p, kind).write(records)
        io.write_json(tmp_path / meta, {kind.n_key: 4, kind.sha_key: io.sha256_file(p)})
    assert JsonlFile(p, kind).read_declared()[0] == records
    lines = p.read_text().splitlines(keepends=True)
    p.write_text("".join(lines[:2] + lines[3:]))  # what the old advice said: delete that line
    with pytest.raises(DataError, match=rf"{re.escape(str(p))} holds 3 records .* "
                                        rf"but {re.escape(str(tmp_path / meta))} "
                                        rf"records 4 .*changed after it was written.*delete {re.escape(str(p))}"):
        (read_items(p) if kind is io.ITEMS else JsonlFile(p, kind).read_declared())
    p.write_text("".join(lines[:3]) + lines[3][:-5])  # torn: a writer that never finished
    with pytest.raises(DataError, match="holds 3 records and a torn last line"):
        JsonlFile(p, kind).read_declared()


def test_damaged_json_files_name_themselves(tmp_path):
    """A truncated generations.json, a metrics.json without its keys or with a row that is not one:
    errors naming the file and the fix, never a bare traceback."""
    from quantladder import dataset

    g = tmp_path / "generations.json"
    g.write_text('{"benchmark": "humaneval", "gener')
    with pytest.raises(DataError, match=rf"{re.escape(str(g))}: not JSON .*delete it and run "
                                        r"`snakemake --cores all` again"):
        io.read_json(g)
    (tmp_path / "generations.jsonl").write_text("")
    with pytest.raises(DataError, match=re.escape(str(g))):
        JsonlFile(tmp_path / "generations.jsonl", io.GENERATIONS).read_declared()
    m = tmp_path / "metrics.json"
    m.write_text("{}")
    with pytest.raises(DataError, match=rf"{re.escape(str(m))}: no 'benchmark', 'rows', 'manifest'"):
        dataset.rows_from_point(m)
    m.write_text(json.dumps({"benchmark": "speed", "rows": [{}], "manifest": {}}))
    with pytest.raises(DataError, match=rf"{re.escape(str(m))}: rows\[0\] is not a metric row"):
        dataset.rows_from_point(m)


def test_a_full_disk_mid_append_keeps_every_record_already_written(tmp_path):
    """A real tiny tmpfs (in a user + mount namespace): appends until the disk is full, then the
    file holds only complete records, before any repair (the failed append cut its own partial line
    back), and the next append (after room is made) continues cleanly."""
    if not shutil.which("unshare"):
        pytest.fail("util-linux's unshare is needed for the full-disk test")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'workflow')!r})
        from quantladder.io import JsonlFile
        f = JsonlFile(sys.argv[1] + "/g.jsonl")
        n = 0
        try:
            while True:
                f.append({{"item_id": n, "text": "x" * 700}})
                n += 1
        except OSError as e:
            print("full after", n, e.errno)
        data = open(f.path, "rb").read()
        # the promise: a failed append truncates its own partial line (no repair needed)
        assert data.endswith(b"\\n") and data.count(b"\\n") == n, (len(data), data[-80:])
        recs = f.repair()
        assert [r["item_id"] for r in recs] == list(range(n)), (len(recs), n)
        print("ok", n)
    """)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=32k tmpfs {mnt} && {sys.executable} -c \"$0\" {mnt}",
           script]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "full after" in r.stdout and "ok" in r.stdout
    n = int(r.stdout.split("ok")[1])
    assert 20 <= n < 60  # about 32 KiB of 700-byte records


def test_a_killed_writers_temporary_file_is_removed_by_the_next(tmp_path):
    target = tmp_path / "Q4_K_M.gguf"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that no longer runs
    stale = tmp_path / f".{target.name}.{dead}.abc123.partial"
    stale.write_bytes(b"half a model")
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"GGUF")
    assert target.read_bytes() == b"GGUF" and not stale.exists()
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*.partial"))


def _humaneval(limit=3):
    b = benchmarks.create("humaneval", {"enabled": True, "limit": limit, "timeout_s": 10.0})
    src = b.fetch_source("x")
    items, _ = b.build_items(src, reference_gguf=None, family={})
    return b, src, items


def test_an_empty_generations_file_is_incomplete_never_complete(tmp_path):
    b, src, items = _humaneval()
    out = scoring.score(b, items, [], {"stopped": None}, key="k", store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    assert out.status == "incomplete" and out.reason.startswith("0 of 3 items scored")
    assert out.verdicts == [] and not any(r["metric"] == "pass_at_1" for r in out.rows)


def test_fewer_generations_than_items_is_incomplete_with_the_count(tmp_path):
    b, src, items = _humaneval()
    recs = [{"item_id": items[0].id, "text": "    return 1\n", "code": "    return 1\n", "n_gen_tokens": 3,
             "finish_reason": "stop"}]
    out = scoring.score(b, items, recs, {"stopped": "the benchmark's time_budget_s (1 s) ran out"}, key="k",
                        store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    assert out.status == "incomplete" and "1 of 3 items scored" in out.reason and "time_budget_s" in out.reason
    p1 = next(r for r in out.rows if r["metric"] == "pass_at_1")
    assert p1["n"] == 1


def test_generations_of_other_items_are_refused(tmp_path):
    from quantladder.errors import DataError

    b, src, items = _humaneval()
    with pytest.raises(DataError, match="not in the items file"):
        scoring.score(b, items, [{"item_id": "HumanEval/99", "text": ""}], {}, key="k", store_dir=tmp_path,
                      ctx=ScoringContext(Env(src)))


def test_scoring_resumes_from_its_store(tmp_path):
    """Verdicts are appended as they come: a rerun scores only what is missing (and a changed reply
    is scored again)."""
    b, src, items = _humaneval()
    recs = [{"item_id": it.id, "text": "    return None\n", "code": "    return None\n", "n_gen_tokens": 4,
             "finish_reason": "stop"} for it in items]
    first = scoring.score(b, items, recs, {}, key="k", store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    calls = []
    orig = b.verdicts
    b.verdicts = lambda its, gens, ctx: calls.append([i.id for i in its]) or orig(its, gens, ctx)
    again = scoring.score(b, items, recs, {}, key="k", store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    assert calls == [] and [v["correct"] for v in again.verdicts] == [v["correct"] for v in first.verdicts]
    recs[1] = {**recs[1], "code": "    return 0\n", "text": "    return 0\n"}
    scoring.score(b, items, recs, {}, key="k", store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    assert calls == [[items[1].id]]
    assert len(JsonlFile(tmp_path / scoring.STORE_NAME).read()) == 4


@pytest.mark.slow
def test_through_snakemake_a_torn_or_corrupt_store(tmp_path, smollm_q8):
    """The real generate/score rules. A store whose last record is torn, with the outputs gone (the
    job was killed mid-append): repaired, the torn item generated again, every planned item scored.
    A corrupt line in its middle: the job fails with one line naming file:line and the fix."""
    from test_code_e2e import N_ITEMS, _snakemake, make_workdir

    wd, d, target = make_workdir(tmp_path / "wd", smollm_q8)
    assert _snakemake(wd, target).returncode == 0
    store = d / ".generations.store.jsonl"
    lines = store.read_bytes().splitlines(keepends=True)
    assert len(lines) == N_ITEMS
    store.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])
    for name in ("generations.json", "generations.jsonl", "metrics.json", "verdicts.jsonl"):
        (d / name).unlink()
    proc = _snakemake(wd, target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (wd / "logs/generate/testcard/points/smollm2/Q8_0/f16/humaneval.log").read_text()
    assert "cut a torn last line" in log and f"{N_ITEMS - 1} already generated, 1 to go" in log
    import json

    assert json.loads((d / "generations.json").read_text())["complete"]
    assert len(read_jsonl(d / "verdicts.jsonl")) == N_ITEMS
    assert json.loads((d / "metrics.json").read_text())["status"] != "incomplete"
    lines = store.read_bytes().splitlines(keepends=True)
    store.write_bytes(lines[0] + b"{not json\n" + b"".join(lines[1:]))
    for name in ("generations.json", "generations.jsonl", "metrics.json"):
        (d / name).unlink()
    proc = _snakemake(wd, target)
    assert proc.returncode != 0
    assert ".generations.store.jsonl:2: not a JSON record" in proc.stderr and "delete that line" in proc.stderr


@pytest.mark.slow
def test_through_snakemake_a_line_deleted_from_a_declared_file_is_refused_and_the_advice_restores_it(
        tmp_path, smollm_q8):
    """Issue 32: deleting a damaged line of items.jsonl, as the old advice said, re-ran the family's
    points on fewer items, each looking complete; the same on generations.jsonl gave the wrong reason
    ("the generation stopped early"). Now each is refused naming both files, and the advice the
    error gives restores every planned item, run with the files the default target asks of a point."""
    import yaml

    from quantladder import targets
    from test_code_e2e import N_ITEMS, _snakemake, make_workdir

    wd, d, target = make_workdir(tmp_path / "wd", smollm_q8)
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    point = [targets.Target("testcard", "points", "smollm2", "Q8_0", "f16", "humaneval")]
    assert point[0].path == target
    default = [target, *targets.per_item_files(cfg, point), *targets.item_files(cfg, point)]
    assert _snakemake(wd, *default).returncode == 0
    items = wd / "resources/benchmarks/humaneval/smollm2/items.jsonl"
    for path, record in ((items, "items.json"), (d / "generations.jsonl", "generations.json")):
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:1] + lines[2:]))
        proc = _snakemake(wd, *default)
        assert proc.returncode != 0
        logs = proc.stderr + "".join(p.read_text() for p in (wd / "logs").rglob("*.log"))
        m = re.search(rf"{re.escape(str(path.relative_to(wd)))} holds {N_ITEMS - 1} records .* but \S*{record} records "
                      rf"{N_ITEMS} .*; (delete .*)", logs)
        assert m, logs[-3000:]
        assert "stopped early" not in logs
        for name in re.findall(r"delete (\S+)(?: and (\S+))?, then", m.group(1))[0]:  # what the advice says
            if name and (wd / name).exists():  # (a failed job's outputs are gone already)
                (wd / name).unlink()
        proc = _snakemake(wd, *default)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(JsonlFile(d / "generations.jsonl", io.GENERATIONS).read_declared()[0]) == N_ITEMS
        done = json.loads((d / "metrics.json").read_text())
        assert done["scored"] == N_ITEMS and done["status"] != "incomplete"
        for log in (wd / "logs").rglob("*.log"):
            log.unlink()
