"""`quantladder diff`: two datasets compared figure by figure (quantladder.dataset_diff), on the dataset
the real producers and the real aggregate write (tests/fixtures/dataset)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from quantladder import cli, dataset_diff, metrics
from quantladder.errors import DataError


def _copy(src, dst, edit=None):
    df = pd.read_parquet(src)
    if edit is not None:
        df = edit(df)
    df.to_parquet(dst, index=False)
    return dst


def _where(df, **kv):
    m = pd.Series(True, index=df.index)
    for k, v in kv.items():
        m &= df[k].isna() if pd.isna(v) else df[k] == v
    assert m.sum() >= 1, kv
    return m


def test_a_dataset_equals_itself_and_its_clocked_figures_are_summarised(fixture_dataset, tmp_path, capsys):
    copy = _copy(fixture_dataset, tmp_path / "copy.parquet")
    r = dataset_diff.compare(fixture_dataset, copy)
    assert dataset_diff.equal(r) and not r["only_old"] and not r["only_new"]
    assert r["rows_both"] == len(pd.read_parquet(fixture_dataset))
    # the speed and memory rows are read off a clock: left out of the exact comparison, ratio 1 here
    assert {"tg_tokens_per_s", "pp_tokens_per_s", "peak_mem_bytes"} <= set(r["clocked"])
    assert r["clocked"]["tg_tokens_per_s"]["with_values"] > 0
    assert all(s["ratio_median"] == 1.0 for s in r["clocked"].values() if s["with_values"])
    assert r["compared"] == r["rows_both"] - sum(s["rows"] for s in r["clocked"].values()) > 0
    assert cli.main(["diff", str(fixture_dataset), str(copy)]) == 0
    assert "every compared figure is equal" in capsys.readouterr().out


def test_a_changed_figure_is_named_with_its_row_and_column(fixture_dataset, tmp_path, capsys):
    df = pd.read_parquet(fixture_dataset)
    row = df[(df.metric == "kld_mean") & df.value.notna()].iloc[0]

    def edit(d):
        m = _where(d, family=row.family, rung=row.rung, kv=row.kv, metric="kld_mean", subset=row.subset,
                   n_ctx=row.n_ctx)
        d.loc[m, "value"] = d.loc[m, "value"] * (1 + 1e-12)  # one part in 10^12: still a difference
        return d

    new = _copy(fixture_dataset, tmp_path / "new.parquet", edit)
    r = dataset_diff.compare(fixture_dataset, new)
    assert not dataset_diff.equal(r)
    assert [(d["family"], d["rung"], d["metric"], d["column"]) for d in r["differ"]] == [
        (row.family, row.rung, "kld_mean", "value")]
    assert dataset_diff.equal(dataset_diff.compare(fixture_dataset, new, rtol=1e-9))  # within a tolerance
    assert cli.main(["diff", str(fixture_dataset), str(new)]) == 1
    out = capsys.readouterr().out
    assert "DIFFER: 1 figures on 1 rows" in out and f"rung={row.rung}" in out and "metric=kld_mean" in out
    assert cli.main(["diff", "--json", str(fixture_dataset), str(new)]) == 1
    assert json.loads(capsys.readouterr().out)["differ"][0]["column"] == "value"


def test_a_clocked_figure_moves_without_a_difference_and_a_status_change_is_one(fixture_dataset, tmp_path):
    assert metrics.get("tg_tokens_per_s").clocked and not metrics.get("kld_mean").clocked

    def slower(d):
        d.loc[d.metric == "tg_tokens_per_s", "value"] *= 0.5
        return d

    r = dataset_diff.compare(fixture_dataset, _copy(fixture_dataset, tmp_path / "slow.parquet", slower))
    assert dataset_diff.equal(r) and r["clocked"]["tg_tokens_per_s"]["ratio_median"] == pytest.approx(0.5)

    def blocked(d):
        d.loc[d.metric == "tg_tokens_per_s", "status"] = "blocked"  # the status is not read off a clock
        return d

    r = dataset_diff.compare(fixture_dataset, _copy(fixture_dataset, tmp_path / "blocked.parquet", blocked))
    assert {d["column"] for d in r["differ"]} == {"status"}


def test_rows_one_dataset_holds_alone_are_listed_and_shared_compares_the_rest(fixture_dataset, tmp_path, capsys):
    df = pd.read_parquet(fixture_dataset)
    gone = df.rung.iloc[-1], df.family.iloc[-1]
    older = _copy(fixture_dataset, tmp_path / "older.parquet",
                  lambda d: d[~((d.rung == gone[0]) & (d.family == gone[1]))].drop(columns=["n_parallel"]))
    r = dataset_diff.compare(older, fixture_dataset)
    assert not r["only_old"] and r["only_new"] and all(f"{gone[1]} / {gone[0]} /" in k for k in r["only_new"])
    assert "n_parallel" not in r["columns_compared"]
    assert not dataset_diff.equal(r) and dataset_diff.equal(r, shared_only=True)
    assert cli.main(["diff", str(older), str(fixture_dataset)]) == 1
    assert cli.main(["diff", "--shared", str(older), str(fixture_dataset)]) == 0
    assert "rows only the new dataset holds" in capsys.readouterr().out


def test_what_is_no_dataset_is_refused_naming_the_file(tmp_path):
    with pytest.raises(DataError, match="nothing.parquet is no dataset"):
        dataset_diff.compare(tmp_path / "nothing.parquet", tmp_path / "nothing.parquet")
    other = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(other)
    with pytest.raises(DataError, match="other.parquet has no column"):
        dataset_diff.compare(other, other)
