"""The dataset is plain Parquet: DuckDB reads it with the documented columns and units."""

from pathlib import Path

import duckdb

from quantladder import dataset



def test_duckdb_reads_the_dataset_schema(fixture_dataset):
    con = duckdb.connect()
    cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{fixture_dataset}')").fetchall()]
    assert cols == [c for c, _, _ in dataset.COLUMNS]
    n_units = con.execute(f"SELECT count(*) FROM read_parquet('{fixture_dataset}') WHERE unit IS NULL").fetchone()[0]
    assert n_units == 0


def test_written_dataset_roundtrips(tmp_path):
    rows = [{**{c: None for c, _, _ in dataset.COLUMNS}, "card": "c", "family": "f", "rung": "Q4_K_M", "kv": "f16",
             "benchmark": "speed", "metric": "tg_tokens_per_s", "value": 100.0, "unit": "tokens/s", "stderr": 2.0,
             "status": "ok", "is_reference": False}]
    p = tmp_path / "points.parquet"
    dataset.write(rows, p)
    v = duckdb.connect().execute(f"SELECT value, stderr, unit FROM read_parquet('{p}')").fetchone()
    assert v == (100.0, 2.0, "tokens/s")
