"""Perplexity corpora: a local text, a file in a package, text that ships with Python, or the hub.

wikitext-2 for real runs: the hub's ``Salesforce/wikitext`` parquet rows joined as they stand
reproduce ``wiki.test.raw``, the file llama-perplexity is usually run on.
"""

from __future__ import annotations

from pathlib import Path

from .errors import DataError
from .models import locate_package_file, resolve_source


def pydoc_topics_text() -> str:
    """English prose that every CPython ships (the pydoc help topics), in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip("\n") for k in sorted(topics)) + "\n"


def stdlib_docstrings_text() -> str:
    """English API prose that every CPython ships: the docstrings (over 200 characters) of the
    standard library's modules, classes and functions, read with ``ast`` (nothing imported), files
    in sorted order, tests skipped. Disjoint from the pydoc topics (the language reference), so it
    can calibrate importance matrices that are then scored on those."""
    import ast
    import os
    import sysconfig

    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__", "idle_test")
                         and not d.startswith("test"))
        for f in sorted(files):
            if not f.endswith(".py") or f.startswith("test"):
                continue
            try:
                tree = ast.parse(Path(dirpath, f).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) > 200:
                        out.append(doc)
    return "\n\n".join(out) + "\n"


def materialize(source: dict) -> str:
    if source.get("builtin") == "pydoc-topics":
        return pydoc_topics_text()
    if source.get("builtin") == "stdlib-docstrings":
        return stdlib_docstrings_text()
    fmt = source.get("format", "text")
    if "package" in source:
        path = locate_package_file(source["package"], source.get("file", "*.txt"))
    elif "path" in source or "hf" in source:
        path = resolve_source(source)
    else:
        raise DataError(f"corpus source {source} names none of builtin/path/package/hf")
    path = Path(path)
    try:
        if fmt == "parquet-text":
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=["text"])
            return "".join(table.column("text").to_pylist())
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, KeyError) as e:
        raise DataError(f"{path}: cannot read as a {fmt} corpus: {e}") from e
    except Exception as e:  # pyarrow raises its own error types
        raise DataError(f"{path}: cannot read as a {fmt} corpus: {type(e).__name__}: {e}") from e
