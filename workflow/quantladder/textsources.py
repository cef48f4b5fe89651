"""Offline text: prose and code that ship with Python, and the text of a file a source names (an
installed package's data file, a local path, a pinned hub file).

Below both of its readers: the perplexity corpora (quantladder.corpora, which add the Debian
Reference, traffic files and the HumanEval conversations) and the exams that fill a context with
text (RULER's essay haystack and its offline word list, benchmarks.ruler.haystack). Nothing here
knows a benchmark.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from .errors import DataError
from .models import locate_package_file, resolve_source


def pydoc_topics_text() -> str:
    """English prose that every CPython ships (the pydoc help topics), in a fixed order."""
    return "\n\n".join(pydoc_topics()) + "\n"


def pydoc_topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k].strip("\n") for k in sorted(topics)]


def python_stdlib_files() -> list[tuple[str, str]]:
    """(name, source) of the standard library's top-level modules, sorted by name."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise DataError(f"{root}: no standard-library sources (*.py) found for the python-stdlib corpus")
    out = []
    for p in files:
        try:
            out.append((p.name, p.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # a module in another encoding (none in CPython 3.10+): not code text we compare
    return out


def stdlib_docstrings(files: list[tuple[str, str]]) -> list[str]:
    """One document per module: its module, class and function docstrings (cleaned as
    ``inspect.cleandoc`` does) in source order. English prose about code, no code."""
    import ast

    docs = []
    for name, src in files:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        parts = []
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node, clean=True)
                if d and d not in parts:
                    parts.append(d)
        if parts:
            docs.append("\n\n".join(parts))
    return docs


def file_text(source: dict) -> str:
    """The text of the file a source names (``package`` + ``file``, ``path`` or ``hf``), read as its
    ``format`` says: ``text`` (a ``.gz`` file unpacked) or ``parquet-text`` (the ``text`` column's
    rows joined as they stand)."""
    fmt = source.get("format", "text")
    if "package" in source:
        path = locate_package_file(source["package"], source.get("file", "*.txt"))
    elif "path" in source or "hf" in source:
        path = resolve_source(source)
    else:
        raise DataError(f"text source {source} names none of builtin/debian_reference/path/package/hf")
    path = Path(path)
    try:
        if fmt == "parquet-text":
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=["text"])
            return "".join(table.column("text").to_pylist())
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, KeyError, EOFError) as e:
        raise DataError(f"{path}: cannot read as a {fmt} corpus: {e}") from e
    except Exception as e:  # pyarrow raises its own error types
        raise DataError(f"{path}: cannot read as a {fmt} corpus: {type(e).__name__}: {e}") from e
