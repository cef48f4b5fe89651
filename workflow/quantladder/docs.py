"""Generated parts of the docs: ``python -m quantladder.docs`` rewrites them from the code.

docs/dataset.md holds the column table (``quantladder.dataset.COLUMNS``) and the metric table (the
metric registry) between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` markers; the tests
fail when they are stale, so the documented schema is always the written one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from . import catalog  # noqa: F401  -- every figure declared: the metric table is whole
from . import dataset, metrics

DATASET_DOC = Path(__file__).resolve().parents[2] / "docs" / "dataset.md"


def sections() -> dict[str, str]:
    return {"columns": dataset.schema_markdown(), "metrics": metrics.markdown()}


def render(text: str) -> str:
    for name, body in sections().items():
        pat = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
        if not pat.search(text):
            raise ValueError(f"{DATASET_DOC}: no <!-- generated: {name} --> section")
        text = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    text = DATASET_DOC.read_text()
    new = render(text)
    if new != text:
        DATASET_DOC.write_text(new)
        print(f"rewrote {DATASET_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
