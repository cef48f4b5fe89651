"""docs/dataset.md documents the dataset the report reads: its schema table is the code's, and its
pandas example runs."""

from __future__ import annotations

import re
from pathlib import Path

from quantladder.dataset import schema_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "dataset.md"


def test_schema_table_is_the_code_schema():
    assert schema_markdown() in DOC.read_text(), "docs/dataset.md is stale: paste `quantladder schema` into it"


def test_pandas_example_runs(fixture_dataset, capsys):
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    code = code.replace("results/cpu-test/points.parquet", str(fixture_dataset)).replace('"smollm2"', '"big"')
    exec(compile(code, str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert "tokens/s" in out and "q8_0" in out
